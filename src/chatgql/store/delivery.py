"""The delivered watermark (0011): delivered_seq, monotonic and clamped like the read one.

What counts as delivered is GREATEST(delivered_seq, last_read_seq): read implies delivered, so
markRead and sends never write delivered_seq, and their statements are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..db import Connection, Row

DELIVERED = "GREATEST(m.delivered_seq, m.last_read_seq)"


async def advance_delivered(
    conn: Connection,
    user_id: str,
    conversation_ids: list[int],
    seqs: list[int],
    events: list[dict],
    whole_up_to: int,
    keys: Sequence[str],
) -> list[Row]:
    """Raise user_id's delivered watermark in each conversation to min(seq, lastSeq), never lower
    (conversation ids distinct), in one statement (one transaction even in autocommit); each key
    that moved writes its delivery.updated event (events[i], its store field filled in under keys[0]), unless its
    conversation has more than whole_up_to members (big groups: no delivery events).

    Rows (conversation_id, last_seq, delivered_seq, moved) for the keys user_id is a member of
    (delivered_seq: GREATEST(delivered, read) after the statement, as this statement saw it).
    The rows that will move are locked in conversation order first (as store.reads.advance_watermarks
    does: two statements over the same rows never deadlock)."""
    return await conn.fetch(
        f"""
        WITH req AS (
            SELECT * FROM unnest($2::bigint[], $3::bigint[], $4::jsonb[]) AS r(cid, seq, event)
        ), snap AS (
            SELECT r.cid, r.event, c.last_seq, c.member_count, LEAST(r.seq, c.last_seq) AS target,
                   {DELIVERED} AS current, m.receipts_private AS private
              FROM req r
              JOIN conversation_member m ON m.conversation_id = r.cid AND m.user_id = $1
              JOIN conversation c ON c.id = r.cid
        ), locked AS (
            SELECT m.conversation_id AS cid
              FROM snap s
              JOIN conversation_member m ON m.conversation_id = s.cid AND m.user_id = $1
             WHERE s.current < s.target AND NOT s.private  -- private receipts: nothing recorded (0011b)
             ORDER BY m.conversation_id
               FOR UPDATE OF m
        ), moved AS (
            UPDATE conversation_member m SET delivered_seq = s.target
              FROM locked l JOIN snap s ON s.cid = l.cid
             WHERE m.conversation_id = l.cid AND m.user_id = $1 AND {DELIVERED} < s.target
            RETURNING m.conversation_id AS cid, m.delivered_seq
        ), event AS (
            INSERT INTO outbox (msg_key, payload)
            SELECT mv.cid::text, s.event || jsonb_build_object(($6::text[])[1], mv.delivered_seq)
              FROM moved mv JOIN snap s ON s.cid = mv.cid
             WHERE s.member_count <= $5
             ORDER BY mv.cid
        )
        SELECT s.cid AS conversation_id, s.last_seq, COALESCE(mv.delivered_seq, s.current) AS delivered_seq,
               mv.cid IS NOT NULL AS moved, s.member_count
          FROM snap s LEFT JOIN moved mv ON mv.cid = s.cid
        """,
        user_id,
        conversation_ids,
        seqs,
        events,
        whole_up_to,
        keys,
    )


async def delivered_marks(conn: Connection, conversation_ids: Sequence[int], whole_up_to: int) -> list[Row]:
    """(conversation_id, user_id, delivered) of every member of the conversations among ids with at
    most whole_up_to members (delivered: GREATEST(delivered, read)); bigger groups have no rows:
    O(members) only where that is bounded by the threshold."""
    return await conn.fetch(
        f"""
        SELECT m.conversation_id, m.user_id, {DELIVERED} AS delivered
          FROM conversation c
          JOIN conversation_member m ON m.conversation_id = c.id
         WHERE c.id = ANY($1::bigint[]) AND c.member_count <= $2
        """,
        list(conversation_ids),
        whole_up_to,
    )


async def members_of(conn: Connection, conversation_ids: list[int], user_ids: list[str]) -> set[tuple[int, int]]:
    """Which of the (conversation, user) keys are memberships."""
    rows = await conn.fetch(
        """
        SELECT m.conversation_id, m.user_id
          FROM unnest($1::bigint[], $2::text[]) AS r(cid, uid)
          JOIN conversation_member m ON m.conversation_id = r.cid AND m.user_id = r.uid
        """,
        conversation_ids,
        user_ids,
    )
    return {(row["conversation_id"], row["user_id"]) for row in rows}


async def advance_delivered_many(
    conn: Connection,
    conversation_ids: list[int],
    user_ids: list[str],
    seqs: list[int],
    events: list[dict],
    whole_up_to: int,
    keys: Sequence[str],
) -> list[Row]:
    """advance_delivered for many (conversation, user) keys (distinct) in one statement: the same
    monotonic, clamped guard per key, one delivery.updated outbox row per key that moved (not in
    conversations of more than whole_up_to members), its store field filled in under keys[0].

    Rows (conversation_id, user_id, last_seq, delivered_seq, moved, before, member_count) for the
    keys that are memberships; before: GREATEST(delivered, read) just before this statement raised
    it (exact: the row is locked first), equal to delivered_seq when it did not move. Rows are
    locked in key order (two flushes never deadlock)."""
    return await conn.fetch(
        f"""
        WITH req AS (
            SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::jsonb[]) AS r(cid, uid, seq, event)
        ), snap AS (
            SELECT r.cid, r.uid, r.event, c.last_seq, c.member_count, LEAST(r.seq, c.last_seq) AS target,
                   {DELIVERED} AS current, m.receipts_private AS private
              FROM req r
              JOIN conversation_member m ON m.conversation_id = r.cid AND m.user_id = r.uid
              JOIN conversation c ON c.id = r.cid
        ), locked AS (
            SELECT m.conversation_id AS cid, m.user_id AS uid, {DELIVERED} AS before
              FROM snap s
              JOIN conversation_member m ON m.conversation_id = s.cid AND m.user_id = s.uid
             WHERE s.current < s.target AND NOT s.private  -- private receipts: nothing recorded
             ORDER BY m.conversation_id, m.user_id
               FOR UPDATE OF m
        ), moved AS (
            UPDATE conversation_member m SET delivered_seq = s.target
              FROM locked l JOIN snap s ON s.cid = l.cid AND s.uid = l.uid
             WHERE m.conversation_id = l.cid AND m.user_id = l.uid AND {DELIVERED} < s.target
            RETURNING m.conversation_id AS cid, m.user_id AS uid, m.delivered_seq
        ), event AS (
            INSERT INTO outbox (msg_key, payload)
            SELECT mv.cid::text, s.event || jsonb_build_object(($6::text[])[1], mv.delivered_seq)
              FROM moved mv JOIN snap s ON s.cid = mv.cid AND s.uid = mv.uid
             WHERE s.member_count <= $5
             ORDER BY mv.cid, mv.uid
        )
        SELECT s.cid AS conversation_id, s.uid AS user_id, s.last_seq, s.member_count,
               GREATEST(COALESCE(mv.delivered_seq, l.before, s.current), COALESCE(l.before, s.current)) AS delivered_seq,
               mv.cid IS NOT NULL AS moved,
               COALESCE(l.before, s.current) AS before
          FROM snap s
          LEFT JOIN locked l ON l.cid = s.cid AND l.uid = s.uid
          LEFT JOIN moved mv ON mv.cid = s.cid AND mv.uid = s.uid
        """,
        conversation_ids,
        user_ids,
        seqs,
        events,
        whole_up_to,
        list(keys),
    )
