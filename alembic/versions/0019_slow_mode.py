"""slow mode: conversation.slow_mode_seconds, conversation_member.last_sent_at, chat_send's check

Revision ID: 0019_slow_mode
Revises: 0018_conversation_bans
Create Date: 2026-12-07

A group's OWNER or an ADMIN sets slow mode (services/moderation.py): a MEMBER may send once per
slow_mode_seconds (0: off). chat_send checks it under the conversation's lock, against the
member's last_sent_at (written by chat_send while slow mode is on), so it holds across processes;
chat_send_batch leaves a slow conversation's sends to chat_send. Two columns, a constant default and
a null: nothing rewritten.
"""

from alembic import op

from chatgql.db import function_source

revision = "0019_slow_mode"
down_revision = "0018_conversation_bans"
branch_labels = None
depends_on = None

FUNCTIONS = ("chat_send", "chat_send_batch")


def upgrade() -> None:
    op.execute(
        "ALTER TABLE conversation ADD COLUMN slow_mode_seconds integer NOT NULL DEFAULT 0"
        " CONSTRAINT conversation_slow_mode_seconds_check CHECK (slow_mode_seconds >= 0)"
    )
    op.execute("ALTER TABLE conversation_member ADD COLUMN last_sent_at timestamptz")
    for name in FUNCTIONS:
        op.execute(function_source(name, revision))


def downgrade() -> None:
    for name in FUNCTIONS:
        op.execute(function_source(name, "0016_function_sources"))
    op.execute("ALTER TABLE conversation_member DROP COLUMN last_sent_at")
    op.execute("ALTER TABLE conversation DROP COLUMN slow_mode_seconds")
