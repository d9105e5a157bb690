"""The API's clock (Deps.clock) in a test's hands: time-based features (pins' expiry, scheduled and
disappearing messages, reminders, last seen) are tested by moving it, never by sleeping."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any


class Clock:
    """A clock that moves only when the test moves it."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime(2031, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@contextmanager
def controlled(server: Any, clock: Clock | None = None) -> Iterator[Clock]:
    """server's clock replaced by clock (a new one by default) until the block ends."""
    deps = server.runtime.deps
    saved, deps.clock = deps.clock, clock or Clock()
    try:
        yield deps.clock
    finally:
        deps.clock = saved
