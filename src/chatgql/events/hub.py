"""The workers' hub: what `chatgql serve` with several workers and no Redis shares between them.

uvicorn's supervisor (the process `chatgql serve` starts) serves a hub on a Unix socket of its
own, and runs the outbox relay, the Kafka consumer and the webhooks (one of each, whatever the
worker count). Each worker connects to it (bus URL `chatgql+unix:///path/to/hub.sock`, set by
`chatgql serve`, never by hand) for these things:

- the bus: a worker subscribes to channels (answered once the hub took it: nothing published
  after that is missed) and receives what is published on them, the relay's events and the
  workers' typing; the same contract as the Redis backends (backends.py), so the Bus and its
  feed drive it unchanged;
- rate limits: a worker asks the hub for a user's token (one round trip on the socket), so a
  user gets the configured rate across the workers, not N times it;
- the relay's wake-up: a worker's committed sends wake the supervisor's relay through the
  hub, not through a NOTIFY of PostgreSQL (a notifying commit takes a database-wide lock);
- liveness: a worker's /healthz fails while its supervisor's embedded PostgreSQL is down;
- presence: a worker tells the hub when a user's first websocket on it opens and their last
  closes, so the supervisor's webhook deliverer knows who is online on any worker (a worker's
  users drop out when its connection ends); a worker asks it which of some users are online on
  any worker (one round trip, only for users with no socket on the asking worker).

A worker that stops reading (a stalled process) is cut off once the hub holds MAX_BUFFERED
bytes for it, as Redis cuts a subscriber past its output limit: its bus feed then ends its
subscriptions with the resync error and connects again. In the supervisor itself the same URL
reaches the hub without the socket (LocalHubBackend).

Frames, both ways: a 4-byte big-endian length, then a kind byte and its fields, NUL-separated.
    worker -> hub   S channel | U channel | P channel message | T action rate burst user | W
                    | H (the supervisor's health) | O user (online here) | F user (offline here)
                    | Q users (a JSON list: which of them are online on any worker?)
    hub -> worker   A (a subscription taken) | R taken retry_after (a rate-limit answer)
                    | D trouble (empty: healthy) | M channel message | N flags (a 0 or 1 per user asked)
Answers (A, R, D, N) come in the order of the requests, on the connection that asked. A worker
asks Q on the connection it tells O and F on, so the hub answers after reading what it was told.

Both ends write a loop turn's frames at once (_Outbox): the rate-limit checks of the requests
that started in one turn go out as one write, and the hub answers what it read in one. A busy
worker so pays a write, a read and a wake-up per turn, not per request; W is sent once a turn
whatever the commits in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import struct
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from .backends import CONFIRM_SECONDS, BusBackend, BusBroken, BusMessage, _Inbox

log = logging.getLogger(__name__)

SCHEME = "chatgql+unix"
MAX_BUFFERED = 32 * 1024 * 1024  # bytes the hub holds for one worker before cutting it off
HEALTH_SECONDS = 2.0  # a worker's /healthz waits this long for its supervisor's answer
_HEADER = struct.Struct(">I")
_SEP = b"\0"

# The hubs this process serves, by socket path: the supervisor's own bus reaches its hub directly.
_serving: dict[str, Hub] = {}


def hub_url(path: str) -> str:
    return f"{SCHEME}://{path}"


def is_hub(url: str) -> bool:
    return urlsplit(url).scheme == SCHEME


def _path(url: str) -> str:
    return urlsplit(url).path


def _frame(kind: bytes, *fields: bytes) -> bytes:
    body = kind + _SEP.join(fields)
    return _HEADER.pack(len(body)) + body


_WAKE = _frame(b"W")


def _text(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


async def _frames(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """Each frame's body (kind byte first), until the connection ends."""
    while True:
        try:
            header = await reader.readexactly(_HEADER.size)
        except asyncio.IncompleteReadError:
            return
        (size,) = _HEADER.unpack(header)
        yield await reader.readexactly(size)


class _Outbox:
    """Frames for one connection, written together once the loop turn that queued them ends."""

    __slots__ = ("transport", "frames", "_loop")

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self.transport = transport
        self.frames: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def put(self, frame: bytes) -> None:
        if not self.frames:
            self._loop.call_soon(self.flush)
        self.frames.append(frame)

    @property
    def held(self) -> int:
        """Bytes written and not yet taken by the other end (what the kernel did not take)."""
        return self.transport.get_write_buffer_size()

    def flush(self) -> None:
        frames, self.frames = self.frames, []
        if frames and not self.transport.is_closing():
            self.transport.write(frames[0] if len(frames) == 1 else b"".join(frames))


# --- the supervisor's side -------------------------------------------------------------------


class _Peer:
    __slots__ = ("outbox", "channels", "online")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.outbox = _Outbox(writer.transport)
        self.channels: set[str] = set()
        self.online: set[str] = set()  # the users this worker says have a websocket open on it


class Hub:
    """The supervisor's hub: bus fan-out, rate limits, the relay's wake-up (see the module)."""

    def __init__(
        self,
        path: str,
        *,
        limiter: Callable[[str, float, int], Any] | None = None,
        on_wake: Callable[[], None] | None = None,
    ) -> None:
        """limiter(action, rate, burst): a ratelimit.RateLimiter, kept per (action, rate, burst);
        None: every token is taken (no limits)."""
        self.path = path
        self._limiter = limiter
        self.on_wake = on_wake
        # What the supervisor's liveness is short of (its database down), for the workers' /healthz.
        self.trouble: Callable[[], str | None] = lambda: None
        self._peers: set[_Peer] = set()
        self._limiters: dict[tuple[str, float, int], Any] = {}
        self._online: Counter[str] = Counter()  # user -> how many workers list them
        self._server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        return hub_url(self.path)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[Hub]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a previous supervisor's, killed
        self._server = await asyncio.start_unix_server(self._serve, path=self.path)
        os.chmod(self.path, 0o600)
        _serving[self.path] = self
        try:
            yield self
        finally:
            _serving.pop(self.path, None)
            self._server.close()
            for peer in list(self._peers):
                peer.outbox.transport.abort()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await self._server.wait_closed()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def publish(self, channel: str, message: bytes | str) -> None:
        """Hand a message to every peer subscribed to channel (and cut off those not reading)."""
        frame = _frame(b"M", channel.encode(), _text(message))
        for peer in list(self._peers):
            if channel in peer.channels:
                self._send(peer, frame)

    def _send(self, peer: _Peer, frame: bytes) -> None:
        outbox = peer.outbox
        if outbox.transport.is_closing():
            return
        if outbox.held > MAX_BUFFERED:
            log.warning("hub: a worker stopped reading (%d bytes held for it); cutting it off", MAX_BUFFERED)
            outbox.transport.abort()
            return
        outbox.put(frame)

    def online(self, users: Iterable[str]) -> set[str]:
        """Those of `users` that some worker lists as online."""
        return {user for user in users if user in self._online}

    def _listed(self, peer: _Peer, user: str, online: bool) -> None:
        if online and user not in peer.online:
            peer.online.add(user)
            self._online[user] += 1
        elif not online and user in peer.online:
            peer.online.discard(user)
            self._unlist(user)

    def _unlist(self, user: str) -> None:
        self._online[user] -= 1
        if self._online[user] <= 0:
            del self._online[user]

    def take(self, action: str, user: str, rate: float, burst: int) -> float | None:
        """None: a token was taken; else the seconds until there is one."""
        if self._limiter is None:
            return None
        key = (action, rate, burst)
        limiter = self._limiters.get(key)
        if limiter is None:
            limiter = self._limiters[key] = self._limiter(action, rate, burst)
        return limiter.wait_for_token(user)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _Peer(writer)
        self._peers.add(peer)
        try:
            async for body in _frames(reader):
                kind = body[:1]
                if kind == b"P":
                    channel, _, message = body[1:].partition(_SEP)
                    self.publish(channel.decode(), message)
                    continue
                if kind in (b"O", b"F"):
                    self._listed(peer, body[1:].decode(), kind == b"O")
                    continue
                if kind == b"Q":
                    flags = (b"1" if user in self._online else b"0" for user in json.loads(body[1:]))
                    self._send(peer, _frame(b"N", b"".join(flags)))
                    continue
                fields = body[1:].split(_SEP, 3)  # a user id comes last: whatever it holds, it is one field
                if kind == b"T":
                    action, rate, burst, user = fields
                    wait = self.take(action.decode(), user.decode(), float(rate), int(burst))
                    self._send(peer, _frame(b"R", b"1", b"0") if wait is None else _frame(b"R", b"0", _text(wait)))
                elif kind == b"S":
                    peer.channels.add(fields[0].decode())
                    self._send(peer, _frame(b"A"))
                elif kind == b"U":
                    peer.channels.discard(fields[0].decode())
                elif kind == b"W":
                    if self.on_wake is not None:
                        self.on_wake()
                elif kind == b"H":
                    self._send(peer, _frame(b"D", (self.trouble() or "").encode()))
                else:
                    raise ValueError(f"hub: unknown frame kind {kind!r}")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:
            log.warning("hub: dropping a worker's connection", exc_info=True)
        finally:
            self._peers.discard(peer)
            for listed in peer.online:
                self._unlist(listed)
            peer.online.clear()
            writer.transport.abort()


# --- a worker's side -------------------------------------------------------------------------


class _Connection:
    """One connection to the hub: frames out, answers matched to requests in order, M frames to
    on_message. `broken` is set (with the reason) when the connection ends."""

    def __init__(self, path: str, on_message: Callable[[BusMessage], Any] | None = None) -> None:
        self._path = path
        self._on_message = on_message
        self._writer: asyncio.StreamWriter | None = None
        self._outbox: _Outbox | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._waiting: deque[asyncio.Future[list[bytes]]] = deque()
        self.failure: BaseException | None = None
        self.on_broken: Callable[[BaseException], None] | None = None

    async def open(self) -> None:
        reader, self._writer = await asyncio.open_unix_connection(self._path)
        self._outbox = _Outbox(self._writer.transport)
        self._reader_task = asyncio.create_task(self._read(reader), name="hub-reader")

    @property
    def usable(self) -> bool:
        return self._writer is not None and self.failure is None and not self._writer.transport.is_closing()

    def send(self, frame: bytes, *, now: bool = False) -> None:
        """Queue a frame: it goes out with the others of this loop turn (now: at once, after them)."""
        if not self.usable:
            raise BusBroken(f"the hub connection is closed ({self.failure!r})")
        assert self._outbox is not None
        self._outbox.put(frame)
        if now:
            self._outbox.flush()

    def queued(self, frame: bytes) -> bool:
        """Is this very frame (the same object) queued and not yet written?"""
        return self._outbox is not None and any(queued is frame for queued in self._outbox.frames)

    async def request(self, frame: bytes, timeout: float) -> list[bytes]:
        answer: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()
        self.send(frame)
        self._waiting.append(answer)
        # A caller that times out or is cancelled cancels `answer`; its answer, when it comes, is
        # matched to it all the same (in order) and dropped.
        async with asyncio.timeout(timeout):
            return await answer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        error: BaseException = ConnectionResetError("the hub closed the connection")
        try:
            async for body in _frames(reader):
                kind = body[:1]
                if kind == b"M":
                    channel, _, message = body[1:].partition(_SEP)
                    if self._on_message is not None:
                        await self._on_message(BusMessage(channel.decode(), message.decode()))
                else:
                    answer = self._waiting.popleft()
                    if not answer.done():
                        answer.set_result(body[1:].split(_SEP))
        except asyncio.CancelledError:
            error = ConnectionAbortedError("the hub connection was closed")
            raise
        except Exception as exc:
            error = exc
        finally:
            self._break(error)

    def _break(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure = error
        while self._waiting:
            answer = self._waiting.popleft()
            if not answer.done():
                answer.set_exception(BusBroken(str(error)))
        if self._writer is not None:
            self._writer.transport.abort()
        if self.on_broken is not None:
            self.on_broken(error)

    async def close(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader_task
        self._break(ConnectionAbortedError("closed"))


class HubBackend:
    """A worker's bus backend on the supervisor's hub (a BusBackend, like backends.py's)."""

    def __init__(self, url: str) -> None:
        self._inbox = _Inbox()
        self._connection = _Connection(_path(url), on_message=self._inbox.put)
        self._connection.on_broken = self._inbox.fail
        self._channels: set[str] = set()

    @property
    def received(self) -> int:
        return self._inbox.received

    async def connect(self) -> None:
        await self._connection.open()

    async def disconnect(self) -> None:
        await self._connection.close()

    async def subscribe(self, channel: str) -> None:
        await self._connection.request(_frame(b"S", channel.encode()), CONFIRM_SECONDS)
        self._channels.add(channel)

    async def unsubscribe(self, channel: str) -> None:
        self._channels.discard(channel)
        self._connection.send(_frame(b"U", channel.encode()))

    async def publish(self, channel: str, message: Any) -> None:
        self._connection.send(_frame(b"P", channel.encode(), _text(message)))

    async def publish_many(self, messages: list[tuple[str, Any]]) -> None:
        for channel, message in messages:
            self._connection.send(_frame(b"P", channel.encode(), _text(message)))

    async def next_published(self) -> BusMessage:
        return await self._inbox.get()

    def next_published_nowait(self) -> BusMessage | None:
        return self._inbox.get_nowait()

    def listening_groups(self) -> list[set[str]]:
        return [set(self._channels)] if self._channels else []


class LocalHubBackend:
    """The supervisor's own bus on the hub it serves: publishing fans out at once, no socket. It
    listens to nothing (the supervisor serves no subscriptions)."""

    def __init__(self, hub: Hub) -> None:
        self._hub = hub
        self._never: asyncio.Future[BusMessage] | None = None

    @property
    def received(self) -> int:
        return 0

    async def connect(self) -> None:
        pass

    async def disconnect(self) -> None:
        pass

    async def subscribe(self, channel: str) -> None:
        pass

    async def unsubscribe(self, channel: str) -> None:
        pass

    async def publish(self, channel: str, message: Any) -> None:
        self._hub.publish(channel, message)

    async def publish_many(self, messages: list[tuple[str, Any]]) -> None:
        for channel, message in messages:
            self._hub.publish(channel, message)

    async def next_published(self) -> BusMessage:
        self._never = self._never or asyncio.get_running_loop().create_future()
        return await self._never

    def next_published_nowait(self) -> BusMessage | None:
        return None


def hub_backend(url: str) -> BusBackend:
    hub = _serving.get(_path(url))
    return LocalHubBackend(hub) if hub is not None else HubBackend(url)


class HubStore:
    """Rate limits kept by the hub (ratelimit.py's shared store), and the relay's wake-up. While the
    hub does not answer within `timeout`, take() answers None: the limiter counts per process."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self._connection: _Connection | None = None
        self._opening: asyncio.Lock | None = None
        self.fallbacks = 0

    async def _open(self) -> _Connection:
        connection = self._connection
        if connection is not None and connection.usable:
            return connection
        self._opening = self._opening or asyncio.Lock()
        async with self._opening:
            if self._connection is None or not self._connection.usable:
                fresh = _Connection(_path(self.url))
                await fresh.open()
                self._connection = fresh
            return self._connection

    async def start(self, timeout: float = 5.0) -> None:
        try:
            async with asyncio.timeout(timeout):
                await self._open()
        except Exception as error:
            log.warning("shared rate limits: the hub did not answer at start (%r); will count per process", error)

    async def take(self, action: str, user_id: object, rate: float, burst: int) -> tuple[bool, float] | None:
        try:
            async with asyncio.timeout(self.timeout):
                connection = await self._open()
            taken, retry_after = await connection.request(
                _frame(b"T", action.encode(), _text(rate), _text(burst), _text(user_id)), self.timeout
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if self.fallbacks == 0:
                log.warning("shared rate limits: the hub did not answer (%r); counting per process", error)
            self.fallbacks += 1
            return None
        return taken == b"1", float(retry_after)

    async def supervisor_trouble(self) -> str | None:
        """What keeps the supervisor from serving (its database down), None when nothing does; a
        hub that does not answer is trouble too (a wedged supervisor relays nothing)."""
        try:
            async with asyncio.timeout(HEALTH_SECONDS):
                connection = await self._open()
            [trouble] = await connection.request(_frame(b"H"), HEALTH_SECONDS)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            return f"the supervisor's hub does not answer ({error!r})"
        return trouble.decode() or None

    def wake(self) -> None:
        """Wake the supervisor's relay (nothing when the hub is not connected: the relay polls)."""
        connection = self._connection
        if connection is not None and connection.usable:
            if not connection.queued(_WAKE):  # one a loop turn, whatever the commits in it
                connection.send(_WAKE)
        else:
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(self._open())

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()
            self._connection = None


def served_hub(url: str) -> Hub | None:
    """The hub this process serves at url (the supervisor's), None in a worker."""
    return _serving.get(_path(url))


class HubPresenceLink:
    """A worker's presence on its supervisor's hub: the users online here, told as they change
    (frames O and F, written at once, not at the loop turn's end: the hub has it as the websocket's
    ack reaches its client, long before anything that client sends is relayed). On a new
    connection the whole set is told again; while there is none, nothing is (the hub dropped this
    worker's users with the old one)."""

    def __init__(self, url: str) -> None:
        self._path = _path(url)
        self._connection: _Connection | None = None

    async def ask(self, users: list[str], timeout: float) -> set[str]:
        """Those of users online on any worker, by the hub's table once it read what this worker
        told it; BusBroken (or TimeoutError) while there is no connection or no answer."""
        connection = self._connection
        if connection is None or not connection.usable:
            raise BusBroken("no connection to the hub")
        [flags] = await connection.request(_frame(b"Q", json.dumps(users).encode()), timeout)
        return {user for user, flag in zip(users, flags, strict=True) if flag == ord("1")}

    def tell(self, user: str, online: bool) -> None:
        connection = self._connection
        if connection is not None and connection.usable:
            connection.send(_frame(b"O" if online else b"F", user.encode()), now=True)

    async def run(self, users: Callable[[], Iterable[str]], retry_seconds: float) -> None:
        """Keep a connection to the hub, telling it users() on each, until cancelled."""
        while True:
            ended = asyncio.Event()
            connection = _Connection(self._path)
            connection.on_broken = lambda _error, ended=ended: ended.set()
            try:
                await connection.open()
                for user in users():
                    connection.send(_frame(b"O", user.encode()))
                self._connection = connection
                await ended.wait()
                log.warning("presence: the hub connection ended (%r); connecting again", connection.failure)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001  the supervisor is restarting: try again
                log.warning("presence: the hub did not answer (%r); trying again", error)
            finally:
                self._connection = None
                await connection.close()
            await asyncio.sleep(retry_seconds)
