"""chatgql's bus backends, each a BusBackend (below).

- memory://            one process (the embedded default);
- redis://host:port    one Redis: SUBSCRIBE/PUBLISH;
- redis+cluster://h:p,h:p,...  Redis Cluster sharded pub/sub: SSUBSCRIBE/SPUBLISH,
  one subscribe-mode connection per cluster node this process listens on;
- chatgql+unix:///path  the hub of `chatgql serve`'s supervisor, for its workers (hub.py,
  which builds on these; bus.py picks it by the scheme).

The Bus drives them through connect/disconnect/subscribe/unsubscribe/publish/next_published
(BusBackend), and what they add to that:

- subscribe() returns once Redis confirmed the subscription: from then on
  nothing published on the channel is missed (a backend that returns before
  can miss everything: a listener woken before its first channel is taken);
- a listening connection that breaks, reconnects, or is dropped from a channel
  by its node (a slot moved: resharding, failover) is never papered over:
  next_published() raises, and the Bus's feed ends every subscription with the
  resync error and reconnects (redis-py itself would reconnect and subscribe
  again silently, losing what was published meanwhile);
- what was received is counted (`received`, heartbeats included).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

# Events waiting for the feed; when full, the reader stops reading its socket and Redis
# buffers for it until its pub/sub output limit cuts the connection (then: resync).
QUEUE_SIZE = 10_000
# How long subscribe() waits for Redis to confirm.
CONFIRM_SECONDS = 5.0
# A command (publish, the cluster's slot map) waits this long for a node that stopped answering.
COMMAND_SECONDS = 5.0
CLOSE_SECONDS = 2.0
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")


@dataclass(slots=True)
class BusMessage:
    """What a backend received: the channel and the message published on it (text)."""

    channel: str
    message: str


class BusBackend(Protocol):
    """One process's connection to a bus. A backend may also have publish_many(pairs) (in order,
    one round trip) and listening_groups() (the subscribed channels by the connection they
    arrive on); the Bus uses them when it has them."""

    @property
    def received(self) -> int:
        """Messages received so far (heartbeats included)."""
        ...

    async def connect(self) -> None: ...

    async def disconnect(self) -> None: ...

    async def subscribe(self, channel: str) -> None:
        """Returns once the subscription is taken: nothing published after it is missed."""
        ...

    async def unsubscribe(self, channel: str) -> None: ...

    async def publish(self, channel: str, message: Any) -> None: ...

    async def next_published(self) -> BusMessage:
        """The next message received; raises BusBroken once messages may have been missed."""
        ...

    def next_published_nowait(self) -> BusMessage | None:
        """A message already received, or None."""
        ...


def backend_for(url: str) -> BusBackend:
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        return MemoryBackend(url)
    if scheme in ("redis", "rediss"):
        return RedisBackend(url)
    if scheme in CLUSTER_SCHEMES:
        return RedisClusterBackend(url)
    raise ValueError(f"unsupported bus URL scheme {scheme!r}: memory://, redis://, redis+cluster://")


def is_sharded(url: str) -> bool:
    return urlsplit(url).scheme in CLUSTER_SCHEMES


class BusBroken(Exception):
    """A listening connection broke or lost a channel: events may have been missed."""


class _Inbox:
    """What the listeners received, for next_published(); and the first failure."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[BusMessage | None] = asyncio.Queue(QUEUE_SIZE)
        self.failure: BaseException | None = None
        self.received = 0

    async def put(self, event: BusMessage) -> None:
        self.received += 1
        await self.queue.put(event)

    def fail(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure = error
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(None)  # wakes a waiting next_published(); full: nobody waits

    async def get(self) -> BusMessage:
        if self.failure is not None:
            raise BusBroken(str(self.failure)) from self.failure
        event = await self.queue.get()
        if event is None or self.failure is not None:
            raise BusBroken(str(self.failure)) from self.failure
        return event

    def get_nowait(self) -> BusMessage | None:
        """What is already received, without waiting (None: nothing yet)."""
        if self.failure is not None:
            raise BusBroken(str(self.failure)) from self.failure
        try:
            event = self.queue.get_nowait()
        except asyncio.QueueEmpty:
            return None
        if event is None:
            raise BusBroken(str(self.failure)) from self.failure
        return event


class MemoryBackend:
    """One process: publish hands the event to this process's own listeners."""

    def __init__(self, url: str) -> None:
        self._subscribed: set[str] = set()
        self._inbox = _Inbox()

    @property
    def received(self) -> int:
        return self._inbox.received

    async def connect(self) -> None:
        pass

    async def disconnect(self) -> None:
        pass

    async def subscribe(self, channel: str) -> None:
        self._subscribed.add(channel)

    async def unsubscribe(self, channel: str) -> None:
        self._subscribed.discard(channel)

    async def publish(self, channel: str, message: Any) -> None:
        if channel in self._subscribed:
            await self._inbox.put(BusMessage(channel, message))

    async def next_published(self) -> BusMessage:
        return await self._inbox.get()

    def next_published_nowait(self) -> BusMessage | None:
        return self._inbox.get_nowait()


class _Listener:
    """One connection in subscribe mode (to one Redis server or cluster node) and its reader task."""

    def __init__(self, client: Any, inbox: _Inbox, *, sharded: bool, name: str) -> None:
        self.name = name
        self._client = client
        self._pubsub = client.pubsub()
        self._inbox = inbox
        self._sharded = sharded
        self.channels: set[str] = set()
        self._confirming: dict[str, asyncio.Future[None]] = {}
        self._unsubscribing: Counter[str] = Counter()  # unsubscriptions sent, not yet confirmed
        self._reader: asyncio.Task[None] | None = None

    async def subscribe(self, channel: str) -> None:
        if self._inbox.failure is not None:
            raise BusBroken(f"the bus is broken: {self._inbox.failure!r}")
        confirmed = asyncio.get_running_loop().create_future()
        self._confirming[channel] = confirmed
        self.channels.add(channel)
        try:
            # one channel per command: SSUBSCRIBE takes channels of one slot only
            if self._sharded:
                await self._pubsub.ssubscribe(channel)
            else:
                await self._pubsub.subscribe(channel)
            if self._reader is None:
                self._reader = asyncio.create_task(self._read(), name=f"bus-listener {self.name}")
            async with asyncio.timeout(CONFIRM_SECONDS):
                await asyncio.shield(confirmed)
        except BaseException as error:
            self._confirming.pop(channel, None)
            if not isinstance(error, asyncio.CancelledError):
                self._inbox.fail(error)
            raise

    async def unsubscribe(self, channel: str) -> None:
        self.channels.discard(channel)
        self._unsubscribing[channel] += 1
        if self._sharded:
            await self._pubsub.sunsubscribe(channel)
        else:
            await self._pubsub.unsubscribe(channel)

    async def _read(self) -> None:
        try:
            while True:
                message = await self._pubsub.get_message(timeout=None)
                if message is None:
                    continue
                kind = message["type"]
                channel = message["channel"]
                if isinstance(channel, bytes):
                    channel = channel.decode()
                if kind in ("smessage", "message"):
                    data = message["data"]
                    await self._inbox.put(BusMessage(channel, data.decode() if isinstance(data, bytes) else data))
                elif kind in ("ssubscribe", "subscribe"):
                    confirmed = self._confirming.pop(channel, None)
                    if confirmed is None:
                        # redis-py reconnected and subscribed again by itself: the gap is lost
                        raise BusBroken(f"{self.name}: the connection was re-established; events may be lost")
                    if not confirmed.done():
                        confirmed.set_result(None)
                elif kind in ("sunsubscribe", "unsubscribe"):
                    if self._unsubscribing[channel] > 0:
                        self._unsubscribing[channel] -= 1
                        if not self._unsubscribing[channel]:
                            del self._unsubscribing[channel]
                    elif channel in self.channels:
                        # the node dropped us (its slot moved: resharding or failover)
                        raise BusBroken(f"{self.name} no longer serves {channel}")
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("bus listener %s broke: %r", self.name, error)
            for confirmed in self._confirming.values():
                if not confirmed.done():
                    confirmed.set_exception(BusBroken(f"{self.name} broke: {error!r}"))
            self._inbox.fail(error)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        for confirmed in self._confirming.values():
            if not confirmed.done():
                confirmed.set_exception(BusBroken(f"{self.name} closed"))
        # bounded: closing must never hang a shutdown or a feed reconnect
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_SECONDS):
                await self._pubsub.aclose()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_SECONDS):
                await self._client.aclose()


def _listening_client_options() -> dict[str, Any]:
    """A subscribe-mode connection that raises on a broken connection instead of
    reconnecting and subscribing again behind our back."""
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    # socket_timeout bounds the handshake and commands; the blocking read of what is published
    # waits without one (redis-py passes no timeout to it)
    return {
        "retry": Retry(NoBackoff(), 0),
        "socket_connect_timeout": 2.0,
        "socket_timeout": COMMAND_SECONDS,
        "health_check_interval": 0,
    }


class RedisBackend:
    """redis://host:port: one Redis server, SUBSCRIBE/PUBLISH."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._inbox = _Inbox()
        self._publisher: Any = None
        self._listener: _Listener | None = None

    @property
    def received(self) -> int:
        return self._inbox.received

    async def connect(self) -> None:
        from redis.asyncio import Redis

        self._publisher = Redis.from_url(self._url, socket_connect_timeout=2.0, socket_timeout=COMMAND_SECONDS)
        await self._publisher.ping()
        self._listener = _Listener(
            Redis.from_url(self._url, **_listening_client_options()), self._inbox, sharded=False, name=self._url
        )

    async def disconnect(self) -> None:
        if self._listener is not None:
            await self._listener.close()
        if self._publisher is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_SECONDS):
                    await self._publisher.aclose()

    async def subscribe(self, channel: str) -> None:
        assert self._listener is not None, "not connected"
        await self._listener.subscribe(channel)

    async def unsubscribe(self, channel: str) -> None:
        assert self._listener is not None, "not connected"
        await self._listener.unsubscribe(channel)

    async def publish(self, channel: str, message: Any) -> None:
        await self._publisher.publish(channel, message)

    async def publish_many(self, messages: list[tuple[str, Any]]) -> None:
        """PUBLISH each (channel, message), in order, in one pipelined round trip."""
        async with self._publisher.pipeline(transaction=False) as pipe:
            for channel, message in messages:
                pipe.publish(channel, message)
            await pipe.execute()

    async def next_published(self) -> BusMessage:
        return await self._inbox.get()

    def next_published_nowait(self) -> BusMessage | None:
        return self._inbox.get_nowait()

    def listening_groups(self) -> list[set[str]]:
        """The subscribed channels, grouped by the connection they arrive on."""
        return [set(self._listener.channels)] if self._listener and self._listener.channels else []


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """redis+cluster://host:port,host:port -> [(host, port), ...] (the startup nodes)."""
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    nodes = []
    for part in netloc.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bus URL {url!r}: expected redis+cluster://host:port[,host:port...]")
        nodes.append((host.strip("[]"), int(port)))
    return nodes


def redis_client(url: str, timeout: float) -> Any:
    """A command client (no pub/sub) for a redis:// or redis+cluster:// URL: what the shared rate
    limits and presence keep in the bus's Redis."""
    parts = urlsplit(url)
    options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if parts.scheme in CLUSTER_SCHEMES:
        from redis.asyncio.cluster import ClusterNode, RedisCluster

        return RedisCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in cluster_nodes(url)],
            username=parts.username,
            password=parts.password,
            ssl=parts.scheme.startswith("rediss"),
            **options,
        )
    from redis.asyncio import Redis

    return Redis.from_url(url, **options)


class RedisClusterBackend:
    """redis+cluster://host:port,...: Redis Cluster sharded pub/sub.

    SPUBLISH goes through redis-py's RedisCluster (it routes by the channel's slot
    and follows MOVED). Each channel is SSUBSCRIBEd on the node that owns its slot,
    on a connection of this backend's own per node (read by its own task: no
    polling across nodes). A slot that moves away from its node ends the channel
    there (Redis sends SUNSUBSCRIBE): next_published() raises, and the feed
    reconnects with a fresh slot map.
    """

    def __init__(self, url: str) -> None:
        self._url = url
        self._startup = cluster_nodes(url)
        parts = urlsplit(url)
        self._username = parts.username
        self._password = parts.password
        self._ssl = parts.scheme.startswith("rediss")
        self._inbox = _Inbox()
        self._cluster: Any = None
        self._listeners: dict[str, _Listener] = {}
        self._where: dict[str, str] = {}  # channel -> node name it is subscribed on

    @property
    def received(self) -> int:
        return self._inbox.received

    def _auth(self) -> dict[str, Any]:
        return {"username": self._username, "password": self._password, "ssl": self._ssl}

    async def connect(self) -> None:
        from redis.asyncio.cluster import ClusterNode, RedisCluster

        self._cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in self._startup],
            socket_connect_timeout=2.0,
            socket_timeout=COMMAND_SECONDS,
            **self._auth(),
        )
        await self._cluster.initialize()

    async def disconnect(self) -> None:
        for listener in self._listeners.values():
            await listener.close()
        self._listeners.clear()
        self._where.clear()
        if self._cluster is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_SECONDS):
                    await self._cluster.aclose()

    def _listener_for(self, channel: str) -> _Listener:
        from redis.asyncio import Redis

        node = self._cluster.get_node_from_key(channel)
        listener = self._listeners.get(node.name)
        if listener is None:
            client = Redis(host=node.host, port=node.port, **self._auth(), **_listening_client_options())
            listener = self._listeners[node.name] = _Listener(client, self._inbox, sharded=True, name=node.name)
        return listener

    async def subscribe(self, channel: str) -> None:
        assert self._cluster is not None, "not connected"
        listener = self._listener_for(channel)
        self._where[channel] = listener.name
        await listener.subscribe(channel)

    async def unsubscribe(self, channel: str) -> None:
        name = self._where.pop(channel, None)
        listener = self._listeners.get(name) if name else None
        if listener is not None:
            await listener.unsubscribe(channel)

    async def publish(self, channel: str, message: Any) -> None:
        await self._cluster.spublish(channel, message)

    async def publish_many(self, messages: list[tuple[str, Any]]) -> None:
        """SPUBLISH each (channel, message), in order, through one cluster pipeline (redis-py
        sends each node its commands in one round trip, the nodes at once)."""
        async with self._cluster.pipeline(transaction=False) as pipe:
            for channel, message in messages:
                pipe.spublish(channel, message)
            await pipe.execute()

    async def next_published(self) -> BusMessage:
        return await self._inbox.get()

    def next_published_nowait(self) -> BusMessage | None:
        return self._inbox.get_nowait()

    def listening_groups(self) -> list[set[str]]:
        """The subscribed channels, grouped by the node connection they arrive on."""
        return [set(listener.channels) for listener in self._listeners.values() if listener.channels]
