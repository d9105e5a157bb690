"""thread versions: what changed in a member's threads of a conversation, for catch-up

Revision ID: 0032_thread_versions
Revises: 0031_presence
Create Date: 2026-12-07

A device that was offline learns which of its threads changed (docs/guide/threads.md#catch-up): every
change of a member's state of a thread (a reply in a thread they follow, their markThreadRead that moved
the watermark, followThread, unfollowThread, a deleted reply in a thread they follow) takes the member's
next version in that conversation from thread_clock and writes it, with the change's kind, on their
thread_member row. thread_clock's row is taken with INSERT ... ON CONFLICT DO UPDATE and held until
commit, so a member's versions in a conversation commit in order: sync(afterThreadVersion:) and
threadUpdated(cursors:) read the rows above a version, on thread_member_version_idx, with no gap.

The clock is per (conversation, member), not per member: a change locks only the clocks of its own
conversation's members, in one fixed order (thread rows, then clocks, then thread_member rows), so changes
in different conversations never wait on each other. A new table, two columns with a default (no
rewrite) and an index on thread_member.
"""

from alembic import op

revision = "0032_thread_versions"
down_revision = "0031_presence"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE thread_clock (
            conversation_id bigint NOT NULL,
            user_id text COLLATE "C" NOT NULL,
            version bigint NOT NULL,
            PRIMARY KEY (conversation_id, user_id)
        )
        """
    )
    op.execute("ALTER TABLE thread_member ADD COLUMN version bigint NOT NULL DEFAULT 0")
    op.execute(
        """
        ALTER TABLE thread_member ADD COLUMN last_change text
            CONSTRAINT thread_member_last_change_check
            CHECK (last_change IN ('REPLY', 'READ', 'FOLLOW', 'UNFOLLOW', 'DELETE'))
        """
    )
    op.execute("CREATE INDEX thread_member_version_idx ON thread_member (conversation_id, user_id, version)")


def downgrade() -> None:
    op.execute("DROP INDEX thread_member_version_idx")
    op.execute("ALTER TABLE thread_member DROP COLUMN last_change")
    op.execute("ALTER TABLE thread_member DROP COLUMN version")
    op.execute("DROP TABLE thread_clock")
