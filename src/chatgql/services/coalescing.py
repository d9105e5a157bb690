"""The flush loop the write coalescers share (read_coalescing.py for markRead,
delivery_coalescing.py for markDelivered).

Calls are queued; a background loop (owned by the app's lifespan) flushes what is queued.
Nothing waits on a timer when the process is idle: the first call is flushed at once, and calls
that arrive while a flush is in flight go together into the next one (at most `max_keys` keys a
flush; the rest wait for the one after). `window_seconds` > 0 adds a short wait before each
flush, so that more calls share it (fewer commits, more latency).

Every caller is answered only after its flush committed. A flush that fails fails all of its
callers with its error; one cancelled mid-flush (whether it committed is unknown) cancels them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from ..db import Connection, Database
from ..errors import unavailable

log = logging.getLogger(__name__)

Batch = TypeVar("Batch")
Written = TypeVar("Written")


class Coalescer(Generic[Batch, Written]):
    """start() runs the loop; close() drains and stops it. A subclass holds the queue and says
    how a batch is taken, written (one connection, one commit) and answered."""

    task_name = "coalescer"

    def __init__(
        self,
        database: Database,
        *,
        window_seconds: float = 0.0,
        max_keys: int = 500,
        on_flush: Callable[[int, int], None] | None = None,
    ) -> None:
        self._database = database
        self._window = window_seconds
        self._max_keys = max_keys
        self._on_flush = on_flush  # (keys, calls) of every flush that committed
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name=self.task_name)

    async def close(self, timeout: float = 10.0) -> None:
        """Flush what is queued, then stop (cancelled after timeout: unflushed callers are cancelled)."""
        self._closing = True
        self._wake.set()
        if self._task is None:
            return
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._task)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _new_future(self) -> asyncio.Future[Any]:
        """The future of a call about to be queued (refused once closing)."""
        if self._closing:
            raise unavailable("the server is shutting down")
        return asyncio.get_running_loop().create_future()

    async def run(self) -> None:
        try:
            while True:
                await self._wake.wait()
                if self._window > 0 and not self._closing:
                    await asyncio.sleep(self._window)
                self._wake.clear()
                if not self._queued():
                    if self._closing:
                        return
                    continue
                batch = self._take()
                if self._queued():
                    self._wake.set()  # more than one flush's worth: the next goes right after
                await self._flush(batch)
        finally:
            for future in self._drop_queued():  # cancelled: nothing will flush these
                future.cancel()

    async def _flush(self, batch: Batch) -> None:
        try:
            async with self._database.connection() as conn:
                written = await self._write(conn, batch)
        except Exception as error:
            for future in self._futures(batch):
                if not future.done():
                    future.set_exception(error)
            return
        except BaseException:  # cancelled mid-flush: whether it committed is unknown
            for future in self._futures(batch):
                future.cancel()
            raise
        try:
            if self._on_flush is not None:
                self._on_flush(*self._counts(batch, written))
        except Exception:  # metrics: never worth a caller's answer
            log.exception("after a %s flush", self.task_name)
        self._answer(batch, written)

    # What a subclass says.

    def _queued(self) -> bool:
        raise NotImplementedError

    def _take(self) -> Batch:
        """What the next flush writes (at least one call; at most max_keys keys)."""
        raise NotImplementedError

    def _drop_queued(self) -> Iterable[asyncio.Future[Any]]:
        """Empty the queue; the futures of what was in it."""
        raise NotImplementedError

    def _futures(self, batch: Batch) -> Iterable[asyncio.Future[Any]]:
        raise NotImplementedError

    async def _write(self, conn: Connection, batch: Batch) -> Written:
        """The flush's statements, on one connection; wakes the relay if events were written."""
        raise NotImplementedError

    def _counts(self, batch: Batch, written: Written) -> tuple[int, int]:
        """(keys, calls) the flush wrote, for on_flush."""
        raise NotImplementedError

    def _answer(self, batch: Batch, written: Written) -> None:
        """Answer every caller whose future is not done yet."""
        raise NotImplementedError
