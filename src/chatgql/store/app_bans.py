"""App-wide bans (user_ban): the operator's, refused everywhere while they hold; a ban from one group is store/bans.py's."""

from __future__ import annotations

from datetime import datetime

from ..db import Connection, Row

_BAN_LOCK = 7261304  # advisory lock namespace (two-key form): a user's sends (shared) and bans (exclusive)


async def lock_user_txn(conn: Connection, user_id: str) -> None:
    """Wait for every send of user_id in progress to commit (each holds this lock shared: chat_send); sends
    after wait for this transaction and see what it commits."""
    await conn.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", _BAN_LOCK, user_id)


async def upsert_user_ban(conn: Connection, user_id: str, until: datetime | None, by: str, reason: str) -> None:
    await conn.execute(
        """
        INSERT INTO user_ban (user_id, until, banned_by, reason) VALUES ($1, $2, $3, $4)
        ON CONFLICT (user_id) DO UPDATE
           SET until = excluded.until, banned_by = excluded.banned_by, reason = excluded.reason,
               created_at = now()
        """,
        user_id,
        until,
        by,
        reason,
    )


async def delete_user_ban(conn: Connection, user_id: str) -> bool:
    return await conn.fetchval("DELETE FROM user_ban WHERE user_id = $1 RETURNING true", user_id) is not None


async def active_user_bans(conn: Connection) -> list[Row]:
    """(user_id, until) of every app-wide ban that has not ended."""
    return await conn.fetch(
        "SELECT user_id, until FROM user_ban WHERE until IS NULL OR until > clock_timestamp() ORDER BY user_id"
    )
