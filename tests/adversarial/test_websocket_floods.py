"""What one websocket may send and leave unread, and how long its token holds.

Against a production-mode `chatgql serve`, with a bystander in its own process
(remote_bystander.py) asking a query and /healthz throughout:

- PING frames from a raw socket with a 4 KB receive buffer that never reads:
  before connection_init and after it (the report's attack: 132 -> 1,057 MB in
  25 s, kept after the close). With the default limits the socket is failed
  with 1008 after its burst; with the control-frame limit off, the answers it
  leaves unread are bounded in bytes (aborted) and in seconds (aborted), and the
  memory comes back;
- GraphQL protocol message floods (ping, pong, complete for unknown ids,
  subscribes past the per-socket limit; stop on the legacy protocol): closed with
  4429 after the burst;
- the subscription limit's error is coded LIMIT_EXCEEDED on both protocols;
- a token that expires: the socket is closed with 4403 at its exp, an operation
  after it is not run, and live events stop.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from chatgql.edge.auth import issue_token

from ..conftest import drop_database, scratch_database
from ..support.live import LEGACY_WS, PROTOCOLS, TRANSPORT_WS
from .conftest import ServeProcess, serve_process

pytestmark = pytest.mark.timeout(180)

# How long a bound may take to act on a loaded 2-core machine, and the bystander's p99 allowed
# (the goal is ~100 ms on a quiet machine; see the report's numbers in the README).
SLACK = 5.0
BYSTANDER_P99 = 1.0
WRITE_TIMEOUT = 3.0
PING = 0x9
TEXT = 0x1


def _mb(value: int) -> str:
    return f"{value / 2**20:.1f} MB"


def rss(server: ServeProcess) -> int:
    assert server.proc is not None
    with open(f"/proc/{server.proc.pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class RemoteBystander:
    """Another client of the server under attack, in its own process: each round's latency."""

    server: ServeProcess
    user_id: int = 999_999
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _proc: subprocess.Popen | None = None
    _out: Path | None = None

    async def __aenter__(self) -> RemoteBystander:
        self._out = Path(tempfile.mkstemp(prefix="chatgql-bystander-", suffix=".txt")[1])
        script = Path(__file__).with_name("remote_bystander.py")
        token = self.server.token(self.user_id)
        self._proc = subprocess.Popen(
            [sys.executable, str(script), self.server.url, f"{self.server.base}/healthz", token, str(self._out)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while len(self._lines()) < 5:  # a few answers before the attack starts
            assert self._proc.poll() is None, "the bystander process exited"
            assert time.monotonic() < deadline, "the bystander got no answers"
            await asyncio.sleep(0.05)
        return self

    def _lines(self) -> list[str]:
        assert self._out is not None
        return self._out.read_text().splitlines()

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.sleep(0.2)  # and a few after
        assert self._proc is not None and self._out is not None
        self._proc.terminate()
        self._proc.wait(10)
        for line in self._lines():
            latency, _, outcome = line.partition(" ")
            self.latencies.append(float(latency))
            if outcome != "ok":
                self.failures.append(outcome)
        self._out.unlink()

    @property
    def p99(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else float("inf")

    def summary(self) -> str:
        ordered = sorted(self.latencies)
        p50 = ordered[len(ordered) // 2] if ordered else float("nan")
        return f"bystander {len(ordered)} rounds, p50 {p50 * 1000:.0f} ms, p99 {self.p99 * 1000:.0f} ms"

    def assert_served(self, p99: float = BYSTANDER_P99) -> None:
        assert len(self.latencies) >= 5, self.summary()
        assert not self.failures, self.failures[:5]
        assert self.p99 < p99, self.summary()


# --- a raw websocket that never reads -----------------------------------------------------------------


def _frame(opcode: int, payload: bytes) -> bytes:
    """A masked client frame (payload under 126 bytes: the report's `0x89 0xFD <mask> <125 bytes>`)."""
    assert len(payload) < 126
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked


def _text_frame(text: str) -> bytes:
    payload = text.encode()
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    if len(payload) < 126:
        head = bytes([0x80 | TEXT, 0x80 | len(payload)])
    else:
        head = bytes([0x80 | TEXT, 0x80 | 126]) + len(payload).to_bytes(2, "big")
    return head + mask + masked


@dataclass
class Flood:
    sent: int  # bytes the attacker got into its socket
    seconds: float  # until the server cut it off (or the attempt's end)
    cut_off: bool  # the server closed or aborted the connection
    blocked: float  # seconds the attacker's sends made no progress (the server stopped reading)


def _raw_flood(port: int, frame: bytes, seconds: float, init: str | None, rcvbuf: int = 4096) -> Flood:
    """Upgrade with graphql-transport-ws, optionally send connection_init (init: its token), never
    read, and send `frame` over and over until the server cuts the connection off or `seconds` pass."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            "GET /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n"
        ).encode()
    )
    # The handshake's answer is read (frames sent with the request would be dropped with the HTTP
    # parser); after it, nothing.
    sock.settimeout(30)
    answer = b""
    while b"\r\n\r\n" not in answer:
        more = sock.recv(1)
        assert more, answer
        answer += more
    assert answer.startswith(b"HTTP/1.1 101 "), answer
    if init is not None:
        message = {"type": "connection_init", "payload": {"Authorization": f"Bearer {init}"}}
        sock.sendall(_text_frame(json.dumps(message)))
    sock.settimeout(0.2)
    chunk = frame * 100
    pending = b""
    sent = 0
    blocked = 0.0
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            if not pending:
                pending = chunk
            try:
                n = sock.send(pending)
            except TimeoutError:
                blocked += 0.2
                continue
            sent += n
            pending = pending[n:]
        return Flood(sent, time.monotonic() - started, False, blocked)
    except OSError:  # reset, broken pipe: cut off
        return Flood(sent, time.monotonic() - started, True, blocked)
    finally:
        sock.close()


async def _watch_rss(server: ServeProcess, stop: asyncio.Event) -> int:
    """The server's largest RSS until stop is set."""
    peak = rss(server)
    while not stop.is_set():
        peak = max(peak, rss(server))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.05)
    return max(peak, rss(server))


async def _attack(server: ServeProcess, frame: bytes, seconds: float, init: str | None) -> tuple[Flood, int, int]:
    """(the flood, the server's RSS before, its peak during it)."""
    before = rss(server)
    stop = asyncio.Event()
    watcher = asyncio.create_task(_watch_rss(server, stop))
    try:
        flood = await asyncio.to_thread(_raw_flood, server.port, frame, seconds, init)
    finally:
        stop.set()
    return flood, before, await watcher


async def _memory_back(server: ServeProcess, before: int, within: float = 15.0, slack: int = 10 << 20) -> int:
    """The server's RSS once it is back within slack of before (or after `within` seconds)."""
    deadline = time.monotonic() + within
    while (now := rss(server)) - before > slack and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
    return now


@pytest.fixture(autouse=True)
def _no_server_errors(request: pytest.FixtureRequest):
    """Every probe leaves the servers' logs without an ERROR or a traceback."""
    yield
    for name in ("server", "unlimited"):
        if name in request.fixturenames:
            output = request.getfixturevalue(name).output()
            assert "Traceback" not in output and "ERROR" not in output, output[-3000:]


@pytest.fixture(scope="module")
async def server(migrated_url: str) -> AsyncIterator[ServeProcess]:
    """Default limits: what production runs."""
    async with serve_process(migrated_url) as process:
        yield process


@pytest.fixture(scope="module")
async def unlimited(migrated_url: str) -> AsyncIterator[ServeProcess]:
    """No rate limits on frames or messages: only the write bounds stand between a peer that
    does not read and the server's memory."""
    async with serve_process(
        migrated_url,
        CHATGQL_WS_CONTROL_FRAMES_PER_SECOND="0",
        CHATGQL_WS_MESSAGES_PER_SECOND="0",
        CHATGQL_WS_MESSAGES_PER_ADDRESS_PER_SECOND="0",
        CHATGQL_WS_WRITE_TIMEOUT_SECONDS=str(WRITE_TIMEOUT),
    ) as process:
        yield process


PING_FRAME = _frame(PING, os.urandom(125))


# --- pings nobody reads ------------------------------------------------------------------------------


@pytest.mark.parametrize("initialised", [False, True], ids=["anonymous", "after-connection-init"])
async def test_pings_nobody_reads_are_cut_off_with_1008_and_hold_no_memory(
    server: ServeProcess, initialised: bool
) -> None:
    async with RemoteBystander(server) as bystander:
        flood, before, peak = await _attack(server, PING_FRAME, 20, server.token(7) if initialised else None)
        after = await _memory_back(server, before)
    report = (
        f"sent {_mb(flood.sent)} in {flood.seconds:.2f} s, cut off: {flood.cut_off}; RSS before {_mb(before)}, "
        f"peak {_mb(peak)}, after {_mb(after)}; {bystander.summary()}"
    )
    print(report)
    assert flood.cut_off and flood.seconds < SLACK, report
    assert peak - before < 20 << 20, report
    bystander.assert_served()


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_pings_past_the_control_frame_rate_close_the_socket_with_1008(
    server: ServeProcess, protocol: str
) -> None:
    """What a client that reads sees of the same limit: the close code and its reason."""
    ws = await _open(server, protocol, user_id=None)
    with contextlib.suppress(ConnectionClosed):
        for _ in range(server.settings.ws_control_frames_burst * 10):
            await ws.ping()
    await asyncio.wait_for(ws.wait_closed(), 10)
    assert (ws.close_code, ws.close_reason) == (1008, "Too many control frames")


async def test_pings_within_the_control_frame_rate_are_answered(server: ServeProcess) -> None:
    ws = await _open(server, TRANSPORT_WS)
    try:
        for _ in range(server.settings.ws_control_frames_burst - 2):
            await asyncio.wait_for(await ws.ping(), 10)  # each answered with its pong
        assert ws.close_code is None
    finally:
        await ws.close()


@pytest.mark.parametrize("initialised", [False, True], ids=["anonymous", "after-connection-init"])
async def test_unanswered_pongs_are_bounded_in_bytes_when_pings_are_not_rate_limited(
    unlimited: ServeProcess, initialised: bool
) -> None:
    """The backpressure itself: with no limit on PING frames, the answers a peer leaves unread
    pile up only to CHATGQL_WS_MAX_WRITE_BUFFER_BYTES; then the connection is aborted."""
    async with RemoteBystander(unlimited) as bystander:
        flood, before, peak = await _attack(unlimited, PING_FRAME, 30, unlimited.token(7) if initialised else None)
        after = await _memory_back(unlimited, before)
    report = (
        f"sent {_mb(flood.sent)} in {flood.seconds:.2f} s, cut off: {flood.cut_off}; RSS before {_mb(before)}, "
        f"peak {_mb(peak)}, after {_mb(after)}; {bystander.summary()}"
    )
    print(report)
    assert flood.cut_off and flood.seconds < WRITE_TIMEOUT + SLACK, report
    assert peak - before < 40 << 20, report
    assert after - before < 10 << 20, report
    bystander.assert_served()


async def test_a_peer_that_reads_nothing_is_aborted_after_the_write_timeout(unlimited: ServeProcess) -> None:
    """graphql-transport-ws `ping` messages (each answered with a `pong` message) from a peer that
    never reads: once the server's writes stall, the handler waits and the server stops reading
    (the attacker's sends block), and after CHATGQL_WS_WRITE_TIMEOUT_SECONDS it is aborted."""
    frame = _text_frame('{"type":"ping"}')
    async with RemoteBystander(unlimited) as bystander:
        flood, before, peak = await _attack(unlimited, frame, WRITE_TIMEOUT + 30, unlimited.token(7))
    report = (
        f"sent {_mb(flood.sent)}, blocked {flood.blocked:.1f} s, cut off after {flood.seconds:.2f} s: "
        f"{flood.cut_off}; RSS before {_mb(before)}, peak {_mb(peak)}; {bystander.summary()}"
    )
    print(report)
    assert flood.cut_off, report
    assert flood.blocked > 0, report  # the server stopped reading it: backpressure, not a buffer
    assert WRITE_TIMEOUT - 0.5 < flood.seconds < WRITE_TIMEOUT + 2 * SLACK, report
    assert peak - before < 40 << 20, report
    bystander.assert_served()


# --- message floods -----------------------------------------------------------------------------------


_users = itertools.count(7001)


async def _open(server: ServeProcess, protocol: str, user_id: int | None = 7):
    ws = await websockets.connect(
        server.ws_url, subprotocols=[protocol], compression=None, ping_interval=None, proxy=None, max_size=None
    )
    if user_id is not None:
        payload = {"Authorization": f"Bearer {server.token(user_id)}"}
        await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "connection_ack"
    return ws


async def _drain(ws) -> list[dict]:
    """Read (and keep) what the server sends until it closes."""
    frames = []
    with contextlib.suppress(ConnectionClosed):
        async for raw in ws:
            frames.append(json.loads(raw))
    return frames


async def _flood_messages(ws, messages) -> tuple[int, list[dict], float]:
    """Send messages (an iterator) as fast as the socket takes them while reading everything the
    server answers: (messages sent, frames received, seconds until the server closed)."""
    started = time.monotonic()
    reader = asyncio.create_task(_drain(ws))
    sent = 0
    with contextlib.suppress(ConnectionClosed):
        async with asyncio.timeout(60):
            for message in messages:
                await ws.send(message)
                sent += 1
                if sent % 50 == 0:
                    await asyncio.sleep(0)  # let the reader run
    frames = await asyncio.wait_for(reader, 30)
    return sent, frames, time.monotonic() - started


SUBSCRIPTION = "subscription { messageNew { seq } }"


def _flood(kind: str, protocol: str):
    """The report's floods, as endless message streams."""
    if kind == "ping":
        while True:
            yield '{"type":"ping"}'
    if kind == "pong":
        while True:
            yield '{"type":"pong"}'
    if kind == "unknown-ids":
        stop = "complete" if protocol == TRANSPORT_WS else "stop"
        while True:
            yield json.dumps({"type": stop, "id": uuid.uuid4().hex})
    if kind == "past-the-limit":
        start = "subscribe" if protocol == TRANSPORT_WS else "start"
        n = 0
        while True:
            n += 1
            yield json.dumps({"type": start, "id": str(n), "payload": {"query": SUBSCRIPTION}})


FLOODS = [
    (TRANSPORT_WS, "ping"),
    (TRANSPORT_WS, "pong"),
    (TRANSPORT_WS, "unknown-ids"),
    (TRANSPORT_WS, "past-the-limit"),
    (LEGACY_WS, "unknown-ids"),
    (LEGACY_WS, "past-the-limit"),
]


@pytest.mark.parametrize(("protocol", "kind"), FLOODS, ids=[f"{p}-{k}" for p, k in FLOODS])
async def test_a_message_flood_on_one_websocket_is_closed_4429(server: ServeProcess, protocol: str, kind: str) -> None:
    settings = server.settings
    user = next(_users)  # a user of its own: the user's sockets share one budget
    async with RemoteBystander(server) as bystander:
        floods = []
        for _ in range(3):  # an attacker that reconnects finds its user's budget as it left it
            ws = await _open(server, protocol, user_id=user)
            floods.append(await _flood_messages(ws, _flood(kind, protocol)))
            assert ws.close_code == 4429 and ws.close_reason == "Too many messages", (ws.close_code, ws.close_reason)
    for n, (sent, frames, seconds) in enumerate(floods):
        # The burst (on the first socket; the user's budget is spent by then for the others), plus
        # what was in flight when the server closed (it stops reading soon after the close).
        assert (settings.ws_messages_burst if n == 0 else 1) <= sent < settings.ws_messages_burst + 50_000, sent
        assert seconds < SLACK * 2, seconds
        answered = [f for f in frames if f.get("type") in ("pong", "error")]
        assert len(answered) <= settings.ws_messages_burst + settings.ws_messages_per_second * seconds, len(answered)
    print(f"{protocol} {kind}: sent {[f[0] for f in floods]}; {bystander.summary()}")
    bystander.assert_served()


async def test_a_client_within_the_message_rate_is_not_closed(server: ServeProcess) -> None:
    ws = await _open(server, TRANSPORT_WS, user_id=next(_users))
    try:
        for _ in range(3):  # the whole burst, then what it refills, three times over
            for _ in range(server.settings.ws_messages_burst - 10):
                await ws.send('{"type":"ping"}')
            pongs = 0
            while pongs < server.settings.ws_messages_burst - 10:
                pongs += json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "pong"
            await asyncio.sleep(server.settings.ws_messages_burst / server.settings.ws_messages_per_second)
        assert ws.close_code is None
    finally:
        await ws.close()


# --- the subscription limit's error is coded --------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_subscribe_past_the_per_socket_limit_is_answered_limit_exceeded(
    server: ServeProcess, protocol: str
) -> None:
    limit = server.settings.max_subscriptions_per_connection
    start = "subscribe" if protocol == TRANSPORT_WS else "start"
    ws = await _open(server, protocol)
    try:
        for n in range(limit + 1):
            await ws.send(json.dumps({"type": start, "id": str(n), "payload": {"query": SUBSCRIPTION}}))
        async with asyncio.timeout(30):
            while (frame := json.loads(await ws.recv())).get("type") in ("ka", "pong"):
                pass
        assert frame["type"] == "error" and frame["id"] == str(limit), frame
        errors = frame["payload"] if isinstance(frame["payload"], list) else [frame["payload"]]
        assert errors[0]["extensions"] == {"code": "LIMIT_EXCEEDED", "reason": "SUBSCRIPTIONS_PER_CONNECTION"}, errors
        assert errors[0]["message"].startswith("Subscription limit reached"), errors
        # One ends: there is room for one more.
        await ws.send(json.dumps({"type": "complete" if protocol == TRANSPORT_WS else "stop", "id": "0"}))
        await ws.send(json.dumps({"type": start, "id": "again", "payload": {"query": SUBSCRIPTION}}))
        with pytest.raises(TimeoutError):  # subscribed: nothing to deliver, no error
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 1.5))
                assert frame["type"] in ("ka", "complete"), frame
        assert ws.close_code is None
    finally:
        await ws.close()


# --- tokens that expire on a websocket ----------------------------------------------------------------

SEND = (
    "mutation($c: ID!, $m: UUID!, $b: String!) "
    "{ sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { seq } } }"
)


async def _http(server: ServeProcess, query: str, variables: dict, user_id: int) -> dict:
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            server.url, json={"query": query, "variables": variables}, headers=server.headers(user_id)
        )
    body = response.json()
    assert "errors" not in body, body
    return body["data"]


@pytest.fixture(scope="module")
async def alone(migrated_url: str) -> AsyncIterator[ServeProcess]:
    """A production server that is the only relay on its own database: with the memory bus only
    the process whose relay publishes an event delivers it live, and beside the package's other
    servers on the shared database this one would lead only some of the relay's shards."""
    url = await scratch_database(migrated_url, "token_expiry")
    try:
        async with serve_process(url) as process:
            yield process
    finally:
        await drop_database(migrated_url, "token_expiry")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_websocket_ends_when_its_token_expires(alone: ServeProcess, protocol: str) -> None:
    server = alone
    owner, member = 501, 502
    group = await _http(
        server,
        'mutation($m: [ID!]!) { createGroup(title: "expiry", memberIds: $m) { id } }',
        {"m": [str(member)]},
        owner,
    )
    cid = group["createGroup"]["id"]
    # Long enough for the first live event on a busy machine (the wait below is for the condition,
    # bounded well inside the token's life), short enough for a test.
    ttl = 15
    token = issue_token(server.settings, str(member), ttl_seconds=ttl)
    expires = time.time() + ttl
    ws = await websockets.connect(
        server.ws_url, subprotocols=[protocol], compression=None, ping_interval=None, proxy=None
    )
    await ws.send(json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}))
    assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "connection_ack"
    start = "subscribe" if protocol == TRANSPORT_WS else "start"
    subscription = "subscription($c: ID!) { messageNew(conversationId: $c) { seq } }"
    await ws.send(
        json.dumps({"type": start, "id": "live", "payload": {"query": subscription, "variables": {"c": cid}}})
    )

    async def frames_until(predicate) -> dict:
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 15))
            if predicate(frame):
                return frame

    # Live while the token holds (sent until one arrives: the subscription registers asynchronously).
    async def first_event() -> dict:
        async with asyncio.timeout(ttl - 3):
            while True:
                await _http(server, SEND, {"c": cid, "m": str(uuid.uuid4()), "b": "before"}, owner)
                with contextlib.suppress(TimeoutError):
                    return await asyncio.wait_for(frames_until(lambda f: f.get("id") == "live"), 0.5)

    event = await first_event()
    assert event["type"] in ("next", "data") and event["payload"]["data"]["messageNew"]["seq"] >= 1, event
    # After exp (the token's own clock): the socket is closed with 4403, or a sendMessage sent in the
    # moment before the close is refused. Either way nothing is stored, and no event comes after.
    await asyncio.sleep(max(0.0, expires - time.time()) + 0.05)
    late = str(uuid.uuid4())
    refused: dict | None = None
    live_seqs: list[int] = []
    after_seq = None
    with contextlib.suppress(ConnectionClosed):
        variables = {"c": cid, "m": late, "b": "late"}
        await ws.send(json.dumps({"type": start, "id": "late", "payload": {"query": SEND, "variables": variables}}))
        sent = await _http(server, SEND, {"c": cid, "m": str(uuid.uuid4()), "b": "after"}, owner)
        after_seq = sent["sendMessage"]["message"]["seq"]
        async with asyncio.timeout(SLACK + 30):
            async for raw in ws:
                frame = json.loads(raw)
                if frame.get("id") == "late" and frame["type"] in ("next", "data", "error"):
                    refused = frame
                elif frame.get("id") == "live" and frame["type"] in ("next", "data"):
                    data = frame["payload"].get("data") or {}
                    if data.get("messageNew"):
                        live_seqs.append(data["messageNew"]["seq"])
    assert (ws.close_code, ws.close_reason) == (4403, "Token expired"), (ws.close_code, ws.close_reason)
    if refused is not None:  # the operation ran in the moment before the close: refused
        payload = refused["payload"]
        errors = payload["errors"] if isinstance(payload, dict) and "errors" in payload else payload
        errors = errors if isinstance(errors, list) else [errors]
        assert errors[0]["extensions"]["code"] == "UNAUTHENTICATED", refused
    history = await _http(
        server, "query($c: ID!) { messages(conversationId: $c, last: 50) { nodes { seq body } } }", {"c": cid}, owner
    )
    bodies = [node["body"] for node in history["messages"]["nodes"]]
    assert "late" not in bodies, bodies  # not stored
    if after_seq is not None:  # the owner's send after exp is stored, and did not reach the expired socket
        assert "after" in bodies and after_seq not in live_seqs, (after_seq, live_seqs)
