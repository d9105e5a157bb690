"""history visibility: conversation.hide_history, conversation_member.visible_from_seq

Revision ID: 0024_history_visibility
Revises: 0023_persisted_documents
Create Date: 2026-12-07

A group's OWNER or an ADMIN chooses whether members who join later read the history from before
their join (services/moderation.py). Each member row holds the first seq its member may read,
visible_from_seq: 1 (everything) unless the member was added while the group hid its history
(then the lastSeq at the join, plus one); a later change of the setting leaves it as it is. Two
columns with constant defaults: nothing rewritten.
"""

from alembic import op

revision = "0024_history_visibility"
down_revision = "0023_persisted_documents"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE conversation ADD COLUMN hide_history boolean NOT NULL DEFAULT false")
    op.execute(
        "ALTER TABLE conversation_member ADD COLUMN visible_from_seq bigint NOT NULL DEFAULT 1"
        " CONSTRAINT conversation_member_visible_from_seq_check CHECK (visible_from_seq >= 1)"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE conversation_member DROP COLUMN visible_from_seq")
    op.execute("ALTER TABLE conversation DROP COLUMN hide_history")
