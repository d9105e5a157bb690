"""Subscriptions over plain HTTP (engine/streams.py): graphql-sse in both modes and multipart,
against one real server of this module, with the websockets' guarantees: authorization, resume
cursors, order, "resync, never silently behind", the caps and budgets, the session's end at the
token's expiry, and a reader that does not read cut off with its subscription let go.

(The reference clients, graphql-sse's and Apollo Client's, run in tests/clients/test_http_subscriptions.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from chatgql.edge.auth import issue_token
from chatgql.engine.streams import preferred_stream

from ..conftest import RunningServer, make_settings, scratch_database
from ..support.live import ChatApi, random_body, wait_active_subscriptions, wait_until

SUBSCRIBER_BUFFER = 8
WRITE_TIMEOUT = 6.0
PER_STREAM = 2  # max_subscriptions_per_connection

MESSAGE_NEW = "subscription($c: ID) { messageNew(conversationId: $c) { conversationId seq message { body } } }"
RESUME = (
    "subscription($c: ID!, $after: Long!) { messageNew(conversationId: $c, "
    "cursors: [{conversationId: $c, afterSeq: $after}]) { conversationId seq message { body } } }"
)
TRANSPORTS = ("sse", "single", "multipart")


@pytest.fixture(scope="module")
async def streams_server(migrated_url: str) -> AsyncIterator[RunningServer]:
    # a database of its own: the session's server, on the suite's database, would relay this
    # module's live events to its own subscribers
    url = await scratch_database(migrated_url, "http_subscriptions")
    settings = make_settings(
        url,
        subscriber_buffer=SUBSCRIBER_BUFFER,
        ws_write_timeout_seconds=WRITE_TIMEOUT,
        ws_send_buffer_bytes=4096,
        max_subscriptions_per_connection=PER_STREAM,
        ws_init_timeout_seconds=1.0,
        ws_messages_burst=30,
        ws_messages_per_second=1.0,
    )
    async with RunningServer(settings) as running:
        yield running


@pytest.fixture
async def api(streams_server, http) -> ChatApi:
    return ChatApi.of(streams_server, http)


def _bearer(server: RunningServer, user: int | None, ttl: int | None = None) -> dict[str, str]:
    return {} if user is None else {"authorization": f"Bearer {issue_token(server.settings, str(user), ttl)}"}


class Stream:
    """One subscription over HTTP, read as its results come: `next` gives a result's body."""

    def __init__(self, results: asyncio.Queue, task: asyncio.Task) -> None:
        self.results = results
        self.task = task

    async def next(self, timeout: float = 10) -> dict | str:
        """The next result ({data, errors}), "complete", or "closed" (the stream ended without complete)."""
        return await asyncio.wait_for(self.results.get(), timeout)

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
            await self.task


def _sse_events(buffer: str) -> tuple[list[tuple[str, str]], str]:
    """The complete SSE events in buffer, as (event, data), and what is left of it."""
    events = []
    while "\r\n\r\n" in buffer or "\n\n" in buffer:
        sep = "\r\n\r\n" if "\r\n\r\n" in buffer else "\n\n"
        block, buffer = buffer.split(sep, 1)
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if fields:
            events.append((fields.get("event", "message"), fields.get("data", "")))
    return events, buffer


async def _sse(http: httpx.AsyncClient, url: str, request: dict, headers: dict, out: asyncio.Queue) -> None:
    headers = {**headers, "accept": "text/event-stream", "content-type": "application/json"}
    async with http.stream("POST", url, json=request, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"] == "text/event-stream"
        buffer = ""
        async for chunk in response.aiter_text():
            events, buffer = _sse_events(buffer + chunk)
            for event, data in events:
                await out.put(json.loads(data) if event == "next" else event)
    await out.put("closed")


async def _multipart(http: httpx.AsyncClient, url: str, request: dict, headers: dict, out: asyncio.Queue) -> None:
    accept = 'multipart/mixed;boundary="graphql";subscriptionSpec=1.0,application/json'
    headers = {**headers, "accept": accept, "content-type": "application/json"}
    async with http.stream("POST", url, json=request, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("multipart/mixed;boundary=graphql;subscriptionSpec=1.0")
        buffer = ""
        async for chunk in response.aiter_text():
            buffer += chunk
            parts = buffer.split("--graphql")
            buffer = parts.pop()
            for part in parts:
                body = part.partition("\r\n\r\n")[2].strip()
                if not body:
                    continue
                payload = json.loads(body)
                if payload == {}:
                    continue  # a heartbeat
                await out.put(payload["payload"] if payload.get("payload") is not None else payload)
        if buffer.startswith("--"):
            await out.put("complete")
            return
    await out.put("closed")


class Single:
    """A stream of graphql-sse's single connection mode: reserved, opened, then operations on it."""

    def __init__(self, http: httpx.AsyncClient, url: str, headers: dict) -> None:
        self.http, self.url, self.headers = http, url, headers
        self.queues: dict[str, asyncio.Queue] = {}
        self.token = ""
        self.task: asyncio.Task | None = None
        self.ended = asyncio.Event()

    async def open(self) -> Single:
        reserved = await self.http.put(self.url, headers=self.headers)
        assert reserved.status_code == 201, reserved.text
        self.token = reserved.text
        opened = asyncio.Event()
        self.task = asyncio.create_task(self._read(opened))
        await asyncio.wait_for(opened.wait(), 10)
        return self

    async def _read(self, opened: asyncio.Event) -> None:
        headers = {**self.headers, "accept": "text/event-stream", "x-graphql-event-stream-token": self.token}
        try:
            async with self.http.stream("GET", self.url, headers=headers) as response:
                assert response.status_code == 200, await response.aread()
                opened.set()
                buffer = ""
                async for chunk in response.aiter_text():
                    events, buffer = _sse_events(buffer + chunk)
                    for event, data in events:
                        message = json.loads(data)
                        queue = self.queues.setdefault(message["id"], asyncio.Queue())
                        await queue.put(message["payload"] if event == "next" else event)
        finally:
            self.ended.set()
            for queue in self.queues.values():
                queue.put_nowait("closed")

    async def subscribe(self, operation_id: str, request: dict, headers: dict | None = None) -> Stream:
        queue = self.queues.setdefault(operation_id, asyncio.Queue())
        body = {**request, "extensions": {"operationId": operation_id}}
        all_headers = {**(self.headers if headers is None else headers), "x-graphql-event-stream-token": self.token}
        answer = await self.http.post(self.url, json=body, headers=all_headers)
        assert answer.status_code == 202, answer.text
        assert self.task is not None
        return Stream(queue, self.task)

    async def stop(self, operation_id: str) -> None:
        answer = await self.http.delete(
            self.url, params={"operationId": operation_id}, headers={"x-graphql-event-stream-token": self.token}
        )
        assert answer.status_code == 200, answer.text

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await self.task


@contextlib.asynccontextmanager
async def subscribed(
    server: RunningServer,
    http: httpx.AsyncClient,
    transport: str,
    request: dict,
    user: int | None,
    ttl: int | None = None,
) -> AsyncIterator[Stream]:
    """A subscription over one of the transports, closed at the end."""
    headers = _bearer(server, user, ttl)
    if transport == "single":
        single = await Single(http, server.url, headers).open()
        try:
            yield await single.subscribe("op1", request)
        finally:
            await single.close()
        return
    queue: asyncio.Queue = asyncio.Queue()
    read = _sse if transport == "sse" else _multipart
    stream = Stream(queue, asyncio.create_task(read(http, server.url, request, headers, queue)))
    try:
        yield stream
    finally:
        await stream.close()


def _event(result: dict | str) -> dict:
    assert isinstance(result, dict) and "errors" not in result, result
    return result["data"]["messageNew"]


def _error(result: dict | str) -> dict:
    assert isinstance(result, dict) and result.get("errors"), result
    return result["errors"][0]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_live_events_resume_and_authorization_as_over_the_websocket(streams_server, http, api, transport):
    """Live messageNew in order; a resumed subscription replays what came after its cursor, then
    goes live, each seq once; a non-member, an anonymous caller and a replay too long are refused
    with the websockets' codes (the last with resync: true)."""
    owner, member, stranger = {
        "sse": (9101, 9102, 9103),
        "single": (9111, 9112, 9113),
        "multipart": (9121, 9122, 9123),
    }[transport]
    cid = await api.create_group(owner, [member])
    first = await api.send(owner, cid, "before")
    request = {"query": MESSAGE_NEW, "variables": {"c": cid}}
    async with subscribed(streams_server, http, transport, request, member) as stream:
        await wait_active_subscriptions(streams_server, 1)
        seqs = [await api.send(owner, cid, f"live {i}") for i in range(5)]
        got: list[dict] = []
        while len(got) < len(seqs):  # "before" may still be on its way: relayed after this subscribed
            event = _event(await stream.next())
            if event["seq"] != first:
                got.append(event)
        assert [e["seq"] for e in got] == seqs and [e["message"]["body"] for e in got] == [
            f"live {i}" for i in range(5)
        ]
    await wait_active_subscriptions(streams_server, 0)

    resume = {"query": RESUME, "variables": {"c": cid, "after": first}}
    async with subscribed(streams_server, http, transport, resume, member) as stream:
        replayed = [_event(await stream.next()) for _ in seqs]
        assert [e["seq"] for e in replayed] == seqs
        await wait_active_subscriptions(streams_server, 1)
        later = await api.send(owner, cid, "after the replay")
        assert _event(await stream.next())["seq"] == later

    refused = [(stranger, "NOT_FOUND"), (None, "UNAUTHENTICATED")]
    if transport == "single":
        refused.pop()  # no reservation without a token: 401 (the next test)
    for user, code in refused:
        async with subscribed(streams_server, http, transport, request, user) as stream:
            assert _error(await stream.next())["extensions"]["code"] == code
            assert await stream.next() == "complete"

    for _ in range(SUBSCRIBER_BUFFER):
        await api.send(owner, cid, "far behind")
    async with subscribed(streams_server, http, transport, resume, member) as stream:
        error = _error(await stream.next())
        assert error["extensions"]["reason"] == "REPLAY_TOO_LONG" and error["extensions"]["resync"] is True
        assert await stream.next() == "complete"


async def test_a_stream_too_slow_for_its_events_ends_with_resync_and_one_that_reads_nothing_is_cut_off(
    streams_server, api
):
    """A reader that stops reading while events come: once more than the subscriber buffer waits,
    its subscription ends with SUBSCRIBER_TOO_SLOW and resync: true, after the events before it,
    in order (never silently behind). One that never reads again is aborted after the write
    timeout, and its subscription is let go."""
    owner, member = 9131, 9132
    cid = await api.create_group(owner, [member])
    big = random_body(3900)
    for keeps_reading in (True, False):
        reader = await _raw_stream(streams_server, member, {"query": MESSAGE_NEW, "variables": {"c": cid}})
        try:
            await wait_active_subscriptions(streams_server, 1)
            if keeps_reading:
                # At once (group commit): more than the subscriber buffer waits while the writes are
                # stalled, well within the write timeout, which starts when they stall.
                await asyncio.gather(*(api.send(owner, cid, big) for _ in range(SUBSCRIBER_BUFFER * 6)))
            else:
                # One by one: each is written, until the socket's buffers and the transport's (its
                # high-water mark, 64 KB) are full and the writes stall.
                for _ in range(30):
                    await api.send(owner, cid, big)
            if keeps_reading:
                events = await _read_until_closed(reader)
                nexts = [json.loads(data) for event, data in events if event == "next"]
                seqs = [n["data"]["messageNew"]["seq"] for n in nexts[:-1]]
                assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
                last = nexts[-1]["errors"][0]["extensions"]
                assert last["reason"] == "SUBSCRIBER_TOO_SLOW" and last["resync"] is True, last
                assert events[-1][0] == "complete"
            await wait_active_subscriptions(streams_server, 0, timeout=WRITE_TIMEOUT + 20)
            if not keeps_reading:
                await wait_until(
                    functools.partial(_peer_closed, reader), WRITE_TIMEOUT + 20, "the server to abort the stream"
                )
        finally:
            reader.close()


async def test_the_single_connection_mode_caps_stops_and_guards_its_stream(streams_server, http, api):
    """One stream per reservation (a second is 409); at most max_subscriptions_per_connection
    operations per stream (then LIMIT_EXCEEDED, SUBSCRIPTIONS_PER_CONNECTION), each with its
    extensions.operationId (else 400); DELETE stops one (its subscription let go); another user's
    operation on the stream is refused as an unknown stream; an unopened reservation is dropped
    after the init timeout; a PUT without a token is 401; past the message budget, 429."""
    owner, member = 9141, 9142
    cid = await api.create_group(owner, [member])
    request = {"query": MESSAGE_NEW, "variables": {"c": cid}}
    single = await Single(http, streams_server.url, _bearer(streams_server, member)).open()
    try:
        again = {"accept": "text/event-stream", "x-graphql-event-stream-token": single.token}
        second = await http.get(streams_server.url, headers=again)
        assert second.status_code == 409 and second.json()["errors"][0]["extensions"]["code"] == "CONFLICT"
        on_stream = {**_bearer(streams_server, member), "x-graphql-event-stream-token": single.token}
        for extensions in (None, "x", {"operationId": 7}):
            bad = await http.post(streams_server.url, json={**request, "extensions": extensions}, headers=on_stream)
            assert bad.status_code == 400 and bad.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
        a = await single.subscribe("a", request)
        await single.subscribe("b", request)
        over = await single.subscribe("c", request)
        error = _error(await over.next())
        assert error["extensions"] == {"code": "LIMIT_EXCEEDED", "reason": "SUBSCRIPTIONS_PER_CONNECTION"}
        assert await over.next() == "complete"
        await wait_active_subscriptions(streams_server, 2)
        await single.stop("b")
        await wait_active_subscriptions(streams_server, 1)
        seq = await api.send(owner, cid, "to a")
        assert _event(await a.next())["seq"] == seq
        foreign = await http.post(
            streams_server.url,
            json={**request, "extensions": {"operationId": "x"}},
            headers={**_bearer(streams_server, owner), "x-graphql-event-stream-token": single.token},
        )
        assert foreign.status_code == 404
    finally:
        await single.close()
    await wait_active_subscriptions(streams_server, 0)

    reserved = await http.put(streams_server.url, headers=_bearer(streams_server, member))
    assert reserved.status_code == 201
    token = reserved.text
    reservations = streams_server.app.graphql.streams.reservations
    await wait_until(lambda: token not in reservations, 10, "the unopened reservation to be dropped")
    opened = await http.get(
        streams_server.url, headers={"accept": "text/event-stream", "x-graphql-event-stream-token": token}
    )
    assert opened.status_code == 404

    anonymous = await http.put(streams_server.url)
    assert anonymous.status_code == 401 and anonymous.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    answers = [
        (await http.put(streams_server.url, headers=_bearer(streams_server, 9143))).status_code for _ in range(40)
    ]
    assert answers[0] == 201 and answers[-1] == 429, answers
    await wait_until(lambda: not reservations, 10, "the reservations to be dropped")


async def test_the_stream_ends_with_the_token_and_a_ban(streams_server, http, api):
    """At the token's exp an SSE stream ends without complete (graphql-sse's client connects again
    with its headers, the new token) and a multipart stream ends with UNAUTHENTICATED; at a ban,
    the same, with FORBIDDEN (BANNED); the subscriptions are let go. (Two real seconds of token
    lifetime: exp has a resolution of seconds.)"""
    owner, member = 9151, 9152
    cid = await api.create_group(owner, [member])
    request = {"query": MESSAGE_NEW, "variables": {"c": cid}}
    async with (
        subscribed(streams_server, http, "sse", request, member, ttl=2) as sse,
        subscribed(streams_server, http, "multipart", request, member, ttl=2) as multipart,
    ):
        assert await sse.next(timeout=15) == "closed"
        error = _error(await multipart.next(timeout=15))
        assert error["extensions"]["code"] == "UNAUTHENTICATED"
    await wait_active_subscriptions(streams_server, 0)

    bans = streams_server.runtime.deps.bans
    async with (
        subscribed(streams_server, http, "sse", request, member) as sse,
        subscribed(streams_server, http, "multipart", request, member) as multipart,
    ):
        await wait_active_subscriptions(streams_server, 2)
        bans.learn(str(member), None, True)  # what a ban's event does in every process (edge/bans.py)
        try:
            assert await sse.next() == "closed"
            error = _error(await multipart.next())
            assert error["extensions"]["code"] == "FORBIDDEN" and error["extensions"]["reason"] == "BANNED"
        finally:
            bans.learn(str(member), None, False)
    await wait_active_subscriptions(streams_server, 0)


# --- a reader that does not read ----------------------------------------------------------------------


async def _raw_stream(server: RunningServer, user: int, request: dict) -> socket.socket:
    """An SSE subscription on a socket with a small receive buffer, not read until asked."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
    body = json.dumps(request).encode()
    token = issue_token(server.settings, str(user))
    head = (
        f"POST /graphql HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: text/event-stream\r\n"
        f"content-type: application/json\r\nauthorization: Bearer {token}\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    await asyncio.get_running_loop().sock_sendall(sock, head.encode() + body)
    return sock


async def _read_until_closed(sock: socket.socket) -> list[tuple[str, str]]:
    """Everything the stream sends until its last chunk (chunked encoding's 0), as SSE events."""
    loop = asyncio.get_running_loop()
    raw = b""
    while not raw.endswith(b"\r\n0\r\n\r\n"):
        chunk = await asyncio.wait_for(loop.sock_recv(sock, 65536), 20)
        if not chunk:
            break
        raw += chunk
    body = raw.partition(b"\r\n\r\n")[2]
    text = b""
    while body:  # de-chunk
        size, _, rest = body.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        text += rest[:n]
        body = rest[n + 2 :]
    events, _ = _sse_events(text.decode())
    return events


def _peer_closed(sock: socket.socket) -> bool:
    """Whether the server closed (or reset) the connection: read what is there, without waiting."""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


URQL_ACCEPT = (
    "application/graphql-response+json, application/graphql+json, application/json, text/event-stream, multipart/mixed"
)


@pytest.mark.parametrize(
    ("accept", "kind"),
    [
        (URQL_ACCEPT, None),  # urql names every type, JSON first: its queries and mutations get JSON
        ("text/event-stream", "sse"),  # the graphql-sse client
        ('multipart/mixed;boundary="graphql";subscriptionSpec=1.0,application/json', "multipart"),  # Apollo
        ("application/json;q=0.5, text/event-stream", "sse"),
        ("text/event-stream;q=0.2, application/json", None),
        ("application/graphql+json, text/event-stream", None),
        ("*/*, text/event-stream", None),
        ("multipart/mixed", None),  # not the subscription spec's
    ],
)
def test_a_stream_is_what_the_accept_header_prefers(accept: str, kind: str | None) -> None:
    assert preferred_stream(accept) == kind


async def test_a_query_with_urqls_accept_header_gets_json(streams_server, http, api) -> None:
    """urql's fetch names the stream types after JSON: a query gets its JSON answer, not a stream."""
    answer = await http.post(
        streams_server.url,
        json={"query": "{ viewer { userId } }"},
        headers={**_bearer(streams_server, 9151), "accept": URQL_ACCEPT},
    )
    assert answer.headers["content-type"].startswith("application/graphql-response+json"), answer.headers
    assert answer.json() == {"data": {"viewer": {"userId": "9151"}}}
