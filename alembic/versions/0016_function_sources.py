"""stored functions from their sources: alembic/functions/*.sql

Revision ID: 0016_function_sources
Revises: 0015_webhook_dead_key
Create Date: 2026-12-06

Every stored function's current text now lives whole in alembic/functions/NAME.sql, and this
migration installs them from there: the same functions as 0015 left (only the trigger bodies'
indentation differs), so nothing changes for a database already at 0015. A later change of a
function edits its file and adds a migration that installs it (docs/development/migrations.md).
"""

from alembic import op

from chatgql.db import function_source

revision = "0016_function_sources"
down_revision = "0015_webhook_dead_key"
branch_labels = None
depends_on = None

FUNCTIONS = (
    "chat_send",
    "chat_send_batch",
    "conversation_member_count_added",
    "conversation_member_count_removed",
    "conversation_member_unread_deleted",
)


def upgrade() -> None:
    for name in FUNCTIONS:
        op.execute(function_source(name, revision))


def downgrade() -> None:
    """0015's functions are these, but for whitespace: nothing to undo."""
