"""Waking the outbox relay once events have committed.

A RelayWakeup hooks itself into its Database (`event_hooks`): every commit
that wrote outbox rows through the services calls wake() once, whoever called
the service (GraphQL, the markRead coalescer, group commit, a script, a test),
and a rollback never does (db.Database.on_commit; services/ call
database.events_written(conn)). wake() wakes the shards of the in-process
relay (if this process runs one) and, unless that relay leads every shard,
sends one pg_notify for the relays of other processes (they wake all their
shards). A worker of `chatgql serve` with a hub (hub.py) tells the hub instead,
and its supervisor's relay does the rest.
The NOTIFY is a statement of its own, outside the write transaction (a
notifying commit takes a database-wide lock), and debounced: at most one in
flight per process, so a burst of writes costs one NOTIFY, not one each.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..db import Database
from ..runtime.tasks import process_task
from ..store import outbox
from .relay import OutboxRelay

log = logging.getLogger(__name__)


class RelayWakeup:
    def __init__(self, database: Database) -> None:
        self._database = database
        self.local: OutboxRelay | None = None  # the in-process relay, when there is one
        # A worker of `chatgql serve` wakes its supervisor's relay through the hub, not PostgreSQL.
        self.remote: Callable[[], None] | None = None
        self._dirty = False
        self._task: asyncio.Task | None = None
        database.event_hooks.append(self.wake)

    def wake(self) -> None:
        if self.local is not None:
            self.local.wake()
            if self.local.is_leader:  # it leads every shard: no other relay has anything to do
                return
        elif self.remote is not None:
            self.remote()  # the supervisor's relay NOTIFYs the others when it does not lead every shard
            return
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = process_task(self._notify(), "outbox-notify")  # not the request's whose commit woke it

    async def _notify(self) -> None:
        while self._dirty:
            self._dirty = False
            try:
                async with self._database.connection() as conn:
                    await outbox.notify(conn)
            except Exception:
                # The relay's poll picks the events up anyway.
                log.warning("could not notify the outbox relay", exc_info=True)
                return

    async def close(self) -> None:
        if self.wake in self._database.event_hooks:
            self._database.event_hooks.remove(self.wake)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
