"""The scheduler: durable due work on PostgreSQL, fired exactly once.

A source of due work is a table of rows, each due at a time, and a `DueSource` naming three things
(docs/internals/scheduler.md says how to add one):

- claim(conn, now, limit): its due rows, locked `FOR UPDATE SKIP LOCKED` (so two schedulers never
  take the same row, and neither waits for the other), at most limit;
- fire(database, conn, row, now): what the row's time brings, in the claim's transaction, which
  marks the row done (a state, or deleted) so that no later claim finds it;
- next_due(conn): when its earliest row is due, so the scheduler sleeps until then, not a poll.

Each row is claimed and fired in a transaction of its own: what committed is done once, what did
not (a crash, a database outage) is claimed again later. A row is therefore late by a failure,
never lost nor fired twice. Sources register at import (`register`); every process that runs the
relay runs a Scheduler over all of them (server/app.py). A write that makes a row due sooner than
the schedulers' next look wakes them (`store.scheduler.notify_txn`, in its transaction).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from ..db import Connection, Database, Row
from ..store import scheduler as store

log = logging.getLogger(__name__)

Claim = Callable[[Connection, datetime, int], Awaitable[list[Row]]]
Fire = Callable[[Database, Connection, Row, datetime], Awaitable[None]]
NextDue = Callable[[Connection], Awaitable[datetime | None]]


@dataclass(frozen=True, slots=True)
class DueSource:
    name: str
    claim: Claim
    fire: Fire
    next_due: NextDue


SOURCES: dict[str, DueSource] = {}
MIN_DELAY_SECONDS = 0.05


def register(source: DueSource) -> DueSource:
    """Add a source of due work to every Scheduler made from now on (a module calls it at import)."""
    if source.name in SOURCES and SOURCES[source.name] is not source:
        raise ValueError(f"two sources of due work are called {source.name}")
    SOURCES[source.name] = source
    return source


def registered() -> list[DueSource]:
    return list(SOURCES.values())


class Scheduler:
    """Fires the due rows of its sources: at their time (the clock's), on a wake-up, and at least
    every poll_seconds. Several may run on one database (one per process running the relay)."""

    def __init__(
        self,
        database: Database,
        sources: Iterable[DueSource],
        *,
        clock: Callable[[], datetime],
        poll_seconds: float = 1.0,
        retry_seconds: float = 0.5,
    ) -> None:
        self._database = database
        self.sources = list(sources)
        self._clock = clock
        self._poll_seconds = poll_seconds
        self._retry_seconds = retry_seconds
        self._wakeup = asyncio.Event()
        self.fired: Counter[str] = Counter()  # rows fired by this scheduler, by source

    def wake(self) -> None:
        """Look for due rows now (a row was scheduled, or the clock moved)."""
        self._wakeup.set()

    async def run_due(self, sources: Iterable[DueSource] | None = None) -> int:
        """Fire every row of these sources (None: all) due by the clock's now, each in its own
        transaction; returns how many."""
        fired = 0
        for source in self.sources if sources is None else sources:
            while True:
                now = self._clock()
                async with self._database.transaction() as conn:
                    rows = await source.claim(conn, now, 1)
                    if not rows:
                        break
                    await source.fire(self._database, conn, rows[0], now)
                self.fired[source.name] += 1
                fired += 1
        return fired

    async def _pass(self, conn: Connection) -> float:
        """Fire what is due, claiming only from the sources that have a due row (idle, a pass costs
        one next_due statement per source, on the scheduler's own connection); returns how long to
        sleep: until the earliest row is due, at most poll_seconds."""
        dues = [(source, await source.next_due(conn)) for source in self.sources]
        now = self._clock()
        ready = [source for source, due in dues if due is not None and due <= now]
        if ready:
            # Fired some: look again at once. None: those rows are another scheduler's, being fired.
            return 0.0 if await self.run_due(ready) else MIN_DELAY_SECONDS
        waits = [(due - now).total_seconds() for _, due in dues if due is not None]
        return min([self._poll_seconds, *waits])

    async def run(self) -> None:
        """Fire due rows until cancelled; any failure (the database gone) is retried after a pause."""
        while True:
            try:
                await self._listening()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("the scheduler failed; retrying", exc_info=True)
                await asyncio.sleep(self._retry_seconds)

    async def _listening(self) -> None:
        conn = await self._database.dedicated(application_name=store.APPLICATION)
        try:
            await store.listen(conn, self.wake)
            while not conn.is_closed():
                self._wakeup.clear()  # before the pass: a wake-up during it brings another
                delay = await self._pass(conn)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wakeup.wait()
        finally:
            conn.terminate()
