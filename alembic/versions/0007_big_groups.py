"""big groups: a stored member count and an index for "seen by" counts

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

Groups of up to 100,000 members must not cost O(members) per call:

- conversation.member_count: the number of conversation_member rows, kept by
  statement-level triggers on conversation_member (one UPDATE per INSERT or
  DELETE statement, whatever writes it: the services, the benchmark's seed).
  addMembers checks the cap against it under the conversation lock instead of
  counting every member; memberCount reads it; the live path uses it to tell a
  big group (CHATGQL_BIG_GROUP_THRESHOLD) from a small one. Every writer of
  members already holds (or has just created) the conversation row, so the
  trigger's UPDATE takes no lock a membership change did not already hold.
  Backfilled from the existing rows.
- conversation_member_read_idx on (conversation_id, last_read_seq) INCLUDE
  (user_id): seenByCount (members other than the sender with
  last_read_seq >= seq) and seen (the lowest watermark among the others) are
  index-only scans of it, not reads of the whole member list. markRead's
  update can no longer be a HOT update (it now changes an indexed column): the
  price of an O(readers) seenByCount in a 100,000-member group.
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE conversation ADD COLUMN member_count integer NOT NULL DEFAULT 0")
    op.execute(
        """
        UPDATE conversation c SET member_count = m.n
          FROM (SELECT conversation_id, count(*) AS n FROM conversation_member GROUP BY 1) m
         WHERE m.conversation_id = c.id
        """
    )
    op.execute(
        """
        CREATE FUNCTION conversation_member_count_added() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE conversation c SET member_count = c.member_count + d.n
              FROM (SELECT conversation_id, count(*) AS n FROM added GROUP BY 1) d
             WHERE c.id = d.conversation_id;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE FUNCTION conversation_member_count_removed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE conversation c SET member_count = c.member_count - d.n
              FROM (SELECT conversation_id, count(*) AS n FROM removed GROUP BY 1) d
             WHERE c.id = d.conversation_id;
            RETURN NULL;
        END $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER conversation_member_count_insert AFTER INSERT ON conversation_member
        REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION conversation_member_count_added()
        """
    )
    op.execute(
        """
        CREATE TRIGGER conversation_member_count_delete AFTER DELETE ON conversation_member
        REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION conversation_member_count_removed()
        """
    )
    op.execute(
        "CREATE INDEX conversation_member_read_idx ON conversation_member (conversation_id, last_read_seq)"
        " INCLUDE (user_id)"
    )


def downgrade() -> None:
    op.execute("DROP INDEX conversation_member_read_idx")
    op.execute("DROP TRIGGER conversation_member_count_delete ON conversation_member")
    op.execute("DROP TRIGGER conversation_member_count_insert ON conversation_member")
    op.execute("DROP FUNCTION conversation_member_count_removed()")
    op.execute("DROP FUNCTION conversation_member_count_added()")
    op.execute("ALTER TABLE conversation DROP COLUMN member_count")
