"""Messages: the per-conversation, gap-free sequence."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from uuid import UUID

from ..db import Connection, Row
from ..models import MESSAGE_FIELDS
from . import keys_literal

# What every read of a message selects: the fields of models.MessageRecord, by their names.
MESSAGE_COLUMNS = ", ".join(MESSAGE_FIELDS)
_NO_BOUND = 2**63 - 1


def visible_to(viewer: str, conversation: str = "k.cid", seq: str = "seq") -> str:
    """The condition that a message's seq is one the viewer (a parameter, $n) may read in `conversation`: at or
    above their membership's visible_from_seq (history hidden from a late joiner); any seq when not a member
    (whether they may read the conversation at all is the caller's check)."""
    return (
        f"{seq} >= coalesce((SELECT visible_from_seq FROM conversation_member"
        f" WHERE conversation_id = {conversation} AND user_id = {viewer}), 1)"
    )


async def send(
    conn: Connection,
    *,
    conversation_id: int,
    sender_id: str,
    client_msg_id: UUID,
    body: str,
    message_event: dict,
    read_event: dict,
    message_keys: Sequence[str],
    read_keys: Sequence[str],
) -> Row:
    """The whole send transaction, server-side (chat_send, migration 0002).

    Returns (outcome, seq, sender_id, body, created_at); outcome is 'stored',
    'duplicate' (the stored original), 'conflict' (the clientMsgId holds
    another message; nothing written) or 'not_found' (no such conversation,
    or the sender is not a member). Run it as its own transaction.
    message_keys, read_keys: the keys the events' store fields take, in order (events' Event.store_keys():
    message.new's seq and time, read.updated's watermark): the function fills them in (0013_event_keys).
    """
    return await conn.fetchrow(
        _send_sql("chat_send", tuple(message_keys), tuple(read_keys)),
        conversation_id,
        sender_id,
        client_msg_id,
        body,
        message_event,
        read_event,
    )


async def send_batch(
    conn: Connection,
    conversation_id: int,
    items: Sequence[tuple[str, UUID, str, dict, dict]],
    message_keys: Sequence[str],
    read_keys: Sequence[str],
) -> list[Row]:
    """Many sends to one conversation in one transaction (chat_send_batch, migration 0006).

    items are (sender_id, client_msg_id, body, message_event, read_event), in
    the order their seqs are given. Returns one row per item, in that order:
    (i, outcome, seq, sender_id, body, created_at) with outcome as send()'s,
    a clientMsgId taken by an earlier item counting as stored. Run it as its
    own transaction. message_keys, read_keys: as send()'s.
    """
    return await conn.fetch(
        _send_sql("chat_send_batch", tuple(message_keys), tuple(read_keys)),
        conversation_id,
        [item[0] for item in items],
        [item[1] for item in items],
        [item[2] for item in items],
        [item[3] for item in items],
        [item[4] for item in items],
    )


@functools.lru_cache(maxsize=16)
def _send_sql(function: str, message_keys: tuple[str, ...], read_keys: tuple[str, ...]) -> str:
    """The call of chat_send or chat_send_batch, the keys spliced in (store.key_literal: they are
    constants, and text[] parameters cost CPU on every send: store.key_literal)."""
    return f"SELECT * FROM {function}($1, $2, $3, $4, $5, $6, {keys_literal(message_keys)}, {keys_literal(read_keys)})"


async def pages(conn: Connection, requests: Sequence[tuple[int, int, int | None, int, bool]]) -> list[list[Row]]:
    """Several history pages at once. Each request is (conversation_id, after,
    before, limit, from_end): messages with after < seq < before (before None:
    no bound), at most limit, taken from the newest end when from_end.
    Each page comes back in the order taken (newest first when from_end).
    One statement per direction, whatever the number of pages."""
    found: list[list[Row]] = [[] for _ in requests]
    if len(requests) == 1:
        found[0] = await _page(conn, *requests[0])
        return found
    for from_end in (False, True):
        wanted = [(i, r) for i, r in enumerate(requests) if r[4] is from_end]
        if not wanted:
            continue
        order = "DESC" if from_end else "ASC"
        rows = await conn.fetch(
            f"""
            SELECT k.i, m.* FROM unnest($1::int[], $2::bigint[], $3::bigint[], $4::bigint[], $5::int[])
                                 AS k(i, cid, after_seq, before_seq, lim)
            CROSS JOIN LATERAL (
                SELECT {MESSAGE_COLUMNS} FROM message
                 WHERE conversation_id = k.cid AND seq > k.after_seq AND seq < k.before_seq
                 ORDER BY seq {order}
                 LIMIT k.lim
            ) m
            ORDER BY k.i, m.seq {order}
            """,
            [i for i, _ in wanted],
            [r[0] for _, r in wanted],
            [r[1] for _, r in wanted],
            [_NO_BOUND if r[2] is None else r[2] for _, r in wanted],
            [r[3] for _, r in wanted],
        )
        for row in rows:
            found[row.i].append(row)
    return found


async def _page(
    conn: Connection, conversation_id: int, after: int, before: int | None, limit: int, from_end: bool
) -> list[Row]:
    """One page (what most requests ask for): the conversation id as a plain parameter, so
    a partitioned table is pruned to one partition before execution (plan time, or the
    executor's initial pruning with a generic plan), not once per LATERAL probe."""
    order = "DESC" if from_end else "ASC"
    return await conn.fetch(
        f"""
        SELECT {MESSAGE_COLUMNS} FROM message
         WHERE conversation_id = $1 AND seq > $2 AND seq < $3
         ORDER BY seq {order}
         LIMIT $4
        """,
        conversation_id,
        after,
        _NO_BOUND if before is None else before,
        limit,
    )


async def by_keys(conn: Connection, keys: Sequence[tuple[int, int]], viewer_id: str | None = None) -> list[Row]:
    """Messages by (conversation_id, seq); with viewer_id, only those that member may read (visible_to).

    One probe per key, each in the one partition of its conversation: the LIMIT
    (a no-op, the key is unique) keeps the LATERAL subquery from being flattened
    into a join that the planner may answer by scanning every partition.
    """
    visible = "" if viewer_id is None else f" AND {visible_to('$3')}"
    return await conn.fetch(
        f"""
        SELECT m.* FROM unnest($1::bigint[], $2::bigint[]) AS k(cid, seq)
        CROSS JOIN LATERAL (
            SELECT {MESSAGE_COLUMNS} FROM message
             WHERE conversation_id = k.cid AND seq = k.seq{visible}
             LIMIT 1
        ) m
        """,
        [k[0] for k in keys],
        [k[1] for k in keys],
        *(() if viewer_id is None else (viewer_id,)),
    )


async def after_many(conn: Connection, cursors: Sequence[tuple[int, int]], limit: int) -> list[Row]:
    """For each (conversation_id, after_seq): up to limit messages with seq > after_seq, ascending."""
    return await conn.fetch(
        f"""
        SELECT m.* FROM unnest($1::bigint[], $2::bigint[]) AS k(cid, after_seq)
        CROSS JOIN LATERAL (
            SELECT {MESSAGE_COLUMNS} FROM message
             WHERE conversation_id = k.cid AND seq > k.after_seq
             ORDER BY seq
             LIMIT $3
        ) m
        ORDER BY m.conversation_id, m.seq
        """,
        [c[0] for c in cursors],
        [c[1] for c in cursors],
        limit,
    )


async def set_reply_txn(conn: Connection, conversation_id: int, seq: int, reply_to_seq: int) -> bool:
    """Make message seq a reply to reply_to_seq (an earlier message of the conversation), counting it on the
    quoted one, whose lastReplyAt becomes the reply's createdAt (inside the send's transaction). False when
    there is no such earlier message, or none its sender may read (visible_to): nothing written."""
    counted = await conn.fetchval(
        f"""
        UPDATE message p SET reply_count = p.reply_count + 1, last_reply_at = r.created_at
          FROM message r
         WHERE p.conversation_id = $1 AND p.seq = $3 AND p.seq < $2
           AND r.conversation_id = $1 AND r.seq = $2 AND {visible_to("r.sender_id", "$1", "p.seq")}
        RETURNING p.seq
        """,
        conversation_id,
        seq,
        reply_to_seq,
    )
    if counted is None:
        return False
    await conn.execute(
        "UPDATE message SET reply_to_seq = $3 WHERE conversation_id = $1 AND seq = $2",
        conversation_id,
        seq,
        reply_to_seq,
    )
    return True


async def reply_pages(
    conn: Connection, keys: Sequence[tuple[int, int, int, int]], viewer_id: str | None = None
) -> list[Row]:
    """(conversation_id, reply_to_seq, after_seq, limit) -> rows (i, message columns...): the replies to a message
    with seq > after, ascending, at most limit; one statement (message_reply_idx, one partition per key).
    viewer_id: only those that member may read (visible_to)."""
    visible = "" if viewer_id is None else f" AND {visible_to('$5')}"
    return await conn.fetch(
        f"""
        SELECT k.i, m.* FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::int[])
                             WITH ORDINALITY AS k(cid, root, after_seq, lim, i)
        CROSS JOIN LATERAL (
            SELECT {MESSAGE_COLUMNS} FROM message
             WHERE conversation_id = k.cid AND reply_to_seq = k.root AND seq > k.after_seq{visible}
             ORDER BY seq
             LIMIT k.lim
        ) m
        ORDER BY k.i, m.seq
        """,
        [k[0] for k in keys],
        [k[1] for k in keys],
        [k[2] for k in keys],
        [k[3] for k in keys],
        *(() if viewer_id is None else (viewer_id,)),
    )


async def insert_attachments_txn(conn: Connection, conversation_id: int, seq: int, items: Sequence[tuple]) -> None:
    """A new message's attachments, (url, mime_type, name, size_bytes, width, height) in order (the send's
    transaction)."""
    await conn.execute(
        """
        INSERT INTO message_attachment (conversation_id, seq, position, url, mime_type, name, size_bytes, width, height)
        SELECT $1, $2, a.position, a.url, a.mime_type, a.name, a.size_bytes, a.width, a.height
          FROM unnest($3::text[], $4::text[], $5::text[], $6::bigint[], $7::int[], $8::int[])
               WITH ORDINALITY AS a(url, mime_type, name, size_bytes, width, height, position)
        """,
        conversation_id,
        seq,
        [a[0] for a in items],
        [a[1] for a in items],
        [a[2] for a in items],
        [a[3] for a in items],
        [a[4] for a in items],
        [a[5] for a in items],
    )


async def attachments(conn: Connection, keys: Sequence[tuple[int, int]]) -> list[Row]:
    """The attachments of messages (conversation_id, seq), in position order."""
    return await conn.fetch(
        """
        SELECT a.* FROM unnest($1::bigint[], $2::bigint[]) AS k(cid, seq)
        CROSS JOIN LATERAL (
            SELECT conversation_id, seq, position, url, mime_type, name, size_bytes, width, height
              FROM message_attachment WHERE conversation_id = k.cid AND seq = k.seq ORDER BY position
        ) a
        """,
        [k[0] for k in keys],
        [k[1] for k in keys],
    )
