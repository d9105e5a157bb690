"""The GraphQL requests of each HTTP scenario (wrk's Lua script builds the same bodies)."""

from __future__ import annotations

import random
import uuid
from functools import lru_cache

import orjson

from chatgql.edge.auth import issue_token
from chatgql.settings import load_settings

from . import layout
from .infra import BENCH_SECRET

SEND = (
    "mutation Send($c: ID!, $m: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $m, body: $b)"
    " { duplicate message { seq createdAt } } }"
)
READ = (
    "mutation Read($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { lastReadSeq advanced unreadCount } }"
)
DELIVERED = (
    "mutation Delivered($c: ID!, $s: Long!) { markDelivered(conversationId: $c, seq: $s) { deliveredSeq advanced } }"
)
INBOX = (
    "query Inbox($n: Int) { inbox(first: $n) { nodes { id title unreadCount lastMessage { seq senderId body createdAt } }"
    " pageInfo { hasNextPage endCursor } } }"
)
# fanout: what a group chat's UI shows under each message (read receipts), so one event
# also costs the roster read that seen/seenByCount need (issue 10: at most 2 statements per event)
SUB_FANOUT = (
    "subscription Live($c: ID) { messageNew(conversationId: $c) { conversationId seq"
    " message { senderId clientMsgId body createdAt seen seenByCount } } }"
)
# one conversation, no read receipts: what bench/livescale.py's delivery capacity counts
SUB_CONVERSATION = (
    "subscription Live($c: ID) { messageNew(conversationId: $c) { conversationId seq"
    " message { senderId clientMsgId body createdAt } } }"
)
SUB_ALL = "subscription Live { messageNew { conversationId seq message { senderId clientMsgId body createdAt } } }"


@lru_cache(maxsize=1)
def _settings():
    return load_settings(
        env="development", jwt_secret=BENCH_SECRET, jwt_audience=None, database_url=None, kafka_bootstrap_servers=None
    )


def token(user_id: int) -> str:
    return issue_token(_settings(), str(user_id), ttl_seconds=7 * 24 * 3600)


def send_body(conversation_id: int, body: str = "hello", client_msg_id: str | None = None) -> bytes:
    return orjson.dumps(
        {
            "query": SEND,
            "variables": {"c": str(conversation_id), "m": client_msg_id or str(uuid.uuid4()), "b": body},
        }
    )


def read_body(conversation_id: int, seq: int) -> bytes:
    return orjson.dumps({"query": READ, "variables": {"c": str(conversation_id), "s": seq}})


def inbox_body(page: int) -> bytes:
    return orjson.dumps({"query": INBOX, "variables": {"n": page}})


class Scenario:
    """Who sends what in one HTTP scenario: tokens[i] belongs to user_of(i)."""

    def __init__(self, name: str, sizes: layout.Sizes) -> None:
        self.name = name
        self.sizes = sizes
        self.persisted = False  # True: wrk names the document by its sha256 (documentId), not its text
        if name == "send_spread":
            self.users = [layout.SPREAD_SENDER + i for i in range(1, sizes.spread + 1)]
        elif name == "send_pair":  # either member of a spread conversation: users c and spread + c
            self.users = [layout.SPREAD_SENDER + i for i in range(1, sizes.spread + 1)] + [
                layout.SPREAD_OTHER + i for i in range(1, sizes.spread + 1)
            ]
        elif name == "send_hot":
            self.users = [layout.HOT_MEMBER + j for j in range(1, sizes.hot_members + 1)]
        elif name in ("read", "delivered"):  # delivered: markDelivered on the read conversations
            self.users = [layout.READER + i for i in range(1, sizes.read_conversations + 1)]
        elif name == "inbox":
            self.users = [layout.INBOX_USER]
        else:
            raise ValueError(name)

    def tokens(self) -> list[str]:
        return [token(u) for u in self.users]

    def python_request(self, rng: random.Random, part: int, parts: int, counter: int, base: int) -> tuple[int, bytes]:
        """(token index, body) for the multi-process fallback generator; same choices as gql.lua."""
        s = self.sizes
        if self.name == "send_spread":
            i = rng.randint(1, s.spread)
            return i - 1, send_body(i)
        if self.name == "send_pair":
            c = rng.randint(1, s.spread)
            return c - 1 + s.spread * rng.randint(0, 1), send_body(c)
        if self.name == "send_hot":
            j = rng.randint(1, s.hot_members)
            return j - 1, send_body(layout.HOT_CID)
        if self.name in ("read", "delivered"):
            per = s.read_conversations // parts
            i = part + 1 + parts * rng.randint(0, per - 1)
            body = read_body(layout.READ_CID0 + i, base + counter)
            if self.name == "delivered":
                body = orjson.dumps({"query": DELIVERED, "variables": orjson.loads(body)["variables"]})
            return i - 1, body
        return 0, inbox_body(s.inbox_page)
