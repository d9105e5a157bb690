"""The broadcast bus (the `broadcaster` package) and its feed into the Dispatcher.

memory:// within one process; redis:// when several API processes serve
subscribers. broadcaster's Redis listener dies silently when its connection
drops, leaving subscribers waiting forever; so the feed sends itself a
heartbeat through the bus and, when one does not come back in time, ends
every subscription with a resync error and reconnects on a new Broadcast.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import orjson
from broadcaster import Broadcast

from ..compat import subscribe_then_listen_redis_backend
from .dispatch import Dispatcher

log = logging.getLogger(__name__)

CHANNEL = "chatgql.events"
HEARTBEAT = "bus.heartbeat"


def _new_broadcast(url: str) -> Broadcast:
    if urlsplit(url).scheme in ("redis", "rediss"):
        # broadcaster's RedisBackend with its start-up race fixed (see compat.py)
        return Broadcast(backend=subscribe_then_listen_redis_backend(url))
    return Broadcast(url)


class Bus:
    """One process's handle on the broadcast bus; reconnect() swaps in a new one."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._broadcast: Broadcast | None = None

    async def connect(self) -> None:
        broadcast = _new_broadcast(self.url)
        await broadcast.connect()
        self._broadcast = broadcast

    async def disconnect(self) -> None:
        broadcast, self._broadcast = self._broadcast, None
        if broadcast is not None:
            with contextlib.suppress(Exception):
                await broadcast.disconnect()

    async def reconnect(self) -> None:
        await self.disconnect()
        await self.connect()

    async def publish(self, message: str) -> None:
        assert self._broadcast is not None, "bus not connected"
        await self._broadcast.publish(CHANNEL, message)
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # redis-py (8.1, on Python 3.11) now and then swallows a cancellation
            # that lands inside a command, and returns as if nothing happened: the
            # caller would go on (a heartbeat or consume loop forever) while whoever
            # cancelled it waits for it to end.
            raise asyncio.CancelledError

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator:
        assert self._broadcast is not None, "bus not connected"
        async with self._broadcast.subscribe(CHANNEL) as subscriber:
            yield subscriber


async def feed_dispatcher(
    bus: Bus,
    dispatcher: Dispatcher,
    ready: asyncio.Event | None = None,
    *,
    heartbeat_seconds: float = 2.0,
) -> None:
    """Hand every bus event to the dispatcher, until cancelled.

    Any break in the stream (a stalled backend, an event that could not be
    dispatched) may have lost events, so subscribers are ended with a resync
    error rather than left believing they saw everything.
    """
    nonce = uuid.uuid4().hex
    beat = orjson.dumps({"type": HEARTBEAT, "from": nonce}).decode()
    reconnected = False
    while True:
        try:
            async with bus.subscribe() as subscriber:
                if reconnected:
                    # Those told to resync may have subscribed again before the
                    # feed was back: they missed events too. Now it is back.
                    dispatcher.interrupt_all()
                if ready is not None:
                    ready.set()
                await _pump(bus, subscriber, dispatcher, beat, heartbeat_seconds)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("broadcast bus feed broke; ending subscriptions and reconnecting", exc_info=True)
        dispatcher.interrupt_all()
        reconnected = True
        await asyncio.sleep(0.5)
        try:
            await bus.reconnect()
        except Exception:
            log.warning("broadcast bus reconnect failed; retrying", exc_info=True)


async def _pump(bus: Bus, subscriber, dispatcher: Dispatcher, beat: str, every: float) -> None:
    async def send_beats() -> None:
        while True:
            await bus.publish(beat)
            await asyncio.sleep(every)

    beater = asyncio.create_task(send_beats())
    loop = asyncio.get_running_loop()
    last_heard = loop.time()
    try:
        while True:
            # Anything arriving proves the listener alive; our own beats make
            # sure something arrives. The deadline is generous: a process
            # saturated with requests must not cut its subscribers off.
            wait = max(0.0, last_heard + 8 * every - loop.time())
            try:
                event = await asyncio.wait_for(subscriber.get(), wait)
            except TimeoutError:
                raise RuntimeError("nothing came back through the bus, not even a heartbeat") from None
            last_heard = loop.time()
            payload = orjson.loads(event.message)
            if payload["type"] == HEARTBEAT:
                continue
            try:
                await dispatcher.dispatch(payload)
            except Exception:
                log.warning("could not dispatch an event; ending subscriptions", exc_info=True)
                dispatcher.interrupt_all()
    finally:
        beater.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await beater
