"""The transactional outbox: events written with the data they describe."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..db import Connection, Row


async def append(conn: Connection, events: Sequence[tuple[str, dict]]) -> None:
    """Queue (key, payload) events in the caller's transaction."""
    if not events:
        return
    await conn.execute(
        """
        INSERT INTO outbox (msg_key, payload)
        SELECT key, payload FROM unnest($1::text[], $2::jsonb[]) WITH ORDINALITY AS e(key, payload, n) ORDER BY n
        """,
        [key for key, _ in events],
        [payload for _, payload in events],
    )


async def oldest(conn: Connection, limit: int) -> list[Row]:
    """The next events to relay, in id order."""
    return await conn.fetch("SELECT id, msg_key, payload FROM outbox ORDER BY id LIMIT $1", limit)


async def delete(conn: Connection, ids: Sequence[int]) -> None:
    await conn.execute("DELETE FROM outbox WHERE id = ANY($1::bigint[])", list(ids))


async def backlog(conn: Connection) -> Row:
    """(rows, age of the oldest row in seconds) for /metrics."""
    return await conn.fetchrow(
        """
        SELECT count(*) AS rows,
               coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age
          FROM outbox
        """
    )


RELAY_LOCK = 7261302  # advisory lock key: one active relay per database
NOTIFY_CHANNEL = "chatgql_outbox"


async def try_lead(conn: Connection) -> bool:
    """Take the relay's session-level advisory lock on this (dedicated, autocommit) connection."""
    return bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)", RELAY_LOCK))


async def notify(conn: Connection) -> None:
    """Tell listening relays that events have committed (run it after the commit)."""
    await conn.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)


async def listen(conn: Connection, callback: Callable[[], None]) -> None:
    """Call callback() whenever events commit (LISTEN on this dedicated connection)."""
    await conn.add_listener(NOTIFY_CHANNEL, lambda *_: callback())
