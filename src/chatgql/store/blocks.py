"""Blocks between users (user_block): who blocked whom."""

from __future__ import annotations

from collections.abc import Sequence

from ..db import Connection, Row

_PAIR_LOCK = 7261305  # advisory lock namespace (two-key form): one pair of users' direct chat and blocks


async def lock_pair_txn(conn: Connection, user_low: str, user_high: str) -> None:
    """Serialize, until the transaction ends, what decides whether two users may talk directly: a block
    between them and the creation of their direct conversation."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2 || chr(10) || $3))", _PAIR_LOCK, user_low, user_high
    )


async def lock_direct_txn(conn: Connection, user_low: str, user_high: str) -> int | None:
    """Lock the pair's direct conversation row, if they have one (every send to it locks it first): a send
    that has not committed yet commits before this returns, and one after it sees what this transaction
    commits."""
    return await conn.fetchval(
        """
        SELECT c.id FROM direct_pair d JOIN conversation c ON c.id = d.conversation_id
         WHERE d.user_low = $1 AND d.user_high = $2
           FOR NO KEY UPDATE OF c
        """,
        user_low,
        user_high,
    )


async def insert(conn: Connection, blocker_id: str, blocked_id: str) -> bool:
    """Record the block; False when it was there already."""
    return (
        await conn.fetchval(
            """
            INSERT INTO user_block (blocker_id, blocked_id) VALUES ($1, $2)
            ON CONFLICT DO NOTHING RETURNING true
            """,
            blocker_id,
            blocked_id,
        )
        is not None
    )


async def delete(conn: Connection, blocker_id: str, blocked_id: str) -> bool:
    """Remove the block; False when there was none."""
    return (
        await conn.fetchval(
            "DELETE FROM user_block WHERE blocker_id = $1 AND blocked_id = $2 RETURNING true", blocker_id, blocked_id
        )
        is not None
    )


async def blocked_either_way(conn: Connection, user_id: str, others: Sequence[str]) -> list[str]:
    """Those of others with a block between them and user_id, in either direction."""
    rows = await conn.fetch(
        """
        SELECT blocked_id AS other FROM user_block WHERE blocker_id = $1 AND blocked_id = ANY ($2::text[])
        UNION
        SELECT blocker_id FROM user_block WHERE blocked_id = $1 AND blocker_id = ANY ($2::text[])
        """,
        user_id,
        list(others),
    )
    return [row["other"] for row in rows]


async def blocked_by(conn: Connection, blocker_id: str, user_ids: Sequence[str]) -> set[str]:
    """Those of user_ids that blocker_id blocked."""
    rows = await conn.fetch(
        "SELECT blocked_id FROM user_block WHERE blocker_id = $1 AND blocked_id = ANY ($2::text[])",
        blocker_id,
        list(user_ids),
    )
    return {row["blocked_id"] for row in rows}


async def page(conn: Connection, blocker_id: str, after: str, limit: int) -> list[Row]:
    """(blocked_id, created_at) of the users blocker_id blocked, by id ascending, after `after` ("": from the first)."""
    return await conn.fetch(
        """
        SELECT blocked_id, created_at FROM user_block
         WHERE blocker_id = $1 AND blocked_id > $2
         ORDER BY blocked_id LIMIT $3
        """,
        blocker_id,
        after,
        limit,
    )
