"""conversation_member: the viewer's own settings (mute, archive, pin), own unread start, ADMIN

Revision ID: 0011
Revises: 0009
Create Date: 2026-12-01

Per-member settings, read with the membership row the inbox and a conversation already
read (no new statement, no new index: the inbox page reads every membership row of the
viewer anyway, by conversation_member_user_id_idx):

- muted, muted_until: muted when `muted AND (muted_until IS NULL OR muted_until > now())`
  (no write when a mute expires); muted conversations are left out of Viewer.totalUnread
  and unreadConversations.
- archived_seq, keep_archived: archived as of the conversation's lastSeq when it was
  archived; a later message brings it back to the default inbox (last_seq > archived_seq)
  unless keep_archived. Nothing is written on the send path.
- pinned_at: when it was pinned (null: not pinned); pinned conversations come first in the
  inbox, in the order they were pinned.
- own_read_seq, own_read_below: markUnread's rewind of the member's own unread start.
  The public watermark (last_read_seq, what others see as seen / seenBy) never moves back;
  the member's own read position is own_read_seq while last_read_seq is still
  own_read_below (the watermark when it was set), else last_read_seq: any later advance
  of the watermark (markRead beyond it, or the member's own send) ends the rewind with no
  write on the send path.
- delivered_seq: the delivered watermark (markDelivered), monotonic and clamped like the read
  one; what counts as delivered is GREATEST(delivered_seq, last_read_seq) (read implies
  delivered, so markRead and sends never write it). Not indexed: markRead's update stays as
  it is (deliveredCount reads the members of groups up to the big-group threshold only).

Every column is nullable or has a constant default: adding them is instant (no rewrite).

- role ADMIN (between OWNER and MEMBER: renames a group, changes roles): the role check
  is replaced NOT VALID (no scan under the table's exclusive lock), then validated (a scan
  that lets reads and writes go on).
"""

from alembic import op

revision = "0011"
down_revision = "0009"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("muted", "boolean NOT NULL DEFAULT false"),
    ("muted_until", "timestamptz"),
    ("archived_seq", "bigint"),
    ("keep_archived", "boolean NOT NULL DEFAULT false"),
    ("pinned_at", "timestamptz"),
    ("own_read_seq", "bigint"),
    ("own_read_below", "bigint"),
    ("delivered_seq", "bigint NOT NULL DEFAULT 0"),
)


def upgrade() -> None:
    op.execute("ALTER TABLE conversation_member " + ", ".join(f"ADD COLUMN {name} {kind}" for name, kind in _COLUMNS))
    _role_check("'OWNER', 'ADMIN', 'MEMBER'")


def _role_check(roles: str) -> None:
    op.execute(
        "ALTER TABLE conversation_member DROP CONSTRAINT conversation_member_role_check,"
        f" ADD CONSTRAINT conversation_member_role_check CHECK (role IN ({roles})) NOT VALID"
    )
    op.execute("ALTER TABLE conversation_member VALIDATE CONSTRAINT conversation_member_role_check")


def downgrade() -> None:
    op.execute("UPDATE conversation_member SET role = 'MEMBER' WHERE role = 'ADMIN'")
    _role_check("'OWNER', 'MEMBER'")
    op.execute("ALTER TABLE conversation_member " + ", ".join(f"DROP COLUMN {name}" for name, _ in _COLUMNS))
