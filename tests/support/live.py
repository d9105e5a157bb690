"""Helpers for the live-event tests: a GraphQL-over-websocket client speaking
both subscription protocols, chat calls over HTTP, and bounded waits.

The websocket client reads lazily: frames are only taken off the socket when
a test asks for one, so a test can leave a connection unread on purpose (the
slow-subscriber test relies on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import websockets
from sqlalchemy import text
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from chatgql.edge.auth import issue_token
from chatgql.settings import Settings

from ..conftest import GraphQLClient

TRANSPORT_WS = "graphql-transport-ws"
LEGACY_WS = "graphql-ws"
PROTOCOLS = (TRANSPORT_WS, LEGACY_WS)

MESSAGE_NEW = (
    "subscription($c: ID) { messageNew(conversationId: $c) { conversationId seq message { seq senderId body } } }"
)
READ_UPDATED = "subscription($c: ID) { readUpdated(conversationId: $c) { conversationId userId lastReadSeq } }"


# --- bounded waits -------------------------------------------------------------------


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]],
    timeout: float,
    what: str | Callable[[], str],
    interval: float = 0.05,
) -> None:
    """Poll predicate until true; fail with `what` (or what it returns then) after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        await asyncio.sleep(interval)


async def outbox_rows(engine) -> int:
    """Rows waiting in the outbox of the engine's database."""
    async with engine.connect() as conn:
        return (await conn.execute(text("SELECT count(*) FROM outbox"))).scalar_one()


async def outbox_empty(engine) -> bool:
    return await outbox_rows(engine) == 0


async def outbox_drained(engine, timeout: float = 30) -> None:
    """Wait until a relay has sent every outbox row of the engine's database."""
    await wait_until(lambda: outbox_empty(engine), timeout, "the relay to drain the outbox")


async def wait_active_subscriptions(server: Any, count: int, timeout: float = 10) -> None:
    """Wait until the server's dispatcher holds `count` live subscriptions."""
    dispatcher = server.runtime.deps.dispatcher
    await wait_until(
        lambda: dispatcher.active == count,
        timeout,
        lambda: f"{count} active subscriptions (have {dispatcher.active}: {describe_subscriptions(dispatcher)})",
    )


def describe_subscriptions(dispatcher: Any) -> str:
    """The dispatcher's subscriptions, as (user, conversation or None, event type), for a failure's message."""
    subs = [sub for by_user in dispatcher._by_conversation.values() for s in by_user.values() for sub in s]
    subs += [sub for s in dispatcher._by_user.values() for sub in s]
    return ", ".join(f"({sub.user_id}, {sub.conversation_id}, {sub.event_type})" for sub in subs) or "none"


async def wait_leader(server: Any, timeout: float = 15) -> None:
    """Fail clearly if this server's relay never leads (another relay holds the lock)."""
    relay = server.runtime.relay
    assert relay is not None, "this server runs no relay"
    await wait_until(
        lambda: relay.is_leader,
        timeout,
        "the relay to take the outbox lock (is another chatgql relay running on this database?)",
    )


def dedupe(events: Iterable[dict]) -> list[dict]:
    """Keep the first event of each (conversationId, seq), in arrival order."""
    seen: set[tuple[str, int]] = set()
    out = []
    for event in events:
        key = (str(event["conversationId"]), int(event["seq"]))
        if key not in seen:
            seen.add(key)
            out.append(event)
    return out


def random_body(chars: int) -> str:
    """A body that does not compress (so it really fills socket buffers)."""
    out = ""
    while len(out) < chars:
        out += uuid.uuid4().hex
    return out[:chars]


# --- websocket subscriptions ------------------------------------------------------------


class ConnectionRefused(Exception):
    def __init__(self, close_code: int | None, frames: list[dict]) -> None:
        super().__init__(f"connection refused (close code {close_code}, frames {frames})")
        self.close_code = close_code
        self.frames = frames


class SubscriptionError(Exception):
    """The server ended an operation with GraphQL errors."""

    def __init__(self, errors: list[dict], skipped: list[dict] | None = None) -> None:
        super().__init__(f"subscription error: {errors}")
        self.errors = errors
        self.skipped = skipped or []

    @property
    def code(self) -> str | None:
        return (self.errors[0].get("extensions") or {}).get("code")

    @property
    def extensions(self) -> dict:
        return self.errors[0].get("extensions") or {}


class SubscriptionCompleted(Exception):
    """The server completed the operation without an error."""


class WsClient:
    """One websocket connection speaking graphql-transport-ws or the legacy graphql-ws."""

    def __init__(self, ws: ClientConnection, protocol: str) -> None:
        self.ws = ws
        self.protocol = protocol
        self._queues: dict[str, deque[dict]] = defaultdict(deque)
        self._read_lock = asyncio.Lock()
        self._ids = itertools.count(1)
        self.closed = False

    @classmethod
    async def connect(
        cls,
        ws_url: str,
        authorization: str | None,
        *,
        protocol: str = TRANSPORT_WS,
        recv_buffer: int | None = None,
        max_queue: int = 16,
        timeout: float = 10,
    ) -> WsClient:
        """Open, send connection_init ({"Authorization": ...} unless None), wait for the ack.

        recv_buffer sets SO_RCVBUF on the client socket (small = a slow reader).
        Raises ConnectionRefused when the server refuses the connection.
        """
        kwargs: dict[str, Any] = {}
        if recv_buffer is not None:
            parts = urlsplit(ws_url)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, (parts.hostname, parts.port))
            kwargs["sock"] = sock
        ws = await asyncio.wait_for(
            websockets.connect(
                ws_url,
                subprotocols=[protocol],
                compression=None,
                proxy=None,
                ping_interval=None,
                max_queue=max_queue,
                max_size=None,
                **kwargs,
            ),
            timeout,
        )
        assert ws.subprotocol == protocol, ws.subprotocol
        client = cls(ws, protocol)
        payload = {} if authorization is None else {"Authorization": authorization}
        await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
        frames: list[dict] = []
        try:
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
                frames.append(frame)
                if frame["type"] == "connection_ack":
                    return client
                if frame["type"] == "connection_error":
                    break
                if frame["type"] == "ka":
                    continue
                raise AssertionError(f"unexpected frame before connection_ack: {frame}")
        except ConnectionClosed:
            pass
        # Refused: take the close code (the server closes right after).
        try:
            await asyncio.wait_for(ws.wait_closed(), timeout)
        except TimeoutError:
            await ws.close()
        raise ConnectionRefused(ws.close_code, frames)

    async def subscribe(self, query: str, variables: dict | None = None) -> Operation:
        op_id = str(next(self._ids))
        start = "subscribe" if self.protocol == TRANSPORT_WS else "start"
        await self.ws.send(
            json.dumps({"id": op_id, "type": start, "payload": {"query": query, "variables": variables or {}}})
        )
        return Operation(self, op_id)

    async def stop(self, op_id: str) -> None:
        kind = "complete" if self.protocol == TRANSPORT_WS else "stop"
        await self.ws.send(json.dumps({"id": op_id, "type": kind}))

    async def _next_frame(self, op_id: str) -> dict:
        """The next frame of op_id, reading the socket (in turn with other readers) as needed."""
        queue = self._queues[op_id]
        while not queue:
            async with self._read_lock:
                if queue:
                    break
                raw = await self.ws.recv()  # cancel-safe in websockets' asyncio client
                frame = json.loads(raw)
                kind = frame.get("type")
                if kind == "ping":
                    await self.ws.send(json.dumps({"type": "pong"}))
                elif kind in ("pong", "ka"):
                    pass
                elif "id" in frame:
                    self._queues[frame["id"]].append(frame)
                else:
                    raise AssertionError(f"unexpected frame: {frame}")
        return queue.popleft()

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.ws.close()

    async def __aenter__(self) -> WsClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Operation:
    """One subscription on a WsClient; frames normalized across both protocols."""

    def __init__(self, client: WsClient, op_id: str) -> None:
        self.client = client
        self.id = op_id
        self.done = False

    async def _frame(self) -> dict:
        return await self.client._next_frame(self.id)

    async def next(self, timeout: float = 20) -> dict:
        """The data of the next event; SubscriptionError / SubscriptionCompleted when it ended.

        asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result when the wait is
        cancelled just as the frame arrived, and loses the cancellation; a reader in a loop (the
        cluster bus test's Follower) then waited for its next event for the whole timeout, and the
        test that cancelled it waited with it."""
        async with asyncio.timeout(timeout):
            return await self._next()

    async def _next(self) -> dict:
        if self.done:
            raise SubscriptionCompleted(self.id)
        frame = await self._frame()
        kind = frame["type"]
        if kind in ("next", "data"):
            payload = frame["payload"]
            if payload.get("errors"):
                self.done = True
                raise SubscriptionError(payload["errors"])
            return payload["data"]
        if kind == "error":
            self.done = True
            errors = frame["payload"]
            raise SubscriptionError(errors if isinstance(errors, list) else [errors])
        if kind == "complete":
            self.done = True
            raise SubscriptionCompleted(self.id)
        raise AssertionError(f"unexpected frame for operation {self.id}: {frame}")

    async def collect(self, count: int, timeout: float = 30) -> list[dict]:
        """The next `count` events' data, all within timeout seconds."""

        async def run() -> list[dict]:
            return [await self._next() for _ in range(count)]

        async with asyncio.timeout(timeout):
            return await run()

    async def collect_until(self, stop: Callable[[list[dict]], bool], timeout: float) -> list[dict]:
        """Events' data until stop(received) is true; fails after timeout."""
        received: list[dict] = []

        async def run() -> None:
            while not stop(received):
                received.append(await self._next())

        try:
            async with asyncio.timeout(timeout):
                await run()
        except TimeoutError:
            raise AssertionError(
                f"timed out after {timeout}s; received {len(received)} events, last: {received[-3:]}"
            ) from None
        return received

    async def error(self, timeout: float = 20) -> SubscriptionError:
        """Read until the operation ends with an error; returns it (data before it in .skipped)."""
        skipped: list[dict] = []

        async def run() -> SubscriptionError:
            while True:
                try:
                    skipped.append(await self._next())
                except SubscriptionError as error:
                    error.skipped = skipped
                    return error

        try:
            async with asyncio.timeout(timeout):
                return await run()
        except TimeoutError:
            seqs = [next(iter(d.values())).get("seq") for d in skipped]
            raise AssertionError(
                f"no error within {timeout}s; got {len(skipped)} events instead: {seqs[:5]}...{seqs[-5:]}"
            ) from None

    async def stop(self) -> None:
        await self.client.stop(self.id)


def bearer(settings: Settings, user_id: int) -> str:
    return f"Bearer {issue_token(settings, str(user_id))}"


async def ws_connect(server: Any, user_id: int, protocol: str = TRANSPORT_WS, **kwargs: Any) -> WsClient:
    return await WsClient.connect(server.ws_url, bearer(server.settings, user_id), protocol=protocol, **kwargs)


async def subscribe_messages(client: WsClient, conversation_id: str | None = None) -> Operation:
    return await client.subscribe(MESSAGE_NEW, {"c": conversation_id} if conversation_id is not None else {})


async def subscribe_reads(client: WsClient, conversation_id: str | None = None) -> Operation:
    return await client.subscribe(READ_UPDATED, {"c": conversation_id} if conversation_id is not None else {})


# --- chat over HTTP -----------------------------------------------------------------------


class ChatApi(GraphQLClient):
    """GraphQLClient plus the calls the event tests make."""

    @classmethod
    def of(cls, server: Any, http: httpx.AsyncClient) -> ChatApi:
        return cls(http, server.url, server.settings)

    async def create_group(self, owner: int, members: Iterable[int], title: str = "g") -> str:
        data = await self.data(
            "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }",
            {"t": title, "m": [str(m) for m in members]},
            user=owner,
        )
        return data["createGroup"]["id"]

    async def add_members(self, user: int, conversation_id: str, members: Iterable[int]) -> None:
        await self.data(
            "mutation($c: ID!, $u: [ID!]!) { addMembers(conversationId: $c, userIds: $u) { id } }",
            {"c": conversation_id, "u": [str(m) for m in members]},
            user=user,
        )

    async def remove_member(self, user: int, conversation_id: str, member: int) -> None:
        await self.data(
            "mutation($c: ID!, $u: ID!) { removeMember(conversationId: $c, userId: $u) { userId } }",
            {"c": conversation_id, "u": str(member)},
            user=user,
        )

    async def send(self, user: int, conversation_id: str, body: str = "hi", client_msg_id: str | None = None) -> int:
        """Send a message; returns its seq."""
        data = await self.data(
            "mutation($c: ID!, $m: UUID!, $b: String!) "
            "{ sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { seq } duplicate } }",
            {"c": conversation_id, "m": client_msg_id or str(uuid.uuid4()), "b": body},
            user=user,
        )
        return data["sendMessage"]["message"]["seq"]

    async def mark_read(self, user: int, conversation_id: str, seq: int) -> dict:
        data = await self.data(
            "mutation($c: ID!, $s: Long!) "
            "{ markRead(conversationId: $c, seq: $s) { lastReadSeq advanced unreadCount } }",
            {"c": conversation_id, "s": seq},
            user=user,
        )
        return data["markRead"]


def base_url(server: Any) -> str:
    return f"http://127.0.0.1:{server.port}"


async def metrics(http: httpx.AsyncClient, server: Any) -> dict[str, float]:
    """The /metrics samples as {name: value} (unlabelled samples only)."""
    response = await http.get(f"{base_url(server)}/metrics")
    assert response.status_code == 200, response.text
    samples: dict[str, float] = {}
    for line in response.text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        samples[name] = float(value)
    return samples


async def collect_messages(
    op: Operation,
    expected: dict[str, int],
    timeout: float,
    first: dict[str, int] | None = None,
    duplicates: list[tuple[str, int]] | None = None,
) -> dict[str, list[int]]:
    """Read messageNew events until every conversation c has each seq first[c]..expected[c].

    Returns, per conversation, the seqs in arrival order after dedupe by
    (conversationId, seq); copies dropped go to `duplicates` when given. On
    timeout, fails naming what is missing.
    """
    first = first or {}
    wanted = {c: set(range(first.get(c, 1), n + 1)) for c, n in expected.items()}
    seen: dict[str, list[int]] = {c: [] for c in expected}
    extra: list[tuple[str, int]] = []

    async def run() -> None:
        while any(wanted.values()):
            event = (await op._next())["messageNew"]
            cid, seq = event["conversationId"], event["seq"]
            if cid not in seen:
                extra.append((cid, seq))
                continue
            if seq not in seen[cid]:
                seen[cid].append(seq)
            elif duplicates is not None:
                duplicates.append((cid, seq))
            wanted[cid].discard(seq)

    try:
        await asyncio.wait_for(run(), timeout)
    except TimeoutError:
        missing = {c: sorted(s) for c, s in wanted.items() if s}
        raise AssertionError(f"timed out after {timeout}s; missing {missing}; received {seen}") from None
    assert not extra, f"events of conversations not expected here: {extra}"
    return seen


async def read_topic(bootstrap: str, topic: str, done: Callable[[list[Any]], bool], timeout: float) -> list[Any]:
    """Every record of topic from the beginning (no consumer group), until done(records).

    Records come per partition in offset order; each has .partition, .offset,
    .key (str) and .value (the decoded JSON event).
    """
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        key_deserializer=lambda k: k.decode() if k is not None else None,
        value_deserializer=json.loads,
    )
    await asyncio.wait_for(consumer.start(), 30)
    records: list[Any] = []
    try:

        async def run() -> None:
            while not done(records):
                batches = await consumer.getmany(timeout_ms=500)
                for batch in batches.values():
                    records.extend(batch)

        try:
            await asyncio.wait_for(run(), timeout)
        except TimeoutError:
            raise AssertionError(f"timed out after {timeout}s reading {topic}: {len(records)} records") from None
    finally:
        await consumer.stop()
    return records


@contextlib.contextmanager
def hold_ports(*ports: int | None) -> Iterator[None]:
    """Keep new sockets off these 127.0.0.1 ports while the with-block runs.

    For a stopped broker: its ports are ephemeral ones (free_port()), and a
    client connection could take one during the outage, so that the broker
    cannot bind it again on restart. Release right before starting it.
    """
    held = []
    for port in ports:
        if port is None:
            continue
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            held.append(sock)
        except OSError:
            sock.close()
    try:
        yield
    finally:
        for sock in held:
            sock.close()
