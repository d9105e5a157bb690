"""Presence (migration 0031_presence): each user's last seen and who may see their presence.

Online state is not here (events/presence.py). Who sees a user's presence: the user themselves;
others only when they share a conversation with them, and then as the user's visibility says
(EVERYONE: anyone who shares one; CONTACTS: who shares a direct conversation; NOBODY: nobody).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..db import Connection, Row

LAST_SEEN_EVERY_SECONDS = 60  # last_seen_at is written at most this often per user


async def touch_last_seen(conn: Connection, user_id: str, now: datetime) -> datetime | None:
    """Set the user's last seen to now unless it was written less than LAST_SEEN_EVERY_SECONDS before
    (one statement, whichever process asks): the last seen stored after the call."""
    return await conn.fetchval(
        """
        WITH written AS (
            INSERT INTO user_presence AS p (user_id, last_seen_at) VALUES ($1, $2)
            ON CONFLICT (user_id) DO UPDATE SET last_seen_at = EXCLUDED.last_seen_at
             WHERE p.last_seen_at IS NULL OR p.last_seen_at <= EXCLUDED.last_seen_at - make_interval(secs => $3)
            RETURNING p.last_seen_at
        )
        SELECT last_seen_at FROM written
        UNION ALL
        SELECT last_seen_at FROM user_presence WHERE user_id = $1 AND NOT EXISTS (SELECT 1 FROM written)
        """,
        user_id,
        now,
        LAST_SEEN_EVERY_SECONDS,
    )


async def set_visibility(conn: Connection, user_id: str, visibility: str) -> None:
    await conn.execute(
        """
        INSERT INTO user_presence AS p (user_id, visibility) VALUES ($1, $2)
        ON CONFLICT (user_id) DO UPDATE SET visibility = EXCLUDED.visibility
        """,
        user_id,
        visibility,
    )


async def visible_to(conn: Connection, viewer_id: str, user_ids: Sequence[str]) -> list[Row]:
    """Of user_ids, those whose presence the viewer may see now: (user_id, last_seen_at, visibility)."""
    return await conn.fetch(
        """
        SELECT u.user_id, p.last_seen_at, coalesce(p.visibility, 'EVERYONE') AS visibility
          FROM unnest($2::text[]) AS u(user_id)
          LEFT JOIN user_presence p ON p.user_id = u.user_id
         WHERE u.user_id = $1
            OR (coalesce(p.visibility, 'EVERYONE') <> 'NOBODY' AND EXISTS (
                SELECT 1 FROM conversation_member theirs
                  JOIN conversation_member mine
                    ON mine.conversation_id = theirs.conversation_id AND mine.user_id = $1
                  JOIN conversation c ON c.id = theirs.conversation_id
                 WHERE theirs.user_id = u.user_id
                   AND (coalesce(p.visibility, 'EVERYONE') = 'EVERYONE' OR c.type = 'DIRECT')))
        """,
        viewer_id,
        list(user_ids),
    )


async def visibility_of(conn: Connection, user_id: str) -> str:
    found = await conn.fetchval("SELECT visibility FROM user_presence WHERE user_id = $1", user_id)
    return found or "EVERYONE"
