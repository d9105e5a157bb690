"""who created a group, to count the groups a user created in the last 24 hours

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

createGroup refuses a user's group beyond CHATGQL_MAX_GROUPS_PER_DAY. The count
lives in PostgreSQL so that it holds across restarts and API processes. Rows
written before this revision (and DIRECT conversations) have no creator: they
count for nobody. Adding a nullable column is a catalog change (no rewrite);
the partial index holds GROUP rows with a creator only.
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE conversation ADD COLUMN created_by bigint")
    op.execute(
        """
        CREATE INDEX conversation_created_by_idx ON conversation (created_by, created_at)
         WHERE type = 'GROUP' AND created_by IS NOT NULL
        """
    )


def downgrade() -> None:
    op.execute("DROP INDEX conversation_created_by_idx")
    op.execute("ALTER TABLE conversation DROP COLUMN created_by")
