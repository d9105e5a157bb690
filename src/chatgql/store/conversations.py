"""Conversations, members and direct pairs."""

from __future__ import annotations

import functools
import re
import typing
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from ..db import Connection, Row
from ..models import MEMBER_FIELDS, MESSAGE_FIELDS, MESSAGE_PLAIN_FIELDS, MessageRecord

_CONVERSATION_COLUMNS = (
    "c.id, c.type, c.title, c.last_seq, c.last_message_at, c.created_at, c.last_change_seq, c.slow_mode_seconds,"
    " c.hide_history, c.message_ttl_seconds"
)

# The member's own state (0011), as SQL over conversation_member m joined with conversation c:
# OWN_READ: the member's own read position: own_read_seq while the public watermark has not moved since
#   it was set (below the watermark after a markUnread, above it after a markRead with private
#   receipts), else the watermark;
# MUTED: muted, and the mute has not expired; ARCHIVED: archived, and no message came after it
#   (unless kept archived).
OWN_READ = (
    "(CASE WHEN m.own_read_seq IS NOT NULL AND m.own_read_below = m.last_read_seq"
    " THEN m.own_read_seq ELSE m.last_read_seq END)"
)
MUTED = "(m.muted AND (m.muted_until IS NULL OR m.muted_until > now()))"
ARCHIVED = "(m.archived_seq IS NOT NULL AND (m.keep_archived OR c.last_seq <= m.archived_seq))"
# The viewer's membership as a Conversation shows it (graphql/types/conversation.py Conversation.from_row).
# UNREAD_DELETED: deleted messages above the member's own read position: the counter kept on write
#   (0010: those above the watermark), corrected, while an own position apart from the watermark holds,
#   by the deleted ones between the two (counted on message_change_deleted_idx, deleted messages only,
#   within that range only): added when the own position is below the watermark (markUnread's rewind),
#   taken off when it is above it (private receipts: the deleted ones the member has read).
#   It also takes off the thread-only replies above the own position that are not deleted (a deleted one
#   is counted once, as deleted, by its DELETED change): they count in their thread only
#   (docs/guide/threads.md). Read only in a conversation that has had a thread-only reply
#   (thread_only_count), on thread_reply_thread_only_idx.
THREAD_ONLY_UNREAD = (
    "(CASE WHEN c.thread_only_count > 0 THEN (SELECT count(*) FROM thread_reply r"
    f" WHERE r.conversation_id = m.conversation_id AND r.thread_only AND r.seq > {OWN_READ}"
    " AND NOT EXISTS (SELECT 1 FROM message_change d WHERE d.conversation_id = r.conversation_id"
    " AND d.kind = 'DELETED' AND d.seq = r.seq)) ELSE 0 END)"
)
UNREAD_DELETED = (
    "(m.unread_deleted + CASE WHEN m.own_read_seq IS NOT NULL AND m.own_read_below = m.last_read_seq"
    " THEN (SELECT CASE WHEN m.own_read_seq < m.last_read_seq THEN count(*) ELSE -count(*) END"
    " FROM message_change d WHERE d.conversation_id = m.conversation_id AND d.kind = 'DELETED'"
    " AND d.seq > LEAST(m.own_read_seq, m.last_read_seq) AND d.seq <= GREATEST(m.own_read_seq, m.last_read_seq))"
    " ELSE 0 END + " + THREAD_ONLY_UNREAD + ")"
)
# UNREAD: what unreadCount says
UNREAD = f"(c.last_seq - {OWN_READ} - {UNREAD_DELETED})"
VIEWER_COLUMNS = (
    f"m.last_read_seq, m.role, {OWN_READ} AS own_read, {MUTED} AS muted, m.muted_until,"
    f" {ARCHIVED} AS archived, m.keep_archived, m.pinned_at, m.receipts_private, {UNREAD_DELETED} AS unread_deleted,"
    " m.visible_from_seq"
)
# What an inbox page reads when its nodes select none of the membership's settings (muted, archived,
# lastChangeSeq, privateReceipts...: graphql/types/conversation.py Conversation.PLAIN_FIELDS): the unread count and
# the pin only. Fewer columns to decode per row (speed: the inbox page, bench/results/perf.md).
_INBOX_PLAIN_COLUMNS = (
    "c.id, c.type, c.title, c.last_seq, c.last_message_at, c.created_at,"
    f" {OWN_READ} AS own_read, {UNREAD_DELETED} AS unread_deleted, m.pinned_at, m.visible_from_seq"
)


@dataclass(frozen=True, slots=True)
class InboxFilter:
    """Which of the viewer's conversations an inbox page lists; None: either.
    The default inbox: every conversation that is not archived."""

    archived: bool | None = False
    unread_only: bool = False
    pinned: bool | None = None
    muted: bool | None = None


DEFAULT_INBOX = InboxFilter()
# An inbox keyset: (activity_at, conversation_id, pinned_at) of the last row of the previous page.
InboxKey = tuple[datetime, int, datetime | None]


async def lock_for_member_txn(conn: Connection, conversation_id: int, user_id: str) -> Row | None:
    """Lock the conversation row (sends and membership changes queue up on it).

    Returns (type, title, last_seq, member_count, hide_history, now, role, visible_from_seq) where
    role is the caller's role or None when the caller is not a member (visible_from_seq: the first
    seq the caller may read); None when the conversation does not exist.
    """
    return await conn.fetchrow(
        """
        SELECT c.type, c.title, c.last_seq, c.member_count, c.hide_history, m.role, m.visible_from_seq,
               -- taken under the lock, never before the previous message's time
               greatest(clock_timestamp(), c.last_message_at) AS now
          FROM conversation c
          LEFT JOIN conversation_member m
            ON m.conversation_id = c.id AND m.user_id = $2
         WHERE c.id = $1
           FOR NO KEY UPDATE OF c
        """,
        conversation_id,
        user_id,
    )


async def insert_conversation(conn: Connection, type_: str, title: str | None, created_by: str | None = None) -> Row:
    return await conn.fetchrow(
        "INSERT INTO conversation (type, title, created_by) VALUES ($1, $2, $3) RETURNING id, created_at",
        type_,
        title,
        created_by,
    )


_GROUP_QUOTA_LOCK = 7261303  # advisory lock namespace (two-key form): one user's group creations, one at a time


async def lock_group_quota_txn(conn: Connection, user_id: str) -> None:
    """Serialize user_id's group creations until the transaction ends, so that two
    concurrent ones (in any process) cannot both pass the daily count."""
    await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", _GROUP_QUOTA_LOCK, user_id)


async def groups_created_since(conn: Connection, user_id: str, seconds: float) -> Row:
    """(count, oldest_age) of the GROUPs user_id created in the last `seconds`;
    oldest_age: how many seconds ago the oldest of them was created (None without any)."""
    return await conn.fetchrow(
        """
        SELECT count(*) AS count,
               extract(epoch FROM clock_timestamp() - min(created_at))::float8 AS oldest_age
          FROM conversation
         WHERE type = 'GROUP' AND created_by = $1
           AND created_at > clock_timestamp() - make_interval(secs => $2)
        """,
        user_id,
        float(seconds),
    )


async def insert_members(
    conn: Connection,
    conversation_id: int,
    members: Sequence[tuple[str, str]],
    last_read_seq: int = 0,
    visible_from_seq: int = 1,
) -> list[str]:
    """Add (user_id, role) pairs; ids already present are skipped. Returns the ids added.
    visible_from_seq: the first seq they may read (1: the whole history)."""
    if not members:
        return []
    rows = await conn.fetch(
        """
        INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq, receipts_private, visible_from_seq)
        SELECT $1, u.user_id, u.role, $4, coalesce(s.private_receipts, false), $5
          FROM unnest($2::text[], $3::text[]) AS u(user_id, role)
          LEFT JOIN user_setting s ON s.user_id = u.user_id  -- private read receipts by default (0011b)
        ON CONFLICT (conversation_id, user_id) DO NOTHING
        RETURNING user_id
        """,
        conversation_id,
        [uid for uid, _ in members],
        [role for _, role in members],
        last_read_seq,
        visible_from_seq,
    )
    return sorted(row.user_id for row in rows)


async def member_ids_among(conn: Connection, conversation_id: int, user_ids: Iterable[str]) -> set[str]:
    rows = await conn.fetch(
        "SELECT user_id FROM conversation_member WHERE conversation_id = $1 AND user_id = ANY($2::text[])",
        conversation_id,
        list(user_ids),
    )
    return {row.user_id for row in rows}


async def delete_member(conn: Connection, conversation_id: int, user_id: str) -> str | None:
    """Remove a member; returns the role they had, or None if they were not a member."""
    return await conn.fetchval(
        "DELETE FROM conversation_member WHERE conversation_id = $1 AND user_id = $2 RETURNING role",
        conversation_id,
        user_id,
    )


async def promote_if_ownerless(conn: Connection, conversation_id: int) -> str | None:
    """When no OWNER remains, make the longest-standing ADMIN the OWNER, or with no ADMIN the
    longest-standing member; returns their id."""
    return await conn.fetchval(
        """
        UPDATE conversation_member SET role = 'OWNER'
         WHERE conversation_id = $1
           AND NOT EXISTS (SELECT 1 FROM conversation_member
                            WHERE conversation_id = $1 AND role = 'OWNER')
           AND user_id = (SELECT user_id FROM conversation_member
                           WHERE conversation_id = $1
                           ORDER BY role = 'ADMIN' DESC, joined_at, user_id LIMIT 1)
        RETURNING user_id
        """,
        conversation_id,
    )


async def find_direct(conn: Connection, user_low: str, user_high: str) -> int | None:
    return await conn.fetchval(
        "SELECT conversation_id FROM direct_pair WHERE user_low = $1 AND user_high = $2", user_low, user_high
    )


async def claim_direct_pair(conn: Connection, user_low: str, user_high: str, conversation_id: int) -> bool:
    """Record conversation_id as the pair's chat. False when another one got there first."""
    claimed = await conn.fetchval(
        """
        INSERT INTO direct_pair (user_low, user_high, conversation_id)
        VALUES ($1, $2, $3)
        ON CONFLICT (user_low, user_high) DO NOTHING
        RETURNING conversation_id
        """,
        user_low,
        user_high,
        conversation_id,
    )
    return claimed is not None


async def for_viewer(conn: Connection, conversation_ids: Sequence[int], user_id: str) -> list[Row]:
    """The conversations among ids that user_id is a member of, with the viewer's watermark."""
    return await conn.fetch(
        f"""
        SELECT {_CONVERSATION_COLUMNS}, {VIEWER_COLUMNS}
          FROM conversation c
          JOIN conversation_member m ON m.conversation_id = c.id AND m.user_id = $2
         WHERE c.id = ANY($1::bigint[])
        """,
        list(conversation_ids),
        user_id,
    )


async def inbox_page(
    conn: Connection,
    user_id: str,
    limit: int,
    after: InboxKey | None,
    only: InboxFilter = DEFAULT_INBOX,
    *,
    settings: bool = True,
) -> list[Row]:
    """The viewer's conversations that pass `only`: pinned ones first, in the order they were
    pinned, then the others, newest activity first; keyset-paginated on
    (pinned_at, coalesce(last_message_at, created_at), id). Fetch limit + 1 to learn hasNextPage.
    settings=False: without the membership's settings columns (_INBOX_PLAIN_COLUMNS)."""
    page, args = _inbox_page_query(user_id, limit, after, only, settings)
    return await conn.fetch(page, *args)


def _inbox_page_query(
    user_id: str, limit: int, after: InboxKey | None, only: InboxFilter, settings: bool = True
) -> tuple[str, list[object]]:
    """The inbox page's SELECT and its arguments ($1 user, $2 limit, then the keyset and filters).
    One statement whatever the filters: they are conditions on the rows the page reads anyway
    (every membership of the viewer, by conversation_member_user_id_idx)."""
    args: list[object] = [user_id, limit]

    def arg(value: object) -> str:
        args.append(value)
        return f"${len(args)}"

    where = []
    if after is not None:
        at, cid, pinned_at = after
        older = f"(coalesce(c.last_message_at, c.created_at), c.id) < ({arg(at)}::timestamptz, {arg(cid)}::bigint)"
        if pinned_at is None:  # past the pinned ones
            where.append(f"m.pinned_at IS NULL AND {older}")
        else:
            pin = arg(pinned_at)
            where.append(
                f"(m.pinned_at IS NULL OR m.pinned_at > {pin}::timestamptz"
                f" OR (m.pinned_at = {pin}::timestamptz AND {older}))"
            )
    if only.archived is not None:
        where.append(f"{ARCHIVED} = {arg(only.archived)}::boolean")
    if only.unread_only:
        where.append(f"{UNREAD} > 0")
    if only.pinned is not None:
        where.append(f"(m.pinned_at IS NOT NULL) = {arg(only.pinned)}::boolean")
    if only.muted is not None:
        where.append(f"{MUTED} = {arg(only.muted)}::boolean")
    conditions = "".join(f" AND {condition}" for condition in where)
    page = f"""
        SELECT {f"{_CONVERSATION_COLUMNS}, {VIEWER_COLUMNS}" if settings else _INBOX_PLAIN_COLUMNS},
               coalesce(c.last_message_at, c.created_at) AS activity_at
          FROM conversation_member m
          JOIN conversation c ON c.id = m.conversation_id
         WHERE m.user_id = $1{conditions}
         ORDER BY m.pinned_at, activity_at DESC, c.id DESC
         LIMIT $2
        """
    return page, args


async def inbox_page_with_last_messages(
    conn: Connection,
    user_id: str,
    limit: int,
    after: InboxKey | None,
    only: InboxFilter = DEFAULT_INBOX,
    *,
    settings: bool = True,
    lifecycle: bool = True,
) -> list[Row]:
    """inbox_page, each row with its conversation's last message (the one at last_seq) in the
    columns LAST_MESSAGE_PREFIX + each of last_message_fields(lifecycle) (null when it has none;
    without lifecycle, none of the fields that change after the send): one statement for a page of
    conversations and their previews (the page, then the messages by key, was two round trips)."""
    page, args = _inbox_page_query(user_id, limit, after, only, settings)
    columns = last_message_fields(lifecycle)
    return await conn.fetch(
        f"""
        SELECT p.*, {", ".join(f"lm.{column} AS {LAST_MESSAGE_PREFIX}{column}" for column in columns)}
          FROM ({page}) p
          -- LATERAL ... LIMIT 1: one index probe of one partition per conversation, whatever
          -- the planner thinks of the table's size (a plain join may become a hash join that
          -- scans every partition; tests/store/test_partitioning.py)
          LEFT JOIN LATERAL (
            SELECT {", ".join(columns)} FROM message
             WHERE conversation_id = p.id AND seq = p.last_seq AND p.last_seq >= p.visible_from_seq
             LIMIT 1
          ) lm ON true
         ORDER BY p.pinned_at, p.activity_at DESC, p.id DESC
        """,
        *args,
    )


async def inbox_page_json(
    conn: Connection,
    user_id: str,
    limit: int,
    after: InboxKey | None,
    only: InboxFilter,
    nodes: tuple[JsonObject, ...],
    *,
    settings: bool,
    lifecycle: bool,
) -> list[Row]:
    """inbox_page, each row's node as JSON text PostgreSQL built, once per object of `nodes` (columns
    node_0, node_1...; beside id, pinned_at and activity_at for the page's cursors). An object names each
    key's value among INBOX_JSON_VALUES (the page's row, `p`) and, in a nested object,
    LAST_MESSAGE_JSON_VALUES (its last message, `lm`: the object is null when the conversation has none).
    settings / lifecycle: as inbox_page_with_last_messages; the values that need those columns are
    refused without them. The caller passes the texts through as they are."""
    page, args = _inbox_page_query(user_id, limit, after, only, settings)
    return await conn.fetch(
        f"""
        SELECT p.id, p.pinned_at, p.activity_at, {_json_columns(nodes, settings, lifecycle)}
          FROM ({page}) p
          -- as inbox_page_with_last_messages: one index probe of one partition per conversation
          LEFT JOIN LATERAL (
            SELECT {", ".join(last_message_fields(lifecycle))} FROM message
             WHERE conversation_id = p.id AND seq = p.last_seq AND p.last_seq >= p.visible_from_seq
             LIMIT 1
          ) lm ON true
         ORDER BY p.pinned_at, p.activity_at DESC, p.id DESC
        """,
        *args,
    )


@functools.lru_cache(maxsize=256)  # a plan's objects are the same every time: the text is made once
def _json_columns(nodes: tuple[JsonObject, ...], settings: bool, lifecycle: bool) -> str:
    values = INBOX_JSON_VALUES if settings else INBOX_PLAIN_JSON_VALUES
    message = LAST_MESSAGE_JSON_VALUES if lifecycle else _LAST_MESSAGE_PLAIN_JSON_VALUES
    return ", ".join(f"({_json_object(node, values, message)})::text AS node_{i}" for i, node in enumerate(nodes))


# A JSON object to build: (key, value) in the answer's order; a value is a name of the values at hand, a
# JsonText (a constant string) or, one level down, the last message's object (its own JsonObject).
@dataclass(frozen=True, slots=True)
class JsonText:
    text: str


JsonObject = tuple[tuple[str, "str | JsonText | JsonObject"], ...]
_JSON_NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]*")  # a GraphQL name: written into the statement as it is


def _json_time(column: str) -> str:
    """A timestamptz as Python's isoformat writes what asyncpg returns (UTC; microseconds only when
    not zero), the DateTime scalar's text (graphql/scalars.py datetime_text); null stays null. No
    colon inside a literal: pgbench, whose run of this very statement is the benchmark's baseline,
    takes ':MI' for a variable of its own (hence 'h', made ':' after)."""
    utc = f"({column} AT TIME ZONE 'UTC')"
    return (
        f"translate(CASE WHEN date_trunc('second', {column}) = {column}"
        f""" THEN to_char({utc}, 'YYYY-MM-DD"T"HH24"h"MI"h"SS"+00h00"')"""
        f""" ELSE to_char({utc}, 'YYYY-MM-DD"T"HH24"h"MI"h"SS.US"+00h00"') END, 'h', ':')"""
    )


def _opaque_id(type_name: str, *keys: str) -> str:
    """graphql/ids.py's opaque id: urlsafe base64 of 'Type:key:key', without its padding."""
    raw = " || ':' || ".join((f"'{type_name}'", *(f"({key})::text" for key in keys)))
    return f"rtrim(translate(encode(convert_to({raw}, 'UTF8'), 'base64'), E'+/\\n', '-_'), '=')"


# What an inbox node's JSON may show of the page's row (p), by the name of the field of graphql's
# Conversation each is (what Conversation.from_row makes of the same columns), as JSON (the settings
# ones only with the membership's settings columns). graphql/prebuilt.py checks on import that every field
# Conversation holds as a value has one; Conversation.PLAIN_FIELDS follows the plain ones.
INBOX_PLAIN_JSON_VALUES = {
    "id": "p.id::text",
    "type": "p.type",
    "title": "p.title",
    "last_seq": "p.last_seq",
    "last_message_at": _json_time("p.last_message_at"),
    "created_at": _json_time("p.created_at"),
    "last_read_seq": "p.own_read",
    "unread_count": "greatest(p.last_seq - p.own_read - p.unread_deleted, 0)",
    "pinned_at": _json_time("p.pinned_at"),
    "pinned": "(p.pinned_at IS NOT NULL)",
}
INBOX_JSON_VALUES = {
    **INBOX_PLAIN_JSON_VALUES,
    "muted": "p.muted",
    "muted_until": f"CASE WHEN p.muted THEN {_json_time('p.muted_until')} END",
    "archived": "p.archived",
    "kept_archived": "(p.archived AND p.keep_archived)",
    "last_change_seq": "p.last_change_seq",
    "private_receipts": "p.receipts_private",
    "slow_mode_seconds": "p.slow_mode_seconds",
    "hide_history": "p.hide_history",
    "message_ttl_seconds": "p.message_ttl_seconds",
}


def _message_json_value(name: str, kind: object) -> str:
    """A field of models.MessageRecord as the JSON of its GraphQL field, from the last message's column."""
    column = f"lm.{name}"
    if kind is datetime:
        return _json_time(column)
    if kind is uuid.UUID:
        return f"{column}::text"
    if kind in (int, str, bool):  # a number, a boolean, text (a user id: an ID)
        return column
    raise AssertionError(
        f"models.MessageRecord.{name} is a {kind!r}: say in store/conversations.py _message_json_value how an inbox"
        " page's JSON writes it (as the GraphQL field's scalar does)"
    )


def _last_message_json_values(names: tuple[str, ...]) -> dict[str, str]:
    """What an inbox node's JSON may show of its last message (lm; its conversation and seq are the row's), by
    the name of each field of graphql's Message: its id, and the record's fields, derived from their types."""
    kinds = {
        name: next((k for k in typing.get_args(kind) if k is not type(None)), kind)  # X | None: X
        for name, kind in typing.get_type_hints(MessageRecord).items()
    }
    return {
        "id": _opaque_id("Message", "p.id", "p.last_seq"),
        "conversation_id": "p.id::text",
        "seq": "p.last_seq",
        **{name: _message_json_value(name, kinds[name]) for name in names if name not in ("conversation_id", "seq")},
    }


_LAST_MESSAGE_PLAIN_JSON_VALUES = _last_message_json_values(MESSAGE_PLAIN_FIELDS)
LAST_MESSAGE_JSON_VALUES = _last_message_json_values(MESSAGE_FIELDS)


def _json_object(node: JsonObject, values: dict[str, str], message: dict[str, str] | None) -> str:
    """json_build_object of node's keys; a nested object (the last message) is null without one."""
    if not node or len(node) > 50:  # json_build_object takes at most 100 arguments
        raise ValueError("a JSON object of 1 to 50 keys")
    parts = []
    for key, value in node:
        if not _JSON_NAME.fullmatch(key):
            raise ValueError(f"not a GraphQL name: {key!r}")
        if isinstance(value, JsonText):
            if not _JSON_NAME.fullmatch(value.text):
                raise ValueError(f"not a GraphQL name: {value.text!r}")
            expression = f"'{value.text}'::text"
        elif isinstance(value, tuple):
            if message is None:
                raise ValueError("one level of nesting: the last message")
            expression = f"CASE WHEN lm.sender_id IS NOT NULL THEN {_json_object(value, message, None)} END"
        else:
            expression = values[value]  # KeyError: not a value an inbox row has
        parts.append(f"'{key}', {expression}")
    return f"json_build_object({', '.join(parts)})"


# An inbox row's last message: models.MessageRecord's fields but its conversation and seq (the row's id
# and last_seq), each as LAST_MESSAGE_PREFIX + its name.
LAST_MESSAGE_PREFIX = "lm_"
_LAST_MESSAGE_FIELDS = {
    lifecycle: tuple(
        name
        for name in (MESSAGE_FIELDS if lifecycle else MESSAGE_PLAIN_FIELDS)
        if name not in ("conversation_id", "seq")
    )
    for lifecycle in (True, False)
}


def last_message_fields(lifecycle: bool = True) -> tuple[str, ...]:
    """The message fields an inbox row carries (prefixed with LAST_MESSAGE_PREFIX); without lifecycle, only
    those that never change after the send."""
    return _LAST_MESSAGE_FIELDS[lifecycle]


async def viewer_totals(conn: Connection, user_id: str) -> Row:
    """(total_unread, unread_conversations) over the viewer's conversations that are not muted."""
    return await conn.fetchrow(
        f"""
        SELECT coalesce(sum({UNREAD}) FILTER (WHERE NOT {MUTED}), 0) AS total_unread,
               count(*) FILTER (WHERE {UNREAD} > 0 AND NOT {MUTED}) AS unread_conversations
          FROM conversation_member m
          JOIN conversation c ON c.id = m.conversation_id
         WHERE m.user_id = $1
        """,
        user_id,
    )


async def member_counts(conn: Connection, conversation_ids: Sequence[int]) -> dict[int, int]:
    """Stored counts (conversation.member_count, kept by triggers: 0007), not a count of rows."""
    rows = await conn.fetch(
        "SELECT id, member_count FROM conversation WHERE id = ANY($1::bigint[])", list(conversation_ids)
    )
    return {row.id: row.member_count for row in rows}


# What every read of a member selects: the fields of models.MemberRecord, by their names (graphql's Member).
MEMBER_COLUMNS = ", ".join(f"m.{name}" for name in MEMBER_FIELDS)


async def member_pages(conn: Connection, pages: Sequence[tuple[int, str, int]]) -> list[Row]:
    """(conversation_id, after_user_id, limit) -> members with user_id > after, ascending, at most
    limit of them; one statement for every page (each a range of the primary key)."""
    return await conn.fetch(
        f"""
        SELECT p.i, {MEMBER_COLUMNS}
          FROM unnest($1::bigint[], $2::text[], $3::int[]) WITH ORDINALITY AS p(cid, after, lim, i)
          CROSS JOIN LATERAL (
                SELECT * FROM conversation_member m
                 WHERE m.conversation_id = p.cid AND m.user_id > p.after
                 ORDER BY m.user_id LIMIT p.lim) m
         ORDER BY p.i, m.user_id
        """,
        [cid for cid, _, _ in pages],
        [after for _, after, _ in pages],
        [limit for _, _, limit in pages],
    )


async def member_rows(conn: Connection, keys: Sequence[tuple[int, str]]) -> list[Row]:
    """The membership rows of (conversation_id, user_id) pairs that are members."""
    return await conn.fetch(
        f"""
        SELECT {MEMBER_COLUMNS}
          FROM unnest($1::bigint[], $2::text[]) AS k(cid, uid)
          JOIN conversation_member m ON m.conversation_id = k.cid AND m.user_id = k.uid
        """,
        [cid for cid, _ in keys],
        [uid for _, uid in keys],
    )


# "Seen" questions about messages lo..hi of a conversation, answered from conversation_member_read_idx
# (0007) by index-only scans, whatever the group's size:
#  'h' rows (a, b) = (w, n): n members with LEAST(last_read_seq, hi) = w, among those with last_read_seq >= lo: the
#      members who have read seq (lo <= seq <= hi) are the sum of n over w >= seq (at most hi - lo + 1 rows);
#  'l' rows (u, b) = (user_id, last_read_seq): the two lowest watermarks: the lowest among the members other than a
#      sender is one of them (seen: every other member has read seq);
#  's' rows (u, b) = (user_id, last_read_seq): the senders' own watermarks (a sender is not counted as a reader).
SEEN_STATE_SQL = """
WITH k AS (SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS k(cid, lo, hi))
SELECT k.cid, 'h' AS kind, NULL::text AS u, h.w AS a, h.n AS b
  FROM k CROSS JOIN LATERAL (
        SELECT LEAST(m.last_read_seq, k.hi) AS w, count(*) AS n
          FROM conversation_member m
         WHERE m.conversation_id = k.cid AND m.last_read_seq >= k.lo
         GROUP BY 1) h
UNION ALL
SELECT k.cid, 'l', l.user_id, NULL, l.last_read_seq
  FROM k CROSS JOIN LATERAL (
        SELECT m.user_id, m.last_read_seq FROM conversation_member m
         WHERE m.conversation_id = k.cid
         ORDER BY m.last_read_seq LIMIT 2) l
UNION ALL
SELECT m.conversation_id, 's', m.user_id, NULL, m.last_read_seq
  FROM unnest($4::bigint[], $5::text[]) AS s(cid, uid)
  JOIN conversation_member m ON m.conversation_id = s.cid AND m.user_id = s.uid
"""


async def seen_state(
    conn: Connection, ranges: Sequence[tuple[int, int, int]], senders: Sequence[tuple[int, str]]
) -> list[Row]:
    """ranges: (conversation_id, lo, hi) seqs; senders: (conversation_id, sender_id). Rows
    (cid, kind, u, a, b) as SEEN_STATE_SQL says; O(members who read lo) index entries, not O(members)."""
    return await conn.fetch(
        SEEN_STATE_SQL,
        [cid for cid, _, _ in ranges],
        [lo for _, lo, _ in ranges],
        [hi for _, _, hi in ranges],
        [cid for cid, _ in senders],
        [uid for _, uid in senders],
    )


async def seen_by_pages(conn: Connection, keys: Sequence[tuple[int, int, str, str, int]]) -> list[Row]:
    """(conversation_id, seq, sender_id, after_user_id, limit) -> rows (i, user_id): the members other
    than the sender with last_read_seq >= seq and user_id > after, ascending, at most limit; one
    statement. Each page reads O(readers of seq) index entries (as seenByCount does), not O(members)."""
    return await conn.fetch(
        """
        SELECT k.i, s.user_id
          FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::int[])
               WITH ORDINALITY AS k(cid, seq, sender, after, lim, i)
          CROSS JOIN LATERAL (
                -- The readers from conversation_member_read_idx, then the first `lim` of them: without
                -- the fence (OFFSET 0) the planner may walk the primary key in user_id order through
                -- every member who has not read seq (all 100,000 of them for a new message).
                SELECT r.user_id FROM (
                    SELECT m.user_id FROM conversation_member m
                     WHERE m.conversation_id = k.cid AND m.last_read_seq >= k.seq
                       AND m.user_id <> k.sender AND m.user_id > k.after
                    OFFSET 0) r
                 ORDER BY r.user_id LIMIT k.lim) s
         ORDER BY k.i, s.user_id
        """,
        [k[0] for k in keys],
        [k[1] for k in keys],
        [k[2] for k in keys],
        [k[3] for k in keys],
        [k[4] for k in keys],
    )


async def live_members(conn: Connection, conversation_id: int, whole_up_to: int, among: Sequence[str]) -> Row | None:
    """(member_count, user_ids, late_ids, late_from) for the live path: every member's id when the conversation
    has at most whole_up_to members; above that only the members among `among` (the users subscribed in this
    process), so the answer is bounded by subscribers, never by members. late_ids / late_from: those of them
    who may not read the whole history, and the first seq each may read (visible_from_seq). None: no such
    conversation."""
    return await conn.fetchrow(
        f"""
        SELECT c.member_count,
               CASE WHEN c.member_count <= $2
                    THEN ARRAY(SELECT m.user_id FROM conversation_member m WHERE m.conversation_id = c.id)
                    ELSE ARRAY(SELECT m.user_id FROM conversation_member m
                                WHERE m.conversation_id = c.id AND m.user_id = ANY($3::text[]))
               END AS user_ids,
               {_late_members("m.user_id")} AS late_ids,
               {_late_members("m.visible_from_seq")} AS late_from
          FROM conversation c
         WHERE c.id = $1
        """,
        conversation_id,
        whole_up_to,
        list(among),
    )


def _late_members(column: str) -> str:
    """live_members' array of `column` of the members with visible_from_seq > 1, by user id."""
    late = "FROM conversation_member m WHERE m.conversation_id = c.id AND m.visible_from_seq > 1"
    return (
        f"CASE WHEN c.member_count <= $2 THEN ARRAY(SELECT {column} {late} ORDER BY m.user_id)"
        f" ELSE ARRAY(SELECT {column} {late} AND m.user_id = ANY($3::text[]) ORDER BY m.user_id) END"
    )
