"""private read receipts: a user setting, optionally per conversation

Revision ID: 0011b
Revises: 0011a
Create Date: 2026-12-02

- user_setting(user_id, private_receipts): the user's default.
- conversation_member.receipts_override: the member's choice for this conversation (null: the
  user's default); receipts_private: what applies, kept on the row (set from the default when
  the member is added, and when either changes) so that markRead reads no other table: with
  it, markRead moves only the member's own read position (0011's own_read_seq), never the
  watermark others see (seen, seenBy, seenByCount), and markDelivered records nothing.
Constant defaults and a new table: nothing is rewritten.
"""

from alembic import op

revision = "0011b"
down_revision = "0011a"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE TABLE user_setting (user_id bigint PRIMARY KEY, private_receipts boolean NOT NULL DEFAULT false)"
    )
    op.execute(
        "ALTER TABLE conversation_member ADD COLUMN receipts_override boolean,"
        " ADD COLUMN receipts_private boolean NOT NULL DEFAULT false"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE conversation_member DROP COLUMN receipts_private, DROP COLUMN receipts_override")
    op.execute("DROP TABLE user_setting")
