"""The bus heartbeat judges a connection by the beats sent on it, not by the clock.

A process whose event loop could not run for a while (one request holding it, before the
answer-size bounds; swap; a debugger) used to find every beat "late" when it ran again and
ended every live subscription with the resync error. A stall sends no beats, so it now
counts for nothing; beats that are sent and never come back still end them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from chatgql.events.bus import MISSED_BEATS, Bus, feed_dispatcher
from chatgql.events.dispatch import Dispatcher, MembershipCache

EVERY = 0.05


async def _members(conversation_id: int, subscribed: list[str]) -> tuple[int, list[str]]:
    return 1, ["1"]


class _Feed:
    def __init__(self) -> None:
        self.bus = Bus("memory://")
        self.dispatcher = Dispatcher(MembershipCache(_members), buffer=100)
        self.interrupts = 0
        interrupt_all = self.dispatcher.interrupt_all

        def counted() -> None:
            self.interrupts += 1
            interrupt_all()

        self.dispatcher.interrupt_all = counted  # type: ignore[method-assign]
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> _Feed:
        await self.bus.connect()
        ready = asyncio.Event()
        self.task = asyncio.create_task(feed_dispatcher(self.bus, self.dispatcher, ready, heartbeat_seconds=EVERY))
        await asyncio.wait_for(ready.wait(), 10)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.bus.disconnect()

    async def beats_heard(self, count: int) -> None:
        """Until the feed's bus received `count` more messages (its beats coming back)."""
        target = self.bus.received + count
        async with asyncio.timeout(30):
            while self.bus.received < target:
                await asyncio.sleep(EVERY)


async def test_a_stalled_event_loop_does_not_end_the_live_subscriptions():
    async with _Feed() as feed:
        await feed.beats_heard(2)
        time.sleep(EVERY * MISSED_BEATS * 3)  # the loop runs nothing for 24 beat periods
        await feed.beats_heard(MISSED_BEATS + 2)  # and then runs again, long enough to judge
        assert feed.interrupts == 0, "a stall of the process's own event loop ended every subscription"
        async with feed.dispatcher.subscribe("1", None, "message.new") as subscription:
            await feed.dispatcher.dispatch({"type": "message.new", "conversationId": 1, "seq": 1})
            event = await asyncio.wait_for(anext(aiter(subscription)), 10)
            assert event["seq"] == 1


async def test_beats_that_never_come_back_still_end_them():
    async with _Feed() as feed:
        await feed.beats_heard(2)

        async def lost(channel: str, message: str) -> None:
            return None  # the bus takes the beat and it never arrives

        feed.bus.publish_on = lost  # type: ignore[method-assign]
        async with asyncio.timeout(30):
            while feed.interrupts == 0:
                await asyncio.sleep(EVERY)
