"""The broadcast bus and its feed into the Dispatcher.

memory:// within one process; redis:// (one Redis, one channel carrying every
event to every API process) or redis+cluster:// (Redis Cluster sharded pub/sub)
when several API processes serve subscribers. The backends are chatgql's own
(events/backends.py), each a BusBackend.

On a cluster, events go on per-conversation-bucket channels,
`chatgql.events.{b}` with b = crc32(conversation id) % buckets (the hash tag
puts a bucket on one slot, so one node), and each process listens only to the
buckets its subscriptions need: a subscription to one conversation wants its
bucket, a subscription to all of the viewer's conversations wants every bucket
(a conversation the viewer joins later would otherwise be missed: its
member.added event travels on its own bucket).

An event's commit time travels with it without touching the event's JSON: a
message on the bus is either the event's JSON text, or `@<commit time in epoch
ms> <the JSON text>` (envelope()). The feed decodes each message once and hands
the event and its time to the Dispatcher, which applies the delay bound.

Within one process (memory://) events do not take the bus at all: the Kafka
consumer, or the relay when there is no Kafka, hands them decoded straight to
the Dispatcher (app.py wires it). The bus then carries only the feed's heartbeat.

A listener that stalls or breaks may have lost events, so the feed sends
itself a heartbeat through every connection it listens on (one per cluster
node) and, when one does not come back in time or the backend reports a break,
ends every subscription with a resync error and reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import orjson

from .backends import BusBackend, BusMessage, backend_for, is_sharded
from .dispatch import Dispatcher, StreamInterrupted
from .hub import hub_backend, is_hub

log = logging.getLogger(__name__)

CHANNEL = "chatgql.events"
HEARTBEAT = "bus.heartbeat"
DEFAULT_BUCKETS = 64
# The feed hands on at most this many already-received events before letting other tasks run.
YIELD_EVERY = 64
# Heartbeats sent on a channel in a row with nothing back: its connection is taken for dead (_pump).
MISSED_BEATS = 8
# How long a channel no subscription wants stays subscribed (see Bus.release).
UNSUBSCRIBE_AFTER_SECONDS = 5.0


def envelope(message: bytes, committed_ms: int | None) -> bytes:
    """The bus message for an event's JSON and its commit time (epoch ms; None: unknown)."""
    if committed_ms is None:
        return message
    return b"@%d %s" % (committed_ms, message)


def open_envelope(message: str | bytes) -> tuple[dict, float | None]:
    """(the decoded event, its commit time in epoch seconds or None): one JSON decode."""
    if isinstance(message, bytes):
        message = message.decode()
    if message[:1] == "@":
        space = message.index(" ")
        return orjson.loads(message[space + 1 :]), int(message[1:space]) / 1000
    return orjson.loads(message), None


def bucket_of(key: str, buckets: int) -> int:
    """A conversation's bucket (key: its id as text, the outbox and Kafka key): fixed, the same in every process."""
    return zlib.crc32(key.encode()) % buckets


def _backend(url: str) -> BusBackend:
    """The backend for a bus URL: backends.py's, or the supervisor's hub (hub.py)."""
    return hub_backend(url) if is_hub(url) else backend_for(url)


class Bus:
    """One process's handle on the broadcast bus; reconnect() swaps in a new backend.

    want()/release() say which conversations this process's subscriptions need
    (None: all of a viewer's); the bus keeps the backend subscribed to exactly
    the channels that carry them, across reconnects.
    """

    def __init__(self, url: str, buckets: int = DEFAULT_BUCKETS) -> None:
        self.url = url
        self.sharded = is_sharded(url)
        self.buckets = buckets
        self._backend: Any = None  # listens (and publishes, for memory://)
        self._publisher: Any = None  # publishes, for Redis
        self._wanted: Counter[str] = Counter()
        self._subscribed: set[str] = set()
        self._lock = asyncio.Lock()
        self.unsubscribe_after = UNSUBSCRIBE_AFTER_SECONDS
        self._pending_sync: asyncio.TimerHandle | None = None
        self._background: set[asyncio.Task[None]] = set()
        self.published = 0
        # Events (not heartbeats) by channel: what this process published, what its feed received.
        self.events_published: Counter[str] = Counter()
        self.events_received: Counter[str] = Counter()
        self._received_before = 0  # by backends since replaced
        if not self.sharded:
            self._wanted[CHANNEL] += 1  # the one channel, always

    @property
    def received(self) -> int:
        """What this process's backends received (events and heartbeats), over reconnects."""
        current = self._backend.received if self._backend is not None else 0
        return self._received_before + current

    @property
    def channels(self) -> frozenset[str]:
        """The channels the current backend is subscribed to."""
        return frozenset(self._subscribed)

    def channel_for(self, key: str | int) -> str:
        if not self.sharded:
            return CHANNEL
        return f"{CHANNEL}.{{{bucket_of(str(key), self.buckets)}}}"

    def _channels_for(self, conversation_id: int | None) -> list[str]:
        if not self.sharded:
            return []
        if conversation_id is None:
            return [f"{CHANNEL}.{{{b}}}" for b in range(self.buckets)]
        return [self.channel_for(conversation_id)]

    async def connect(self) -> None:
        """Connect the publishing side (once) and the listening side."""
        if self._publisher is None and urlsplit(self.url).scheme != "memory":
            # Its own clients: a broken listener (and the feed's reconnect) never stops publishing.
            publisher = _backend(self.url)
            await publisher.connect()
            self._publisher = publisher
        await self._connect_listener()

    async def _connect_listener(self) -> None:
        backend = _backend(self.url)
        await backend.connect()
        async with self._lock:  # not while a _sync of the previous backend is under way
            self._backend = backend
            self._subscribed = set()
        try:
            await self._sync()
        except BaseException:
            await self._disconnect_listener()
            raise

    async def _disconnect_listener(self) -> None:
        backend, self._backend = self._backend, None
        if backend is not None:
            self._received_before += backend.received
            with contextlib.suppress(Exception):
                await backend.disconnect()

    async def disconnect(self) -> None:
        if self._pending_sync is not None:
            self._pending_sync.cancel()
            self._pending_sync = None
        for task in list(self._background):
            task.cancel()
        await self._disconnect_listener()
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            with contextlib.suppress(Exception):
                await publisher.disconnect()

    async def reconnect(self) -> None:
        """A new listening side (the publishing side stays as it is)."""
        await self._disconnect_listener()
        await self._connect_listener()

    async def want(self, conversation_id: int | None) -> None:
        """A subscription needs this conversation's events (None: all of the viewer's).
        Returns once the channels are subscribed (or the bus is down: the feed resyncs
        everyone when it is back); raises StreamInterrupted when subscribing failed."""
        channels = self._channels_for(conversation_id)
        if not channels:
            return
        self._wanted.update(channels)
        try:
            await self._sync()
        except asyncio.CancelledError:
            self._forget(channels)
            raise
        except Exception:
            self._forget(channels)
            log.warning("could not subscribe the bus to %d channel(s)", len(channels), exc_info=True)
            raise StreamInterrupted() from None

    async def release(self, conversation_id: int | None) -> None:
        """A subscription no longer needs this conversation's events. Its channels are
        unsubscribed only after UNSUBSCRIBE_AFTER_SECONDS unwanted: a client subscribing
        again (after a resync, a reconnect) finds them subscribed and is live at once."""
        channels = self._channels_for(conversation_id)
        if not channels:
            return
        self._forget(channels)
        if self._pending_sync is None:
            self._pending_sync = asyncio.get_running_loop().call_later(self.unsubscribe_after, self._sync_later)

    def _sync_later(self) -> None:
        self._pending_sync = None

        async def run() -> None:
            with contextlib.suppress(Exception):
                await self._sync()

        task = asyncio.create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _forget(self, channels: list[str]) -> None:
        self._wanted.subtract(channels)
        for channel in channels:
            if self._wanted[channel] <= 0:
                del self._wanted[channel]

    async def _sync(self) -> None:
        """Subscribe what is wanted and not subscribed, unsubscribe what is no longer wanted."""
        async with self._lock:
            backend = self._backend
            if backend is None:
                return
            for channel in sorted(self._wanted.keys() - self._subscribed):
                await backend.subscribe(channel)
                self._subscribed.add(channel)
            for channel in sorted(self._subscribed - self._wanted.keys()):
                if self._wanted[channel] <= 0:
                    self._subscribed.discard(channel)
                    await backend.unsubscribe(channel)

    def beat_channels(self) -> list[str]:
        """One subscribed channel per listening connection: a heartbeat on each passes every connection."""
        backend = self._backend
        if backend is None:
            return []
        groups = backend.listening_groups() if hasattr(backend, "listening_groups") else [set(self._subscribed)]
        return [min(group) for group in groups if group]

    async def publish(self, message: str, key: str | int | None = None) -> None:
        """Publish an event (key: its conversation id, which picks its bucket on a cluster)."""
        if self.sharded and key is None:
            key = orjson.loads(message)["conversationId"]
        channel = self.channel_for(key if key is not None else "")
        await self.publish_on(channel, message)
        self.events_published[channel] += 1

    async def publish_many(self, messages: Sequence[tuple[str, bytes | str]]) -> None:
        """Publish (key, message) pairs in order, pipelined: one round trip per batch, not per event."""
        if not messages:
            return
        backend = self._publisher or self._backend
        assert backend is not None, "bus not connected"
        pairs = [(self.channel_for(key), message) for key, message in messages]
        if hasattr(backend, "publish_many"):
            await backend.publish_many(pairs)
        else:
            for channel, message in pairs:
                await backend.publish(channel, message)
        self.published += len(pairs)
        for channel, _ in pairs:
            self.events_published[channel] += 1
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError  # see publish_on

    async def publish_on(self, channel: str, message: str) -> None:
        backend = self._publisher or self._backend
        assert backend is not None, "bus not connected"
        await backend.publish(channel, message)
        self.published += 1
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            # redis-py (8.1, on Python 3.11) now and then swallows a cancellation
            # that lands inside a command, and returns as if nothing happened: the
            # caller would go on (a heartbeat or consume loop forever) while whoever
            # cancelled it waits for it to end.
            raise asyncio.CancelledError

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[_Receiver]:
        """What the backend receives, on every channel this bus is subscribed to."""
        assert self._backend is not None, "bus not connected"
        yield _Receiver(self._backend)


class _Receiver:
    def __init__(self, backend: BusBackend) -> None:
        self._backend = backend

    async def get(self) -> BusMessage:
        return await self._backend.next_published()

    def get_nowait(self) -> BusMessage | None:
        """An event already received, or None."""
        return self._backend.next_published_nowait()


async def feed_dispatcher(
    bus: Bus,
    dispatcher: Dispatcher,
    ready: asyncio.Event | None = None,
    *,
    heartbeat_seconds: float = 2.0,
) -> None:
    """Hand every bus event to the dispatcher, until cancelled.

    Any break in the stream (a stalled or broken listener, an event that could
    not be dispatched) may have lost events, so subscribers are ended with a
    resync error rather than left believing they saw everything.
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
        # Reconnect until it works (subscriptions taken meanwhile are told to resync once it
        # does, above): ending everyone again on every failed attempt only adds noise.
        pause, attempts = 0.5, 0
        while True:
            await asyncio.sleep(pause)
            try:
                await bus.reconnect()
                break
            except Exception as error:
                attempts += 1
                if attempts == 1:
                    log.warning("broadcast bus reconnect failed; retrying until it is back", exc_info=True)
                else:
                    log.info("broadcast bus reconnect failed again (%d): %r", attempts, error)
                pause = min(pause * 2, 2.0)
        if attempts:
            log.warning("broadcast bus reconnected after %d failed attempt(s)", attempts)


async def _pump(bus: Bus, subscriber: _Receiver, dispatcher: Dispatcher, beat: str, every: float) -> None:
    # Anything arriving on a beat channel proves its connection alive; our own beats make sure
    # something arrives on each. A channel is judged by the beats sent on it, not by the clock:
    # it is declared dead once MISSED_BEATS beats in a row were sent on it and nothing came
    # back. Time the event loop spent on other work (one long request, a process stalled by
    # swap or a debugger) sends no beats, so it counts for nothing: a loop that could not run
    # for 20 s does not end every subscription when it runs again (before, the deadline was
    # 8 * every of the clock, and four big requests that held the loop past it ended every
    # live subscription of the process). A beat the bus does not take within that long is a
    # broken bus all the same.
    unanswered: dict[str, int] = {}  # beat channel -> beats sent since something last arrived on it

    async def send_beats() -> None:
        while True:
            channels = bus.beat_channels()
            for channel in list(unanswered):
                if channel not in channels:
                    del unanswered[channel]
            for channel in channels:
                unanswered[channel] = unanswered.get(channel, 0) + 1
                async with asyncio.timeout(MISSED_BEATS * every):
                    await bus.publish_on(channel, beat)
            await asyncio.sleep(every)

    beater = asyncio.create_task(send_beats())
    in_a_row = 0
    try:
        while True:
            if beater.done():
                try:
                    beater.result()
                except Exception as error:  # a beat the bus did not take (a stalled node): it is broken
                    raise RuntimeError(f"a heartbeat could not be sent through the bus ({error!r})") from error
                raise RuntimeError("the heartbeat stopped")
            # What is already queued is taken without wait_for (which makes a task per call),
            # letting the rest of the process run every so often.
            event = subscriber.get_nowait()
            if event is not None:
                in_a_row += 1
                if in_a_row >= YIELD_EVERY:
                    in_a_row = 0
                    await asyncio.sleep(0)
            else:
                in_a_row = 0
                # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation that
                # arrives as the get completes, and this loop would then never end (a feed that
                # could not be stopped hung a test's teardown).
                try:
                    async with asyncio.timeout(every):
                        event = await subscriber.get()
                except TimeoutError:
                    event = None
            if event is not None and event.channel in unanswered:
                unanswered[event.channel] = 0
            for channel, missed in unanswered.items():
                if missed > MISSED_BEATS:
                    raise RuntimeError(f"nothing came back through the bus on {channel}, not even a heartbeat")
            if event is None:
                continue
            payload, committed_at = open_envelope(event.message)
            if payload["type"] == HEARTBEAT:
                continue
            bus.events_received[event.channel] += 1
            try:
                await dispatcher.dispatch(payload, committed_at)
            except Exception:
                log.warning("could not dispatch an event; ending subscriptions", exc_info=True)
                dispatcher.interrupt_all()
    finally:
        beater.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await beater
