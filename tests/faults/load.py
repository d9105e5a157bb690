"""The clients of a fault scenario: senders that retry like real clients, a
subscriber that records everything it is pushed, and a watermark monitor.

A sender retries a message with the same clientMsgId after a timeout, a
connection error, a 5xx or any error that is not a refusal of the request
itself, with backoff, until it is acknowledged; every acknowledgement is
recorded. The subscriber reconnects and subscribes again whenever its
connection or subscription ends, and records every event, duplicates included.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import httpx
import websockets
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from chatgql.auth import issue_token
from chatgql.settings import Settings, load_settings

from .infra import JWT_SECRET

# Errors that refuse the request itself: retrying the same request cannot help,
# and a valid send or markRead must never get one (the suite fails on any).
REFUSALS = {"UNAUTHENTICATED", "NOT_FOUND", "FORBIDDEN", "BAD_USER_INPUT", "CONFLICT"}

SEND = (
    "mutation($c: ID!, $m: UUID!, $b: String!) "
    "{ sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { duplicate message { seq } } }"
)
MARK_READ = "mutation($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { lastReadSeq advanced } }"
CREATE_GROUP = "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }"
SYNC = (
    "query($c: [SyncCursor!]!) { sync(cursors: $c, limit: 100) "
    "{ conversationId hasMore lastSeq messages { seq senderId clientMsgId body } } }"
)
MESSAGE_NEW = "subscription { messageNew { conversationId seq message { senderId clientMsgId body } } }"


def token_settings() -> Settings:
    return load_settings(jwt_secret=JWT_SECRET, jwt_audience=None)


class Refused(Exception):
    pass


class Retryable(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass
class SendAck:
    conversation_id: str
    client_msg_id: str
    sender: int
    body: str
    seq: int
    duplicate: bool
    attempts: int


@dataclass
class ReadAck:
    user: int
    conversation_id: str
    asked: int
    last_read_seq: int
    advanced: bool


@dataclass
class LoadStats:
    sent: int = 0  # distinct clientMsgIds the clients sent
    attempts: int = 0  # HTTP attempts for them
    retried: int = 0  # messages that needed more than one attempt
    unacked: list[str] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    refusals: list[str] = field(default_factory=list)
    read_calls: int = 0


class Api:
    """GraphQL over HTTP as a user; raises Retryable or Refused on failure."""

    def __init__(self, url: str, http: httpx.AsyncClient, settings: Settings) -> None:
        self.url = url
        self.http = http
        self._tokens: dict[int, str] = {}
        self._settings = settings

    def authorization(self, user: int) -> str:
        if user not in self._tokens:
            self._tokens[user] = f"Bearer {issue_token(self._settings, user)}"
        return self._tokens[user]

    async def call(self, user: int, query: str, variables: dict) -> dict:
        try:
            response = await self.http.post(
                self.url,
                json={"query": query, "variables": variables},
                headers={"authorization": self.authorization(user)},
            )
        except httpx.TimeoutException as error:
            raise Retryable(f"timeout ({type(error).__name__})") from error
        except httpx.HTTPError as error:
            raise Retryable(f"connection ({type(error).__name__})") from error
        if response.status_code >= 500:
            raise Retryable(f"HTTP {response.status_code}")
        try:
            body = response.json()
        except ValueError:
            raise Retryable(f"HTTP {response.status_code}, not JSON") from None
        errors = body.get("errors")
        if errors:
            code = (errors[0].get("extensions") or {}).get("code", "?")
            if code in REFUSALS:
                raise Refused(f"{code}: {errors[0].get('message')}")
            raise Retryable(code)
        if response.status_code != 200 or body.get("data") is None:
            raise Retryable(f"HTTP {response.status_code}")
        return body["data"]

    async def call_until_done(
        self, user: int, query: str, variables: dict, deadline: float, stats: LoadStats
    ) -> tuple[dict, int]:
        """Retry the same request with backoff until it succeeds; (data, attempts)."""
        attempts = 0
        while True:
            attempts += 1
            try:
                return await self.call(user, query, variables), attempts
            except Retryable as error:
                stats.errors[error.kind] += 1
                if time.monotonic() > deadline:
                    raise
            backoff = min(2.0, 0.1 * 2 ** min(attempts, 5))
            await asyncio.sleep(backoff * random.uniform(0.5, 1.0))


class Load:
    """K senders (one task per user) over the scenario's conversations."""

    def __init__(
        self, api: Api, users: list[int], conversations: list[str], *, pace: float = 0.05, read_every: int = 8
    ) -> None:
        self.api = api
        self.users = users
        self.conversations = conversations
        self.pace = pace
        self.read_every = read_every
        self.stats = LoadStats()
        self.acks: list[SendAck] = []
        self.reads: list[ReadAck] = []
        self._sending = asyncio.Event()

    def conversations_of(self, user: int) -> list[str]:
        """The conversations user sends to and marks read in (a repeated one is picked more often)."""
        return self.conversations

    def max_acked_seq(self, conversation_id: str) -> int:
        return max((a.seq for a in self.acks if a.conversation_id == conversation_id), default=0)

    async def send_one(self, user: int, conversation_id: str, give_up_at: float) -> SendAck | None:
        client_msg_id = str(uuid.uuid4())
        body = f"u{user} {client_msg_id[:8]}"
        self.stats.sent += 1
        try:
            data, attempts = await self.api.call_until_done(
                user, SEND, {"c": conversation_id, "m": client_msg_id, "b": body}, give_up_at, self.stats
            )
        except Retryable:
            self.stats.unacked.append(client_msg_id)
            return None
        except Refused as error:
            self.stats.refusals.append(f"sendMessage {client_msg_id}: {error}")
            return None
        self.stats.attempts += attempts
        if attempts > 1:
            self.stats.retried += 1
        payload = data["sendMessage"]
        ack = SendAck(
            conversation_id, client_msg_id, user, body, payload["message"]["seq"], payload["duplicate"], attempts
        )
        self.acks.append(ack)
        return ack

    async def mark_read(self, user: int, give_up_at: float) -> None:
        conversation_id = random.choice(self.conversations_of(user))
        top = self.max_acked_seq(conversation_id)
        # Stale (a late device), current, or past the end (clamped by the server).
        asked = max(0, random.choice([top - random.randint(1, 20), top, top + random.randint(1, 5)]))
        self.stats.read_calls += 1
        try:
            data, _ = await self.api.call_until_done(
                user, MARK_READ, {"c": conversation_id, "s": asked}, give_up_at, self.stats
            )
        except Retryable:
            return
        except Refused as error:
            self.stats.refusals.append(f"markRead {conversation_id} {asked}: {error}")
            return
        result = data["markRead"]
        self.reads.append(ReadAck(user, conversation_id, asked, result["lastReadSeq"], result["advanced"]))

    async def _sender(self, user: int, stop: asyncio.Event, give_up_at: float) -> None:
        rng = random.Random(user)
        for n in itertools.count():
            if stop.is_set():
                return
            if n % self.read_every == self.read_every - 1:
                await self.mark_read(user, give_up_at)
            else:
                await self.send_one(user, rng.choice(self.conversations_of(user)), give_up_at)
            await asyncio.sleep(self.pace * rng.uniform(0.5, 1.5))

    async def run(self, stop: asyncio.Event, give_up_at: float) -> None:
        """Send until stop is set; a message started by then is retried until give_up_at."""
        await asyncio.gather(*(self._sender(u, stop, give_up_at) for u in self.users))


class Subscriber:
    """A member subscribed to messageNew in all its conversations (graphql-transport-ws).

    Records every event pushed to it, in arrival order, duplicates included.
    Whenever the connection drops or the subscription ends (a resync error),
    it reconnects / subscribes again, as a real client does; what it missed
    meanwhile is the sync query's job.
    """

    def __init__(self, ws_url: str, authorization: str) -> None:
        self.ws_url = ws_url
        self.authorization = authorization
        self.events: list[dict] = []
        self.connects = 0
        self.disconnects = 0
        self.resyncs: Counter = Counter()
        self.subscribed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.last_event_at = time.monotonic()

    @property
    def interrupted(self) -> bool:
        """True when the live stream may have missed something (a drop or a resync)."""
        return self.disconnects > 0 or sum(self.resyncs.values()) > 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="subscriber")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def unique(self) -> dict[tuple[str, int], dict]:
        out: dict[tuple[str, int], dict] = {}
        for event in self.events:
            out.setdefault((event["conversationId"], event["seq"]), event)
        return out

    async def _run(self) -> None:
        while True:
            connects = self.connects
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except (OSError, TimeoutError, websockets.exceptions.WebSocketException):
                pass
            if self.connects > connects:
                self.disconnects += 1  # an established connection ended
            self.subscribed.clear()
            await asyncio.sleep(0.3)

    async def _session(self) -> None:
        async with websockets.connect(
            self.ws_url,
            subprotocols=["graphql-transport-ws"],
            open_timeout=5,
            close_timeout=2,
            ping_interval=None,
            compression=None,
            proxy=None,
            max_size=None,
        ) as ws:
            await ws.send(json.dumps({"type": "connection_init", "payload": {"Authorization": self.authorization}}))
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
                if frame["type"] == "connection_ack":
                    break
                if frame["type"] == "ping":
                    await ws.send(json.dumps({"type": "pong"}))
            self.connects += 1
            ids = itertools.count(1)
            op = str(next(ids))
            await ws.send(json.dumps({"id": op, "type": "subscribe", "payload": {"query": MESSAGE_NEW}}))
            self.subscribed.set()
            while True:
                frame = json.loads(await ws.recv())
                kind = frame.get("type")
                if kind == "ping":
                    await ws.send(json.dumps({"type": "pong"}))
                    continue
                if kind == "pong":
                    continue
                if frame.get("id") != op:
                    continue  # the end of a subscription already replaced (its complete after an error)
                payload = frame.get("payload")
                if kind == "next" and not (payload or {}).get("errors"):
                    event = payload["data"]["messageNew"]
                    message = event["message"]
                    self.events.append(
                        {
                            "conversationId": event["conversationId"],
                            "seq": event["seq"],
                            "senderId": message["senderId"],
                            "clientMsgId": message["clientMsgId"],
                            "body": message["body"],
                        }
                    )
                    self.last_event_at = time.monotonic()
                    continue
                # The subscription ended: a resync error (stream interrupted, too slow) or complete.
                errors = (payload or {}).get("errors") if kind == "next" else payload
                if isinstance(errors, list) and errors:
                    ext = errors[0].get("extensions") or {}
                    self.resyncs[ext.get("reason") or ext.get("code") or "error"] += 1
                else:
                    self.resyncs[kind or "?"] += 1
                op = str(next(ids))
                await ws.send(json.dumps({"id": op, "type": "subscribe", "payload": {"query": MESSAGE_NEW}}))


async def catch_up(
    api: Api, user: int, held: dict[str, list[int]], conversations: list[str], deadline: float, stats: LoadStats
) -> list[dict]:
    """What a client holding `held` fetches with sync: from the end of the
    contiguous run it holds in each conversation (a gap is refetched, as a
    client does when it holds 40 and receives 43), until hasMore is false."""
    after: dict[str, int] = {}
    for cid in conversations:
        have = set(held.get(cid, ()))
        n = 0
        while n + 1 in have:
            n += 1
        after[cid] = n
    fetched: list[dict] = []
    pending = list(conversations)
    while pending:
        data, _ = await api.call_until_done(
            user, SYNC, {"c": [{"conversationId": c, "afterSeq": after[c]} for c in pending]}, deadline, stats
        )
        pending = []
        for item in data["sync"]:
            cid = item["conversationId"]
            for m in item["messages"]:
                fetched.append({"conversationId": cid, **m})
                after[cid] = max(after[cid], m["seq"])
            if item["hasMore"]:
                pending.append(cid)
    return fetched


class WatermarkMonitor:
    """Samples every watermark and last_seq while the scenario runs; any value
    lower than one seen before is a regression (a read or a seq went back)."""

    def __init__(self, engine: AsyncEngine, every: float = 0.5) -> None:
        self.engine = engine
        self.every = every
        self.samples = 0
        self.failed_samples = 0
        self.regressions: list[str] = []
        self._last_read: dict[tuple[int, int], int] = {}
        self._last_seq: dict[int, int] = {}
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="watermark-monitor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def sample(self) -> None:
        async with self.engine.connect() as conn:
            members = (
                await conn.execute(text("SELECT conversation_id, user_id, last_read_seq FROM conversation_member"))
            ).all()
            convs = (await conn.execute(text("SELECT id, last_seq FROM conversation"))).all()
        for cid, uid, value in members:
            before = self._last_read.get((cid, uid), 0)
            if value < before:
                self.regressions.append(f"watermark ({cid}, {uid}) went from {before} to {value}")
            self._last_read[(cid, uid)] = max(before, value)
        for cid, value in convs:
            before = self._last_seq.get(cid, 0)
            if value < before:
                self.regressions.append(f"last_seq of {cid} went from {before} to {value}")
            self._last_seq[cid] = max(before, value)
        self.samples += 1

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self.sample(), 10)
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failed_samples += 1  # the database is down or cut off: that is the fault
            await asyncio.sleep(self.every)


async def create_groups(api: Api, owner: int, users: list[int], count: int) -> list[str]:
    out = []
    for i in range(count):
        data = await api.call(owner, CREATE_GROUP, {"t": f"fault group {i}", "m": [str(u) for u in users]})
        out.append(data["createGroup"]["id"])
    return out


@dataclass
class StormRead:
    user: int
    conversation_id: str
    asked: int
    seen: int  # the highest seq acknowledged to any sender before the call went out
    sent_at: float  # the first attempt
    received_at: float  # the answer (of the attempt that got one)
    last_read_seq: int


class ReadStorm:
    """users x devices clients marking read as fast as they are answered, each retrying a
    failed call (same conversation and seq) until it is answered, as Load's clients do."""

    def __init__(self, api: Api, users: list[int], devices: int, conversations: list[str], load: Load) -> None:
        self.api = api
        self.users = users
        self.devices = devices
        self.conversations = conversations
        self.load = load  # its acknowledged sends say what seqs exist
        self.stats = LoadStats()
        self.reads: list[StormRead] = []

    async def _device(self, user: int, device: int, stop: asyncio.Event, give_up_at: float) -> None:
        rng = random.Random(user * 100 + device)
        while not stop.is_set():
            cid = rng.choice(self.conversations)
            top = self.load.max_acked_seq(cid)
            asked = max(0, rng.choice([top - rng.randint(1, 10), top, top + rng.randint(1, 3)]))
            self.stats.read_calls += 1
            sent_at = time.monotonic()
            try:
                data, _ = await self.api.call_until_done(
                    user, MARK_READ, {"c": cid, "s": asked}, give_up_at, self.stats
                )
            except Retryable:
                return
            except Refused as error:
                self.stats.refusals.append(f"markRead {cid} {asked}: {error}")
                return
            result = data["markRead"]
            self.reads.append(StormRead(user, cid, asked, top, sent_at, time.monotonic(), result["lastReadSeq"]))
            await asyncio.sleep(rng.uniform(0, 0.01))

    async def run(self, stop: asyncio.Event, give_up_at: float) -> None:
        await asyncio.gather(*(self._device(u, d, stop, give_up_at) for u in self.users for d in range(self.devices)))
