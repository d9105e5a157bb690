"""blocks and app-wide bans: user_block, user_ban; chat_send and chat_send_batch refuse them

Revision ID: 0021_blocks
Revises: 0020_send_verdicts
Create Date: 2026-12-07

- user_block (blocker_id, blocked_id): who blocked whom (blockUser). A direct conversation with a
  block between its two members takes no message; neither may add the other to a group
  (docs/guide/moderation.md).
- user_ban (user_id): an app-wide ban by the operator (`chatgql ban`), until `until` (NULL: until
  lifted). A banned user's token is refused and their sends store nothing.
- chat_send and chat_send_batch answer 'banned' and 'blocked' and store nothing. A send takes its
  sender's ban lock shared (advisory, 7261304 and hashtext(user id)); a ban takes it exclusively,
  so no send of the user commits after the ban has. A block locks the direct conversation's row,
  which every send to it locks first. New empty tables: nothing scanned or rewritten.
"""

from alembic import op

from chatgql.db import function_source

revision = "0021_blocks"
down_revision = "0020_send_verdicts"
branch_labels = None
depends_on = None

FUNCTIONS = ("chat_send", "chat_send_batch")


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE user_block (
            blocker_id text COLLATE "C" NOT NULL,
            blocked_id text COLLATE "C" NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (blocker_id, blocked_id),
            CONSTRAINT user_block_other_check CHECK (blocker_id <> blocked_id)
        )
        """
    )
    op.execute("CREATE INDEX user_block_blocked_idx ON user_block (blocked_id, blocker_id)")
    op.execute(
        """
        CREATE TABLE user_ban (
            user_id text COLLATE "C" PRIMARY KEY,
            until timestamptz,
            banned_by text NOT NULL,
            reason text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    for name in FUNCTIONS:
        op.execute(function_source(name, revision))


def downgrade() -> None:
    for name in FUNCTIONS:
        op.execute(function_source(name, "0019_slow_mode"))
    op.execute("DROP TABLE user_ban")
    op.execute("DROP TABLE user_block")
