"""Saved messages and their reminders (migration 0028_saved_messages): a user's own rows.

Every change of a user's rows takes the next value of their counter (saved_version) in its
transaction; the row is locked before the counter (lock_txn), in every writer, and the reminders'
claim skips locked rows, so a save and a firing reminder never wait on each other in a cycle.
Time is a parameter, never now(): the caller passes the clock's time.
"""

from __future__ import annotations

from datetime import datetime

from ..db import Connection, Row
from ..models import MESSAGE_FIELDS

SAVED_COLUMNS = "s.conversation_id, s.seq, s.saved_at, s.remind_at, s.reminded_at, s.removed, s.version"
# The message's columns but its key, which SAVED_COLUMNS has (a row answers each name once).
_MESSAGE = ", ".join(f"m.{name}" for name in MESSAGE_FIELDS if name not in ("conversation_id", "seq"))
# The user reads the message now (a member, within their visible history) and it is not deleted.
_READABLE = """JOIN conversation_member r ON r.conversation_id = s.conversation_id AND r.user_id = s.user_id
                AND s.seq >= r.visible_from_seq
          JOIN message m ON m.conversation_id = s.conversation_id AND m.seq = s.seq AND m.deleted_at IS NULL"""
_BUMP = """INSERT INTO saved_version AS v (user_id, version) VALUES ($1, 1)
           ON CONFLICT (user_id) DO UPDATE SET version = v.version + 1 RETURNING v.version"""


async def lock_txn(conn: Connection, user_id: str, conversation_id: int, seq: int) -> Row | None:
    """The user's row of the message, locked (first: before the counter); None when there is none."""
    return await conn.fetchrow(
        f"""
        SELECT {SAVED_COLUMNS} FROM saved_message s
         WHERE s.user_id = $1 AND s.conversation_id = $2 AND s.seq = $3 FOR UPDATE
        """,
        user_id,
        conversation_id,
        seq,
    )


async def save_txn(
    conn: Connection, user_id: str, conversation_id: int, seq: int, now: datetime, remind_at: datetime | None
) -> Row:
    """Save the message (again: a removed row comes back saved now; a saved one keeps its saved_at), to be
    reminded at remind_at (None: no reminder; a new remind_at is due again), at the user's next version."""
    return await conn.fetchrow(
        f"""
        WITH v AS ({_BUMP})
        INSERT INTO saved_message AS s (user_id, conversation_id, seq, saved_at, remind_at, version)
        SELECT $1, $2, $3, $4, $5, v.version FROM v
        ON CONFLICT (user_id, conversation_id, seq) DO UPDATE
           SET saved_at = CASE WHEN s.removed THEN excluded.saved_at ELSE s.saved_at END,
               remind_at = excluded.remind_at, reminded_at = NULL, removed = false, version = excluded.version
        RETURNING {SAVED_COLUMNS}
        """,
        user_id,
        conversation_id,
        seq,
        now,
        remind_at,
    )


async def unsave_txn(conn: Connection, user_id: str, conversation_id: int, seq: int) -> Row:
    """Mark the user's (locked, saved) row removed, its reminder with it, at their next version."""
    return await conn.fetchrow(
        f"""
        WITH v AS ({_BUMP})
        UPDATE saved_message s SET removed = true, remind_at = NULL, reminded_at = NULL, version = v.version
          FROM v
         WHERE s.user_id = $1 AND s.conversation_id = $2 AND s.seq = $3
        RETURNING {SAVED_COLUMNS}
        """,
        user_id,
        conversation_id,
        seq,
    )


async def page(conn: Connection, user_id: str, before: tuple[datetime, int, int] | None, limit: int) -> list[Row]:
    """The user's saved messages they still read, newest save first: at most limit rows below `before`
    (saved_at, conversation_id, seq); rows (saved columns..., message columns...)."""
    bound = "" if before is None else "AND (s.saved_at, s.conversation_id, s.seq) < ($3, $4, $5)"
    return await conn.fetch(
        f"""
        SELECT {SAVED_COLUMNS}, {_MESSAGE} FROM saved_message s
          {_READABLE}
         WHERE s.user_id = $1 AND NOT s.removed {bound}
         ORDER BY s.saved_at DESC, s.conversation_id DESC, s.seq DESC
         LIMIT $2
        """,
        user_id,
        limit,
        *(() if before is None else before),
    )


async def changes(conn: Connection, user_id: str, after_version: int, limit: int) -> list[Row]:
    """The user's rows changed after after_version, in version order, at most limit: removed ones too, and
    with live false when the user no longer reads the message (left, deleted). Rows (saved columns..., live,
    message columns... or nulls)."""
    return await conn.fetch(
        f"""
        SELECT {SAVED_COLUMNS}, (m.seq IS NOT NULL) AS live, {_MESSAGE} FROM saved_message s
          LEFT JOIN conversation_member r ON r.conversation_id = s.conversation_id AND r.user_id = s.user_id
          LEFT JOIN message m ON m.conversation_id = s.conversation_id AND m.seq = s.seq
               AND m.deleted_at IS NULL AND s.seq >= r.visible_from_seq
         WHERE s.user_id = $1 AND s.version > $2
         ORDER BY s.version
         LIMIT $3
        """,
        user_id,
        after_version,
        limit,
    )


async def version(conn: Connection, user_id: str) -> int:
    """The user's latest version (0: none yet)."""
    return await conn.fetchval("SELECT coalesce(max(version), 0) FROM saved_version WHERE user_id = $1", user_id)


async def claim_due_txn(conn: Connection, now: datetime, limit: int) -> list[Row]:
    """Up to limit reminders due by now (oldest first), claimed FOR UPDATE SKIP LOCKED: rows
    (user_id, conversation_id, seq, remind_at, live), live false when the user no longer reads the message."""
    return await conn.fetch(
        """
        WITH due AS (
            SELECT s.user_id, s.conversation_id, s.seq, s.remind_at FROM saved_message s
             WHERE s.remind_at <= $1 AND s.reminded_at IS NULL AND s.remind_at IS NOT NULL AND NOT s.removed
             ORDER BY s.remind_at
             LIMIT $2
               FOR UPDATE SKIP LOCKED
        )
        SELECT d.user_id, d.conversation_id, d.seq, d.remind_at, EXISTS (
                 SELECT 1 FROM conversation_member r
                   JOIN message m ON m.conversation_id = r.conversation_id AND m.seq = d.seq AND m.deleted_at IS NULL
                  WHERE r.conversation_id = d.conversation_id AND r.user_id = d.user_id AND d.seq >= r.visible_from_seq
               ) AS live
          FROM due d
         ORDER BY d.remind_at
        """,
        now,
        limit,
    )


async def mark_reminded_txn(conn: Connection, user_id: str, conversation_id: int, seq: int, now: datetime) -> Row:
    """Set a claimed row's reminded_at, at its user's next version; the saved columns after it."""
    return await conn.fetchrow(
        f"""
        WITH v AS ({_BUMP})
        UPDATE saved_message s SET reminded_at = $4, version = v.version FROM v
         WHERE s.user_id = $1 AND s.conversation_id = $2 AND s.seq = $3
        RETURNING {SAVED_COLUMNS}
        """,
        user_id,
        conversation_id,
        seq,
        now,
    )


async def next_due(conn: Connection) -> datetime | None:
    """When the earliest pending reminder is due (None: none pending)."""
    return await conn.fetchval(
        "SELECT min(remind_at) FROM saved_message WHERE reminded_at IS NULL AND remind_at IS NOT NULL AND NOT removed"
    )
