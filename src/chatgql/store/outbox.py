"""The transactional outbox: events written with the data they describe."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from sqlalchemy import Row, text
from sqlalchemy.ext.asyncio import AsyncConnection


async def append(conn: AsyncConnection, events: Sequence[tuple[str, dict]]) -> None:
    """Queue (key, payload) events in the caller's transaction."""
    if not events:
        return
    await conn.execute(
        text("INSERT INTO outbox (msg_key, payload) VALUES (:key, CAST(:payload AS jsonb))"),
        [{"key": key, "payload": orjson.dumps(payload).decode()} for key, payload in events],
    )


async def oldest(conn: AsyncConnection, limit: int) -> list[Row]:
    """The next events to relay, in id order."""
    result = await conn.execute(
        text("SELECT id, msg_key, payload FROM outbox ORDER BY id LIMIT :limit"),
        {"limit": limit},
    )
    return list(result)


async def delete(conn: AsyncConnection, ids: Sequence[int]) -> None:
    await conn.execute(text("DELETE FROM outbox WHERE id = ANY(CAST(:ids AS bigint[]))"), {"ids": list(ids)})


async def backlog(conn: AsyncConnection) -> Row:
    """(rows, age of the oldest row in seconds) for /metrics."""
    result = await conn.execute(
        text(
            """
            SELECT count(*) AS rows,
                   coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age
              FROM outbox
            """
        )
    )
    return result.one()


RELAY_LOCK = 7261302  # advisory lock key: one active relay per database
NOTIFY_CHANNEL = "chatgql_outbox"


async def try_lead(conn: AsyncConnection) -> bool:
    """Take the relay's session-level advisory lock on this (autocommit) connection."""
    result = await conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": RELAY_LOCK})
    return bool(result.scalar_one())


async def notify(conn: AsyncConnection) -> None:
    """Tell listening relays that events have committed (run it after the commit)."""
    await conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": NOTIFY_CHANNEL})


async def listen(conn: AsyncConnection, callback) -> None:
    """Call callback() whenever events commit (LISTEN on the raw asyncpg connection)."""
    raw = (await conn.get_raw_connection()).driver_connection
    await raw.add_listener(NOTIFY_CHANNEL, lambda *_: callback())
