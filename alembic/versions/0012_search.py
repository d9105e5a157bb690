"""search: a GIN index of each message's conversation and body words, for full-text search

Revision ID: 0012_search
Revises: 0010d
Create Date: 2026-12-02

message_search_idx is GIN (conversation_id, to_tsvector('simple', body)): the conversation is a key of
the index beside the words (btree_gin, a contrib extension every managed PostgreSQL offers, trusted
since PostgreSQL 13), so a search within one conversation intersects that conversation's entries with
the word's in the index, instead of reading every match of a common word in the whole partition
(bench/results/search.md measured both). An expression index, not a stored tsvector column: adding a stored (generated) column would rewrite
every row of message under its exclusive lock, and make every row larger; the index is built from the
rows as they are and the search repeats its expression (store/search.py). 'simple' is language-neutral
(lower-cased words, no stemming, no stop words): a chat holds many languages at once; the index's
configuration is fixed by its expression (changing it is a new index). The index follows the body:
an edit re-indexes the new body, a delete erases the body (a tombstone's '' has no words).

Building it reads the whole message table once, each partition in turn under a lock that blocks writes
(sends) to it while it builds (bench/results/search.md has the time on 10 million rows). On a large
table, create the index on each partition CONCURRENTLY first: the CREATE INDEX on the parent then only
attaches them (docs/operating/upgrading.md).
"""

from alembic import op

revision = "0012_search"
down_revision = "0010d"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    op.execute("CREATE INDEX message_search_idx ON message USING gin (conversation_id, to_tsvector('simple', body))")


def downgrade() -> None:
    op.execute("DROP INDEX message_search_idx")  # btree_gin stays: something else may use it
