"""Full-text search of message bodies (migration 0012_search: a GIN index of to_tsvector('simple', body)).

The order of hits is newest first: (created_at, conversation_id, seq) descending. Within a
conversation created_at never decreases with seq (chat_send), so each conversation's hits come
newest first from its primary key, and a page across conversations merges one bounded probe per
conversation: no statement reads more than `limit` hits of any one conversation.
"""

from __future__ import annotations

from datetime import datetime

from ..db import Connection, Row
from .messages import MESSAGE_COLUMNS

# The index's expression: a search must repeat it exactly for PostgreSQL to use the index.
_WORDS = "to_tsvector('simple', body)"
_NO_BOUND = 2**63 - 1

# A hit key is (created_at, conversation_id, seq); $3..$5 is the page's bound, exclusive.
_OLDER = f"""
    SELECT {MESSAGE_COLUMNS} FROM message
     WHERE conversation_id = cm.conversation_id AND deleted_at IS NULL AND {_WORDS} @@ $2::tsquery
       AND seq >= cm.visible_from_seq
       AND seq < CASE WHEN cm.conversation_id = $4 THEN $5 ELSE {_NO_BOUND} END
       AND (created_at, conversation_id, seq) < (coalesce($3::timestamptz, 'infinity'), $4, $5)
     ORDER BY seq DESC
     LIMIT $6
"""
_NEWER = f"""
    SELECT 1 FROM message
     WHERE conversation_id = cm.conversation_id AND deleted_at IS NULL AND {_WORDS} @@ $2::tsquery
       AND seq >= cm.visible_from_seq
       AND seq >= CASE WHEN cm.conversation_id = $4 THEN $5 ELSE 0 END
       AND (created_at, conversation_id, seq) >= ($3, $4, $5)
     LIMIT 1
"""


async def parse_query(conn: Connection, text: str, prefix: str | None = None) -> str:
    """The tsquery of a user's search text, as text: websearch_to_tsquery (quotes for phrases, `or`,
    `-word`; never a syntax error), and with prefix, one more word matched as a prefix (`word:*`).
    '' when the text has no words (only punctuation, say): such a query matches nothing."""
    return await conn.fetchval(
        """
        SELECT CASE WHEN $2::text IS NULL THEN websearch_to_tsquery('simple', $1)
                    ELSE websearch_to_tsquery('simple', $1) && to_tsquery('simple', quote_literal($2) || ':*')
               END::text
        """,
        text,
        prefix,
    )


async def hits(
    conn: Connection,
    viewer_id: str,
    tsquery: str,
    limit: int,
    before: tuple[datetime, int, int] | None = None,
    conversation_id: int | None = None,
) -> list[Row]:
    """At most limit messages matching tsquery (parse_query's) in the conversations viewer_id is a member
    of (or in conversation_id only, when the viewer is a member), newest first, older than the hit key
    before (exclusive) when given. Tombstones are never found, nor messages from before the viewer's join to a
    group that hid its history (visible_from_seq)."""
    at, cid, seq = before if before is not None else (None, _NO_BOUND, _NO_BOUND)
    only = "" if conversation_id is None else "AND cm.conversation_id = $7"
    return await conn.fetch(
        f"""
        SELECT m.* FROM conversation_member cm
        CROSS JOIN LATERAL ({_OLDER}) m
         WHERE cm.user_id = $1 {only}
         ORDER BY m.created_at DESC, m.conversation_id DESC, m.seq DESC
         LIMIT $6
        """,
        viewer_id,
        tsquery,
        at,
        cid,
        seq,
        limit,
        *(() if conversation_id is None else (conversation_id,)),
    )


async def any_hit_from(
    conn: Connection, viewer_id: str, tsquery: str, key: tuple[datetime, int, int], conversation_id: int | None = None
) -> bool:
    """Whether a hit as new as the hit key or newer exists (what hits(before=key) leaves out)."""
    only = "" if conversation_id is None else "AND cm.conversation_id = $6"
    return bool(
        await conn.fetchval(
            f"""
            SELECT EXISTS (
                SELECT 1 FROM conversation_member cm
                 WHERE cm.user_id = $1 {only} AND EXISTS ({_NEWER})
            )
            """,
            viewer_id,
            tsquery,
            *key,
            *(() if conversation_id is None else (conversation_id,)),
        )
    )
