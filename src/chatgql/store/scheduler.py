"""The scheduler's own SQL: its wake-up (LISTEN/NOTIFY). Each source of due work keeps its claim
statement with its table (store/scheduled.py: scheduled messages); services/scheduler.py runs them."""

from __future__ import annotations

from collections.abc import Callable

from ..db import Connection

NOTIFY_CHANNEL = "chatgql_scheduler"
APPLICATION = "chatgql-scheduler"  # its LISTEN connection's application_name


async def notify_txn(conn: Connection) -> None:
    """Wake the schedulers once this transaction commits (a row due sooner than their next look)."""
    await conn.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)


async def listen(conn: Connection, callback: Callable[[], None]) -> None:
    """Call callback() on every notify_txn commit (LISTEN on this dedicated connection)."""
    await conn.add_listener(NOTIFY_CHANNEL, lambda *_: callback())
