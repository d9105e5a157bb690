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

from chatgql.edge.auth import issue_token
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
# The writes that change a stored message (they take a change seq, never a seq) and the viewer's own
# read state; Load and OwnState send them beside the sends when asked to (the fault scenarios).
CHANGE_PAYLOAD = "{ changeSeq message { seq } }"
CHANGES = {
    "edit": f"mutation($c: ID!, $s: Long!, $v: String!) {{ editMessage(conversationId: $c, seq: $s, body: $v) {CHANGE_PAYLOAD} }}",
    "delete": f"mutation($c: ID!, $s: Long!) {{ deleteMessage(conversationId: $c, seq: $s) {CHANGE_PAYLOAD} }}",
    "react": f"mutation($c: ID!, $s: Long!, $v: String!) {{ addReaction(conversationId: $c, seq: $s, emoji: $v) {CHANGE_PAYLOAD} }}",
    "unreact": (
        f"mutation($c: ID!, $s: Long!, $v: String!) {{ removeReaction(conversationId: $c, seq: $s, emoji: $v) {CHANGE_PAYLOAD} }}"
    ),
}
CHANGE_FIELDS = {"edit": "editMessage", "delete": "deleteMessage", "react": "addReaction", "unreact": "removeReaction"}
EMOJIS = ["👍", "🎉", "❤️"]
OWN_STATE = "conversationId: id lastReadSeq muted archived pinned"
MARK_UNREAD = f"mutation($c: ID!, $s: Long!) {{ markUnread(conversationId: $c, fromSeq: $s) {{ {OWN_STATE} }} }}"
MARK_DELIVERED = "mutation($c: ID!, $s: Long!) { markDelivered(conversationId: $c, seq: $s) { deliveredSeq } }"
UPDATE_MEMBERSHIP = (
    "mutation($c: ID!, $muted: Boolean, $archived: Boolean, $pinned: Boolean) { updateMembership(conversationId: $c, "
    f"muted: $muted, archived: $archived, pinned: $pinned) {{ {OWN_STATE} }} }}"
)


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
class ChangeAck:
    """An acknowledged change of a message: kind (a key of CHANGES), value (the edit's body or the emoji),
    change_seq (None: it changed nothing, or an earlier attempt cut off by the fault did), attempts;
    effective: the client expected it to change something (not a repeated add or remove)."""

    user: int
    conversation_id: str
    seq: int
    kind: str
    value: str
    change_seq: int | None
    attempts: int
    effective: bool = True


@dataclass
class LoadStats:
    sent: int = 0  # distinct clientMsgIds the clients sent
    attempts: int = 0  # HTTP attempts for them
    retried: int = 0  # messages that needed more than one attempt
    unacked: list[str] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    refusals: list[str] = field(default_factory=list)
    read_calls: int = 0
    changes_sent: int = 0  # edit, delete and reaction calls
    unacked_changes: list[str] = field(default_factory=list)


class Api:
    """GraphQL over HTTP as a user; raises Retryable or Refused on failure."""

    def __init__(self, url: str, http: httpx.AsyncClient, settings: Settings) -> None:
        self.url = url
        self.http = http
        self._tokens: dict[int, str] = {}
        self._settings = settings

    def authorization(self, user: int) -> str:
        if user not in self._tokens:
            self._tokens[user] = f"Bearer {issue_token(self._settings, str(user))}"
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
            extensions = errors[0].get("extensions") or {}
            code = extensions.get("code", "?")
            if code in REFUSALS:
                raise Refused(f"{code}: {errors[0].get('message')}")
            if code == "UNAVAILABLE" and not isinstance(extensions.get("retryAfter"), int | float):
                code = "UNAVAILABLE without retryAfter"
            raise Retryable(code)
        if response.status_code != 200 or body.get("data") is None:
            raise Retryable(f"HTTP {response.status_code}")
        return body["data"]

    async def call_until_done(
        self, user: int, query: str, variables: dict, deadline: float, stats: LoadStats, *, once: bool = False
    ) -> tuple[dict, int]:
        """Retry the same request with backoff until it succeeds; (data, attempts).
        once: a request that can be done only once (deleteMessage): CONFLICT on a retry means an earlier
        attempt did it, and answers ({}, attempts)."""
        attempts = 0
        while True:
            attempts += 1
            try:
                return await self.call(user, query, variables), attempts
            except Refused as error:
                if once and attempts > 1 and str(error).startswith("CONFLICT"):
                    return {}, attempts
                raise
            except Retryable as error:
                stats.errors[error.kind] += 1
                if time.monotonic() > deadline:
                    raise
            backoff = min(2.0, 0.1 * 2 ** min(attempts, 5))
            await asyncio.sleep(backoff * random.uniform(0.5, 1.0))


def doomed(client_msg_id: str) -> bool:
    """One message in five is its sender's to delete (and nobody edits or reacts to it)."""
    return int(client_msg_id[:8], 16) % 5 == 0


@dataclass
class OwnAck:
    """One acknowledged call of OwnState: op, conversation, what was asked, the answer's own state."""

    op: str
    conversation_id: str
    asked: dict
    answer: dict


class OwnState:
    """A member who never sends (the scenario's subscriber) changing only its own read state, one call at
    a time, as a client does between sends: markRead, markUnread (a rewind), markDelivered and
    updateMembership (mute, archive, pin); each call retried until answered. Every answer is recorded in
    order, so the last one per conversation is what the database must end with."""

    def __init__(self, api: Api, user: int, conversations: list[str], load: Load, *, pace: float = 0.1) -> None:
        self.api = api
        self.user = user
        self.conversations = conversations
        self.load = load  # its acknowledged sends say what seqs exist
        self.pace = pace
        self.stats = LoadStats()
        self.acks: list[OwnAck] = []

    async def one(self, rng: random.Random, give_up_at: float) -> None:
        cid = rng.choice(self.conversations)
        top = self.load.max_acked_seq(cid)
        op = rng.choice(["markRead", "markUnread", "markDelivered", "markDelivered", "updateMembership"])
        variables: dict = {"c": cid}
        if op == "markRead":
            query, variables["s"] = MARK_READ, max(0, top - rng.randint(0, 5))
        elif op == "markUnread":
            if top < 1:
                return
            query, variables["s"] = MARK_UNREAD, rng.randint(max(1, top - 30), top)
        elif op == "markDelivered":
            query, variables["s"] = MARK_DELIVERED, max(0, top - rng.randint(-2, 10))
        else:
            query = UPDATE_MEMBERSHIP
            for name in rng.sample(["muted", "archived", "pinned"], k=rng.randint(1, 3)):
                variables[name] = rng.random() < 0.5
        self.stats.read_calls += 1
        try:
            data, _ = await self.api.call_until_done(self.user, query, variables, give_up_at, self.stats)
        except Retryable:
            self.stats.unacked.append(f"{op} {variables}")
            return
        except Refused as error:
            self.stats.refusals.append(f"{op} {variables}: {error}")
            return
        self.acks.append(OwnAck(op, cid, variables, next(iter(data.values()))))

    async def run(self, stop: asyncio.Event, give_up_at: float) -> None:
        """Until stop, and past it until a markUnread and a markDelivered were answered: a starved
        machine (a read storm) may let only a few calls through while the load runs."""
        rng = random.Random(self.user)
        while not (stop.is_set() and self.covered()) and time.monotonic() < give_up_at:
            await self.one(rng, give_up_at)
            await asyncio.sleep(self.pace * rng.uniform(0.5, 1.5))

    def covered(self) -> bool:
        return {"markUnread", "markDelivered"} <= {ack.op for ack in self.acks}


class Load:
    """K senders (one task per user) over the scenario's conversations."""

    def __init__(
        self,
        api: Api,
        users: list[int],
        conversations: list[str],
        *,
        pace: float = 0.05,
        read_every: int = 8,
        change_every: int = 0,
    ) -> None:
        self.api = api
        self.users = users
        self.conversations = conversations
        self.pace = pace
        self.read_every = read_every
        self.change_every = change_every  # one call in change_every edits, deletes or reacts (0: none)
        self.stats = LoadStats()
        self.acks: list[SendAck] = []
        self.reads: list[ReadAck] = []
        self.changes: list[ChangeAck] = []
        self._sending = asyncio.Event()
        self._deleted: set[tuple[str, int]] = set()
        self._reacted: set[tuple[str, int, int, str]] = set()  # (conversation, seq, user, emoji) as acknowledged

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

    async def change_one(self, user: int, rng: random.Random, give_up_at: float) -> None:
        """Edit or delete one of the user's acknowledged messages, or react to (or take back a reaction to)
        anyone's. Only doomed messages (doomed()) are deleted, and they are never edited nor reacted to:
        every valid change stays valid whatever the other clients do meanwhile."""
        recent = self.acks[-400:]
        mine = [a for a in recent if a.sender == user and (a.conversation_id, a.seq) not in self._deleted]
        kind = rng.choice(["edit", "edit", "delete", "react", "react", "react"])
        if kind == "delete":
            targets = [a for a in mine if doomed(a.client_msg_id)]
        elif kind == "edit":
            targets = [a for a in mine if not doomed(a.client_msg_id)]
        else:
            targets = [a for a in recent if not doomed(a.client_msg_id)]
        if not targets:
            return
        target = rng.choice(targets)
        key = (target.conversation_id, target.seq)
        value, effective = "", True
        if kind == "edit":
            value = f"{target.body} e{uuid.uuid4().hex[:6]}"
        elif kind == "react":
            value = rng.choice(EMOJIS)
            present = (*key, user, value) in self._reacted
            if rng.randint(0, 5) == 0:  # the same state again: must change nothing
                kind, effective = ("react" if present else "unreact"), False
            else:
                kind = "unreact" if present else "react"
        variables = {"c": target.conversation_id, "s": target.seq} | ({"v": value} if value else {})
        if kind == "delete":
            self._deleted.add(key)  # before the call: nobody picks it again
        self.stats.changes_sent += 1
        try:
            data, attempts = await self.api.call_until_done(
                user, CHANGES[kind], variables, give_up_at, self.stats, once=kind == "delete"
            )
        except Retryable:
            self.stats.unacked_changes.append(f"{kind} {key} {value}")
            return
        except Refused as error:
            self.stats.refusals.append(f"{kind} {key} {value}: {error}")
            return
        change_seq = (data.get(CHANGE_FIELDS[kind]) or {}).get("changeSeq")
        self.changes.append(ChangeAck(user, *key, kind, value, change_seq, attempts, effective))
        if kind in ("react", "unreact"):
            (self._reacted.add if kind == "react" else self._reacted.discard)((*key, user, value))

    async def _sender(self, user: int, stop: asyncio.Event, give_up_at: float) -> None:
        rng = random.Random(user)
        for n in itertools.count():
            if stop.is_set():
                return
            if n % self.read_every == self.read_every - 1:
                await self.mark_read(user, give_up_at)
            elif self.change_every and n % self.change_every == self.change_every // 2:
                await self.change_one(user, rng, give_up_at)
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
        self._delivered: dict[tuple[int, int], int] = {}
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
                await conn.execute(
                    text("SELECT conversation_id, user_id, last_read_seq, delivered_seq FROM conversation_member")
                )
            ).all()
            convs = (await conn.execute(text("SELECT id, last_seq FROM conversation"))).all()
        for cid, uid, value, delivered in members:
            before = self._last_read.get((cid, uid), 0)
            if value < before:
                self.regressions.append(f"watermark ({cid}, {uid}) went from {before} to {value}")
            self._last_read[(cid, uid)] = max(before, value)
            before = self._delivered.get((cid, uid), 0)
            if delivered < before:
                self.regressions.append(f"delivered watermark ({cid}, {uid}) went from {before} to {delivered}")
            self._delivered[(cid, uid)] = max(before, delivered)
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


CONVERGE_FIELDS = "seq senderId clientMsgId body editedAt deletedAt deletedBy reactions { emoji count }"
HISTORY_PAGE = (
    "query($c: ID!, $a: String!) { messages(conversationId: $c, first: 200, after: $a) "
    f"{{ nodes {{ {CONVERGE_FIELDS} }} pageInfo {{ hasNextPage }} }} }}"
)
CURSORS = "query($c: ID!) { conversation(id: $c) { lastSeq lastChangeSeq } }"
SYNC_CHANGES = (
    "query($c: [SyncCursor!]!) { sync(cursors: $c, limit: 50) { conversationId hasMore changesHaveMore "
    f"changesTooLong messages {{ {CONVERGE_FIELDS} }} changes {{ changeSeq message {{ {CONVERGE_FIELDS} }} }} }} }}"
)


def _as_held(message: dict) -> dict:
    return {**message, "reactions": sorted(message["reactions"], key=lambda r: r["emoji"])}


async def read_history(api: Api, user: int, conversation_id: str, deadline: float, stats: LoadStats) -> dict[int, dict]:
    """Every message of a conversation as the server has it now, by seq (paging forward from 0)."""
    held: dict[int, dict] = {}
    after = 0
    while True:
        data, _ = await api.call_until_done(
            user, HISTORY_PAGE, {"c": conversation_id, "a": str(after)}, deadline, stats
        )
        page = data["messages"]
        for m in page["nodes"]:
            held[m["seq"]] = _as_held(m)
            after = m["seq"]
        if not page["pageInfo"]["hasNextPage"]:
            return held


class OfflineClient:
    """A client that reads its conversations early in the run (both cursors first, then the messages),
    goes offline through the edits, deletes and reactions, and comes back with sync from the two cursors
    it holds (afterSeq, afterChangeSeq), applying the changes in changeSeq order over what it held."""

    def __init__(self, api: Api, user: int, conversations: list[str]) -> None:
        self.api = api
        self.user = user
        self.conversations = conversations
        self.stats = LoadStats()
        self.held: dict[str, dict[int, dict]] = {}
        self.after_seq: dict[str, int] = {}
        self.after_change: dict[str, int] = {}
        self.went_offline_at: dict[str, int] = {}  # the change cursor it left with
        self.changes_applied = 0
        self.too_long = 0

    async def go_offline(self, deadline: float) -> None:
        for cid in self.conversations:
            data, _ = await self.api.call_until_done(self.user, CURSORS, {"c": cid}, deadline, self.stats)
            self.after_change[cid] = self.went_offline_at[cid] = data["conversation"]["lastChangeSeq"]
            self.held[cid] = await read_history(self.api, self.user, cid, deadline, self.stats)
            self.after_seq[cid] = max(self.held[cid], default=0)

    async def come_back(self, deadline: float) -> dict[str, dict[int, dict]]:
        pending = list(self.held)
        while pending:  # one conversation a call: a page of messages and changes with reactions is priced high
            c = pending.pop(0)
            cursors = [{"conversationId": c, "afterSeq": self.after_seq[c], "afterChangeSeq": self.after_change[c]}]
            data, _ = await self.api.call_until_done(self.user, SYNC_CHANGES, {"c": cursors}, deadline, self.stats)
            for item in data["sync"]:
                cid = item["conversationId"]
                held = self.held[cid]
                for m in item["messages"]:
                    held[m["seq"]] = _as_held(m)
                    self.after_seq[cid] = max(self.after_seq[cid], m["seq"])
                for change in sorted(item["changes"], key=lambda ch: ch["changeSeq"]):
                    held[change["message"]["seq"]] = _as_held(change["message"])
                    self.after_change[cid] = change["changeSeq"]
                    self.changes_applied += 1
                if item["changesTooLong"]:  # what the answer says to do: re-read what it holds
                    self.too_long += 1
                    self.held[cid] = await read_history(self.api, self.user, cid, deadline, self.stats)
                    self.after_seq[cid] = max(self.held[cid], default=0)
                    data, _ = await self.api.call_until_done(self.user, CURSORS, {"c": cid}, deadline, self.stats)
                    self.after_change[cid] = data["conversation"]["lastChangeSeq"]
                if item["hasMore"] or item["changesHaveMore"]:
                    pending.append(cid)
        return self.held
