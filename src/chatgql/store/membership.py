"""The member's own state: settings (mute, archive, pin) and own unread start (0011)."""

from __future__ import annotations

from datetime import datetime

from ..db import Connection, Row
from .conversations import OWN_READ, VIEWER_COLUMNS


async def update_settings_txn(
    conn: Connection,
    conversation_id: int,
    user_id: str,
    *,
    muted: bool | None,
    muted_until: datetime | None,
    archived: bool | None,
    keep_archived: bool | None,
    pinned: bool | None,
    private_receipts: bool | None = None,
) -> Row | None:
    """Change the settings given (None: leave as is) and return the member's row as a Conversation
    shows it (store.conversations.VIEWER_COLUMNS, with the conversation's last_seq); None when
    user_id is not a member.

    - muted True: muted until muted_until (None: until unmuted); False: unmuted.
    - archived True: archived as of the conversation's lastSeq now (a later message brings it
      back unless keep_archived); False: not archived (and not kept archived).
    - pinned True: pinned, keeping its place when it already was; False: unpinned.
    - private_receipts: this conversation's choice, over the user's default (0011b).
    """
    return await conn.fetchrow(
        f"""
        UPDATE conversation_member m SET
               muted = COALESCE($3::boolean, m.muted),
               muted_until = CASE WHEN $3::boolean IS NULL THEN m.muted_until
                                  WHEN $3::boolean THEN $4::timestamptz END,
               archived_seq = CASE WHEN $5::boolean IS NULL THEN m.archived_seq
                                   WHEN $5::boolean THEN c.last_seq END,
               keep_archived = CASE WHEN $5::boolean IS FALSE THEN false
                                    WHEN $6::boolean IS NOT NULL THEN $6::boolean
                                    WHEN $5::boolean THEN false
                                    ELSE m.keep_archived END,
               pinned_at = CASE WHEN $7::boolean IS NULL THEN m.pinned_at
                                WHEN $7::boolean THEN COALESCE(m.pinned_at, clock_timestamp()) END,
               receipts_override = COALESCE($8::boolean, m.receipts_override),
               receipts_private = COALESCE($8::boolean, m.receipts_private)
          FROM conversation c
         WHERE c.id = m.conversation_id AND m.conversation_id = $1 AND m.user_id = $2
        RETURNING c.last_seq, {VIEWER_COLUMNS}
        """,
        conversation_id,
        user_id,
        muted,
        muted_until,
        archived,
        keep_archived,
        pinned,
        private_receipts,
    )


async def is_member(conn: Connection, conversation_id: int, user_id: str) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT 1 FROM conversation_member WHERE conversation_id = $1 AND user_id = $2", conversation_id, user_id
        )
    )


async def mark_unread_txn(conn: Connection, conversation_id: int, user_id: str, from_seq: int) -> Row | None:
    """The member's own unread starts again at from_seq (never later than it starts now, nor before the first
    seq the member may read, visible_from_seq): own_read_seq
    = min(from_seq - 1, own read position), valid while the public watermark stays where it is
    (own_read_below). The watermark others see does not move. Returns the member's row
    (VIEWER_COLUMNS, with last_seq); None when not a member or from_seq > lastSeq."""
    return await conn.fetchrow(
        f"""
        UPDATE conversation_member m SET
               own_read_seq = NULLIF(LEAST(GREATEST($3::bigint, m.visible_from_seq) - 1, {OWN_READ}), m.last_read_seq),
               own_read_below = m.last_read_seq
          FROM conversation c
         WHERE c.id = m.conversation_id AND m.conversation_id = $1 AND m.user_id = $2 AND $3::bigint <= c.last_seq
        RETURNING c.last_seq, {VIEWER_COLUMNS}
        """,
        conversation_id,
        user_id,
        from_seq,
    )


async def raise_own_read_txn(conn: Connection, conversation_id: int, user_id: str, seq: int) -> Row | None:
    """markRead during a rewind (markUnread) that did not move the public watermark: the own read
    position rises to min(seq, lastSeq), and the rewind ends once it reaches the watermark. With
    private receipts (0011b) markRead never moves the watermark: the own position rises past it. Returns
    the member's row (VIEWER_COLUMNS, with last_seq) when it rose; None otherwise (no rewind, or
    already at or above)."""
    return await conn.fetchrow(
        f"""
        UPDATE conversation_member m SET
               own_read_seq = CASE WHEN m.receipts_private THEN LEAST($3::bigint, c.last_seq)
                                   ELSE NULLIF(LEAST($3::bigint, c.last_seq, m.last_read_seq), m.last_read_seq) END,
               own_read_below = m.last_read_seq
          FROM conversation c
         WHERE c.id = m.conversation_id AND m.conversation_id = $1 AND m.user_id = $2
           AND {OWN_READ} < LEAST($3::bigint, c.last_seq)
           AND (m.receipts_private OR (m.own_read_seq IS NOT NULL AND m.own_read_below = m.last_read_seq))
        RETURNING c.last_seq, {VIEWER_COLUMNS}
        """,
        conversation_id,
        user_id,
        seq,
    )


async def member_count_if_member(conn: Connection, conversation_id: int, user_id: str) -> int | None:
    """The conversation's member_count when user_id is a member of it; None otherwise."""
    return await conn.fetchval(
        """
        SELECT c.member_count FROM conversation c
          JOIN conversation_member m ON m.conversation_id = c.id AND m.user_id = $2
         WHERE c.id = $1
        """,
        conversation_id,
        user_id,
    )


async def set_private_receipts(conn: Connection, user_id: str, private: bool) -> None:
    """The user's default (user_setting), applied to every membership without a choice of its own."""
    await conn.execute(
        """
        INSERT INTO user_setting (user_id, private_receipts) VALUES ($1, $2)
        ON CONFLICT (user_id) DO UPDATE SET private_receipts = excluded.private_receipts
        """,
        user_id,
        private,
    )
    await conn.execute(
        "UPDATE conversation_member SET receipts_private = $2"
        " WHERE user_id = $1 AND receipts_override IS NULL AND receipts_private <> $2",
        user_id,
        private,
    )


async def private_receipts(conn: Connection, user_ids: list[str]) -> dict[str, bool]:
    rows = await conn.fetch(
        "SELECT user_id, private_receipts FROM user_setting WHERE user_id = ANY($1::text[])", user_ids
    )
    return {row["user_id"]: row["private_receipts"] for row in rows}
