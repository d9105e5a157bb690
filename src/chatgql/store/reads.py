"""Read state: one watermark per member."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from ..db import Connection, Row
from . import key_literal
from .conversations import OWN_READ, UNREAD_DELETED

# A watermark raised to {target} below the member's own read position (private receipts turned off after
# a markRead moved only the own one) keeps that position: markRead never lowers it. The own position
# holds while own_read_below is the watermark (store.conversations.OWN_READ), so it follows the watermark;
# otherwise it is left, and the raised watermark ends any markUnread rewind.
_KEEP_OWN_READ = (
    "CASE WHEN m.own_read_seq IS NOT NULL AND m.own_read_below = m.last_read_seq AND m.own_read_seq > {target}"
    " THEN {target} ELSE m.own_read_below END"
)

# The statements below complete the read.updated payload the service passes in with the one key
# its definition leaves to the store, 'lastReadSeq' (events/types.py: ReadUpdated.last_read_seq),
# as chat_send does for its events; tests/events/test_event_types.py checks both.


async def advance_watermark(
    conn: Connection, conversation_id: int, user_id: str, seq: int, event: dict, keys: Sequence[str]
) -> Row | None:
    """The monotonic, clamped update of DESIGN.md, and its read.updated outbox
    row, in one statement (so one transaction even in autocommit).

    Returns (last_read_seq, last_seq, own_read, unread_deleted) when the watermark moved forward; None
    when it did not (a seq at or below it, nothing newer, or not a member),
    and then no event is written. Concurrent calls serialise on the member
    row and re-check the condition, so the watermark only takes the maximum.
    event: the read.updated payload (ReadUpdated.payload()); its store field is filled in here, under
    keys[0] (ReadUpdated.store_keys(): the store names no event key).
    """
    return await conn.fetchrow(_advance_watermark_sql(keys[0]), conversation_id, user_id, seq, event)


@functools.lru_cache(maxsize=16)
def _advance_watermark_sql(key: str) -> str:
    """advance_watermark's statement, its key spliced in (store.key_literal)."""
    return f"""
        WITH moved AS (
            UPDATE conversation_member m SET last_read_seq = LEAST($3::bigint, c.last_seq),
                   own_read_below = {_KEEP_OWN_READ.format(target="LEAST($3::bigint, c.last_seq)")}
              FROM conversation c
             WHERE c.id = m.conversation_id AND m.conversation_id = $1::bigint AND m.user_id = $2::text
               AND m.last_read_seq < LEAST($3::bigint, c.last_seq)
               AND NOT m.receipts_private  -- private receipts: the own read position only (services/reads.py)
            RETURNING m.last_read_seq, c.last_seq, {OWN_READ} AS own_read, {UNREAD_DELETED} AS unread_deleted
        ), event AS (
            INSERT INTO outbox (msg_key, payload)
            SELECT ($1::bigint)::text, $4::jsonb || jsonb_build_object({key_literal(key)}, moved.last_read_seq)
              FROM moved
        )
        SELECT last_read_seq, last_seq, own_read, unread_deleted FROM moved
        """


async def watermark(conn: Connection, conversation_id: int, user_id: str) -> Row | None:
    """(last_read_seq, last_seq, own_read, unread_deleted) for a member; None when user_id is not a member.
    own_read: the member's own read position (below last_read_seq after a markUnread); unread_deleted:
    the deleted messages above it."""
    return await conn.fetchrow(
        f"""
        SELECT m.last_read_seq, c.last_seq, {OWN_READ} AS own_read, {UNREAD_DELETED} AS unread_deleted
          FROM conversation_member m
          JOIN conversation c ON c.id = m.conversation_id
         WHERE m.conversation_id = $1 AND m.user_id = $2
        """,
        conversation_id,
        user_id,
    )


async def first_unread(conn: Connection, user_id: str, conversation_ids: Sequence[int]) -> list[Row]:
    """(conversation_id, first_unread_seq) of user_id in the conversations among ids they are in: the
    first message after their own read position that is neither deleted nor a thread-only reply (null when
    there is none), one index range per conversation that stops at the first such message."""
    return await conn.fetch(
        f"""
        SELECT m.conversation_id,
               (SELECT x.seq FROM message x
                 WHERE x.conversation_id = m.conversation_id AND x.seq > {OWN_READ} AND x.deleted_at IS NULL
                   AND NOT EXISTS (SELECT 1 FROM thread_reply r
                                    WHERE r.conversation_id = x.conversation_id AND r.seq = x.seq AND r.thread_only)
                 ORDER BY x.seq LIMIT 1) AS first_unread_seq
          FROM conversation_member m
         WHERE m.user_id = $1 AND m.conversation_id = ANY($2::bigint[])
        """,
        user_id,
        list(conversation_ids),
    )


async def advance_watermarks(
    conn: Connection,
    conversation_ids: list[int],
    user_ids: list[str],
    seqs: list[int],
    events: list[dict],
    keys: Sequence[str],
) -> list[Row]:
    """advance_watermark for many (conversation, user) keys in one statement (so one transaction
    even in autocommit): the same monotonic, clamped guard per key, and one read.updated outbox
    row (events[i], lastReadSeq filled in) per key whose watermark moved. Keys must be distinct.

    One row per key that is a member (a key that is not, or whose row is deleted while this
    statement waits for it, has none):
    (conversation_id, user_id, last_seq, last_read_seq, moved, before, own_read, unread_deleted)
    - last_seq: the conversation's lastSeq the clamp used;
    - moved: this statement raised the watermark, from `before` to last_read_seq;
    - before: the watermark just before this statement raised it (the latest committed one: the
      row is locked first), or, when it did not move, equal to last_read_seq;
    - own_read: the member's own read position, below the watermark while a markUnread rewind
      lasts, above it after markRead with private receipts (kept when the watermark rises below
      it); a key that moved has ended any rewind. Of the updated row when it moved, else of the locked row when the
      key was locked (another process may have raised the watermark after this statement's
      snapshot: the snapshot's own read is then stale, below the watermark answered), else of
      the snapshot. The same for unread_deleted.

    Rows that will move are locked in key order (two flushes never deadlock; the locks are taken
    before any update), then updated: the lock makes `before` exact even when another process
    raised the watermark after this statement's snapshot. A key that does not move answers its
    snapshot's watermark, which is at or above LEAST(seq, last_seq) (that is why it did not move)
    and at or above everything committed before the statement began.
    """
    # The keys as one jsonb array of objects, not four arrays: asyncpg's array encoder checks each
    # array and each element against collections.abc's ABCs (a Python-level isinstance each): four
    # array parameters cost a markRead flush more CPU than one jsonb (bench/results/micro.md).
    rows = [
        {"cid": cid, "uid": uid, "seq": seq, "event": event}
        for cid, uid, seq, event in zip(conversation_ids, user_ids, seqs, events, strict=True)
    ]
    return await conn.fetch(_advance_watermarks_sql(keys[0]), rows)


@functools.lru_cache(maxsize=16)
def _advance_watermarks_sql(key: str) -> str:
    """advance_watermarks' statement, its key spliced in (store.key_literal): made once, not
    formatted (and hashed, for asyncpg's statement cache) on every flush."""
    return f"""
        WITH req AS (
            SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(cid bigint, uid text, seq bigint, event jsonb)
        ), snap AS (
            SELECT r.cid, r.uid, r.event, m.last_read_seq, c.last_seq, LEAST(r.seq, c.last_seq) AS target,
                   {OWN_READ} AS own_read, m.receipts_private AS private, {UNREAD_DELETED} AS unread_deleted
              FROM req r
              JOIN conversation_member m ON m.conversation_id = r.cid AND m.user_id = r.uid
              -- LATERAL ... LIMIT 1: one primary-key probe a key; a plain join is planned for the
              -- function's default estimate of 100 keys, and may hash the whole conversation table
              CROSS JOIN LATERAL (SELECT c.last_seq, c.thread_only_count FROM conversation c WHERE c.id = r.cid LIMIT 1) c
        ), locked AS (
            SELECT m.conversation_id AS cid, m.user_id AS uid, m.last_read_seq AS before, s.target, s.event,
                   {OWN_READ} AS own_read, {UNREAD_DELETED} AS unread_deleted
              FROM snap s
              JOIN conversation_member m ON m.conversation_id = s.cid AND m.user_id = s.uid
              JOIN conversation c ON c.id = s.cid
             WHERE s.last_read_seq < s.target AND NOT s.private
             ORDER BY m.conversation_id, m.user_id
               FOR UPDATE OF m
        ), moved AS (
            UPDATE conversation_member m SET last_read_seq = l.target,
                   own_read_below = {_KEEP_OWN_READ.format(target="l.target")}
              FROM locked l, conversation c
             WHERE m.conversation_id = l.cid AND m.user_id = l.uid AND m.last_read_seq < l.target AND c.id = l.cid
            RETURNING m.conversation_id AS cid, m.user_id AS uid, m.last_read_seq,
                      {OWN_READ} AS own_read, {UNREAD_DELETED} AS unread_deleted
        ), event AS (
            INSERT INTO outbox (msg_key, payload)
            SELECT mv.cid::text, l.event || jsonb_build_object({key_literal(key)}, mv.last_read_seq)
              FROM moved mv JOIN locked l ON l.cid = mv.cid AND l.uid = mv.uid
             ORDER BY mv.cid, mv.uid
        )
        SELECT s.cid AS conversation_id, s.uid AS user_id, s.last_seq,
               COALESCE(mv.last_read_seq, l.before, s.last_read_seq) AS last_read_seq,
               mv.cid IS NOT NULL AS moved,
               COALESCE(l.before, s.last_read_seq) AS before,
               COALESCE(mv.own_read, l.own_read, s.own_read) AS own_read,
               COALESCE(mv.unread_deleted, l.unread_deleted, s.unread_deleted) AS unread_deleted
          FROM snap s
          LEFT JOIN locked l ON l.cid = s.cid AND l.uid = s.uid
          LEFT JOIN moved mv ON mv.cid = s.cid AND mv.uid = s.uid
         -- a row that was to move but could not be locked was deleted meanwhile (the member left)
         WHERE NOT (s.last_read_seq < s.target AND NOT s.private AND l.cid IS NULL)
        """
