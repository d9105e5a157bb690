"""Authorization matrix: every operation × every kind of caller that must be refused.

Operations: the queries (viewer, conversation, Conversation.members,
Conversation.messages, inbox, messages, sync, searchMessages, pinnedMessages), the mutations
(createDirectConversation, createGroup, addMembers, removeMember, sendMessage,
markRead, pinMessage, unpinMessage, reportMessage, blockUser, reportUser) and both subscriptions (messageNew, readUpdated, with and without
conversationId; messageNew resumed from cursors).

Callers: a non-member, a removed member, a MEMBER (not OWNER) removing someone
else, and five token problems (expired, signed with another key, non-numeric
sub, no sub, no token). Over websockets also: subscribe before connection_init
(closed 4401) and connection_init with a bad token (refused, 4403).

Each refusal is checked for the contract's code, for no data, and — since a
refused call must leave no trace — for an unchanged database (every table,
outbox included). The HTTP matrix runs against a relay-less chatgql on a
database of its own, so an outbox row written by mistake stays to be seen.
A member-control test runs the same table as a member, so the matrix cannot
pass because an operation is broken for everybody.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import jwt
import pytest
import websockets
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from websockets.exceptions import ConnectionClosed

from ..conftest import TABLES, RunningServer, make_settings
from ..support.live import (
    MESSAGE_NEW,
    PROTOCOLS,
    READ_UPDATED,
    TRANSPORT_WS,
    ChatApi,
    SubscriptionError,
    WsClient,
    bearer,
    outbox_drained,
    wait_active_subscriptions,
)
from ..support.writepath import open_quiet_server

OWNER, MEMBER, REMOVED, OTHER, NEWCOMER, NON_MEMBER, FRIEND = 1, 2, 3, 4, 7, 9, 8
SECRET_TITLE = "secret-title-of-the-group"
MISSING = "987654321"  # a conversation id that does not exist

# ------------------------------------------------------------------ the world every case runs in


@dataclass
class World:
    group: str  # OWNER; MEMBER and OTHER are MEMBERs; REMOVED was one and was removed


async def build_world(api: ChatApi, *, remove: bool = True) -> World:
    group = await api.create_group(OWNER, [MEMBER, REMOVED, OTHER], title=SECRET_TITLE)
    await api.send(OWNER, group, "secret one")
    await api.send(MEMBER, group, "secret two")
    await api.mark_read(REMOVED, group, 2)
    await api.send(OWNER, group, "secret three")  # REMOVED leaves with one unread
    if remove:
        await api.remove_member(OWNER, group, REMOVED)
    return World(group)


# ------------------------------------------------------------------ operations


@dataclass(frozen=True)
class Op:
    document: str
    variables: Callable[[str, int], dict]  # (conversation id, caller id) -> variables
    targets_conversation: bool = True
    control_caller: int = MEMBER  # a caller for whom the call succeeds


def _new_key() -> str:
    return str(uuid.uuid4())


OPS: dict[str, Op] = {
    "viewer": Op("{ viewer { userId totalUnread unreadConversations } }", lambda c, u: {}, targets_conversation=False),
    "inbox": Op(
        "{ inbox(first: 50) { nodes { id title lastSeq unreadCount members { userId } } } }",
        lambda c, u: {},
        targets_conversation=False,
    ),
    "createDirectConversation": Op(
        "mutation($u: ID!) { createDirectConversation(userId: $u) { id type memberCount } }",
        lambda c, u: {"u": str(NEWCOMER)},
        targets_conversation=False,
    ),
    "createGroup": Op(
        "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id memberCount } }",
        lambda c, u: {"t": "fresh", "m": [str(NEWCOMER)]},
        targets_conversation=False,
    ),
    "conversation": Op(
        "query($c: ID!) { conversation(id: $c) { id type title lastSeq lastReadSeq unreadCount memberCount"
        " lastMessage { body } } }",
        lambda c, u: {"c": c},
    ),
    "Conversation.members": Op(
        "query($c: ID!) { conversation(id: $c) { members { userId role lastReadSeq } } }", lambda c, u: {"c": c}
    ),
    "Conversation.messages": Op(
        "query($c: ID!) { conversation(id: $c) { messages(first: 50) { nodes { seq body senderId seenBy } } } }",
        lambda c, u: {"c": c},
    ),
    "messages": Op(
        "query($c: ID!) { messages(conversationId: $c, last: 50) { nodes { seq body } pageInfo { endCursor } } }",
        lambda c, u: {"c": c},
    ),
    "sync": Op(
        "query($c: ID!) { sync(cursors: [{conversationId: $c, afterSeq: 0}]) "
        "{ conversationId messages { body } lastSeq lastReadSeq } }",
        lambda c, u: {"c": c},
    ),
    "searchMessages": Op(
        'query($c: ID!) { searchMessages(query: "secret", conversationId: $c) { nodes { seq body } } }',
        lambda c, u: {"c": c},
    ),
    "addMembers": Op(
        "mutation($c: ID!, $u: [ID!]!) { addMembers(conversationId: $c, userIds: $u) { id memberCount } }",
        lambda c, u: {"c": c, "u": [str(NEWCOMER)]},
    ),
    "removeMember(other)": Op(
        "mutation($c: ID!, $u: ID!) { removeMember(conversationId: $c, userId: $u) { conversationId userId } }",
        lambda c, u: {"c": c, "u": str(OTHER)},
        control_caller=OWNER,
    ),
    "removeMember(self)": Op(
        "mutation($c: ID!, $u: ID!) { removeMember(conversationId: $c, userId: $u) { conversationId userId } }",
        lambda c, u: {"c": c, "u": str(u)},
    ),
    "sendMessage": Op(
        "mutation($c: ID!, $k: UUID!, $b: String!) "
        "{ sendMessage(conversationId: $c, clientMsgId: $k, body: $b) { message { seq body } duplicate } }",
        lambda c, u: {"c": c, "k": _new_key(), "b": "intruder"},
    ),
    "markRead": Op(
        "mutation($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { lastReadSeq advanced unreadCount } }",
        lambda c, u: {"c": c, "s": 3},
    ),
    "pinnedMessages": Op(
        "query($c: ID!) { pinnedMessages(conversationId: $c) { seq pinnedBy message { body } } }", lambda c, u: {"c": c}
    ),
    "pinMessage": Op(
        "mutation($c: ID!) { pinMessage(conversationId: $c, seq: 1) { changeSeq pin { seq } message { body } } }",
        lambda c, u: {"c": c},
        control_caller=OWNER,  # a group's plain MEMBER may not pin (tests/graphql/test_pins.py)
    ),
    "unpinMessage": Op(
        "mutation($c: ID!) { unpinMessage(conversationId: $c, seq: 1) { changeSeq message { body } } }",
        lambda c, u: {"c": c},
        control_caller=OWNER,
    ),
    "banMember": Op(
        "mutation($c: ID!, $u: ID!) { banMember(conversationId: $c, userId: $u) { userId until } }",
        lambda c, u: {"c": c, "u": str(OTHER)},
        control_caller=OWNER,
    ),
    "setSlowMode": Op(
        "mutation($c: ID!) { setSlowMode(conversationId: $c, seconds: 5) { id slowModeSeconds } }",
        lambda c, u: {"c": c},
        control_caller=OWNER,
    ),
    "setHistoryVisibility": Op(
        "mutation($c: ID!) { setHistoryVisibility(conversationId: $c, hideHistory: true) { id hideHistory } }",
        lambda c, u: {"c": c},
        control_caller=OWNER,
    ),
    "Conversation.bans": Op(
        "query($c: ID!) { conversation(id: $c) { bans { userId reason } } }",
        lambda c, u: {"c": c},
        control_caller=OWNER,
    ),
    "reportMessage": Op(
        "mutation($c: ID!, $s: Long!) { reportMessage(conversationId: $c, seq: $s, reason: SPAM) { reportId duplicate } }",
        lambda c, u: {"c": c, "s": 1},
    ),
    "blockUser": Op(
        "mutation($u: ID!) { blockUser(userId: $u) { userId blocked changed } }",
        lambda c, u: {"u": str(FRIEND)},
        targets_conversation=False,
    ),
    "reportUser": Op(
        "mutation($u: ID!) { reportUser(userId: $u, reason: SPAM) { reportId duplicate } }",
        lambda c, u: {"u": str(FRIEND)},
        targets_conversation=False,
    ),
}
CONVERSATION_OPS = [name for name, op in OPS.items() if op.targets_conversation]


# ------------------------------------------------------------------ token problems


def _signed(claims: dict, secret: str) -> str:
    return jwt.encode(claims, secret, algorithm="HS256")


def bad_authorization(kind: str, secret: str) -> str | None:
    """The Authorization value of a caller with a token problem (None: no token at all).

    The tokens that have a sub name OWNER, a real member: they are refused for
    the token, not because the user is unknown.
    """
    now = int(time.time())
    later = now + 3600
    if kind == "no-token":
        return None
    claims = {
        "expired": {"sub": str(OWNER), "iat": now - 7200, "exp": now - 60},
        "other-key": {"sub": str(OWNER), "exp": later},
        "sub-not-a-user-id": {"sub": str(OWNER) + "\n", "exp": later},  # a control character
        "no-sub": {"exp": later},
    }[kind]
    key = "another-secret-that-is-not-the-servers-0123456789" if kind == "other-key" else secret
    return "Bearer " + _signed(claims, key)


TOKEN_KINDS = ["expired", "other-key", "sub-not-a-user-id", "no-sub", "no-token"]


def test_the_bad_tokens_differ_from_a_good_one_only_in_what_makes_them_bad():
    """Guard: the same claims signed with the server's key and in date are a valid token for OWNER."""
    from chatgql.edge.auth import user_from_authorization
    from chatgql.errors import Unauthenticated

    settings = make_settings("postgresql://unused/unused")
    secret = settings.jwt_secret.get_secret_value()
    good = "Bearer " + _signed({"sub": str(OWNER), "exp": int(time.time()) + 60}, secret)
    assert user_from_authorization(settings, good) == str(OWNER)
    for kind in TOKEN_KINDS:
        with pytest.raises(Unauthenticated):
            user_from_authorization(settings, bad_authorization(kind, secret))


# ------------------------------------------------------------------ a relay-less server on its own database


@dataclass
class Authz:
    server: RunningServer
    engine: AsyncEngine
    api: ChatApi | None = None


@pytest.fixture(scope="module")
async def authz_server(migrated_url: str) -> AsyncIterator[Authz]:
    settings = lambda url: make_settings(url, run_relay=False, request_timeout_seconds=60)  # noqa: E731
    async with open_quiet_server(migrated_url, "authz", settings) as quiet:
        yield Authz(quiet.server, quiet.engine)


@pytest.fixture
async def authz(authz_server: Authz, http: httpx.AsyncClient) -> Authz:
    async with authz_server.engine.begin() as conn:
        await conn.execute(text(f"TRUNCATE {TABLES} RESTART IDENTITY"))
    return Authz(authz_server.server, authz_server.engine, ChatApi.of(authz_server.server, http))


SNAPSHOT = {
    "conversation": "SELECT id, type, title, last_seq, last_message_at, created_at, slow_mode_seconds, hide_history"
    " FROM conversation ORDER BY id",
    "conversation_member": "SELECT conversation_id, user_id, role, last_read_seq, joined_at, visible_from_seq "
    "FROM conversation_member ORDER BY conversation_id, user_id",
    "message": "SELECT conversation_id, seq, sender_id, client_msg_id, body, created_at "
    "FROM message ORDER BY conversation_id, seq",
    "direct_pair": "SELECT user_low, user_high, conversation_id FROM direct_pair ORDER BY user_low, user_high",
    "outbox": "SELECT id, msg_key, payload FROM outbox ORDER BY id",
    "conversation_ban": "SELECT conversation_id, user_id, until, banned_by FROM conversation_ban ORDER BY 1, 2",
    "user_block": "SELECT blocker_id, blocked_id FROM user_block ORDER BY 1, 2",
    "report": "SELECT id, reporter_id, reported_user_id, conversation_id, seq FROM report ORDER BY id",
}


async def snapshot(engine: AsyncEngine) -> dict[str, list[tuple]]:
    async with engine.connect() as conn:
        return {table: [tuple(row) for row in await conn.execute(text(sql))] for table, sql in SNAPSHOT.items()}


async def call(api: ChatApi, op: Op, cid: str, caller: int, authorization: str | None) -> dict:
    headers = {} if authorization is None else {"authorization": authorization}
    response = await api.raw(op.document, op.variables(cid, caller), headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def only_error(body: dict, code: str) -> dict:
    """The one error of a refused call, with `code`, and no data at all."""
    errors = body.get("errors")
    assert errors and len(errors) == 1, body
    assert errors[0].get("extensions", {}).get("code") == code, body
    assert body.get("data") is None, body
    return errors[0]


def shape(error: dict, cid: str) -> dict:
    """The error with the conversation id written as <id> (to compare with a missing id's)."""
    error = copy.deepcopy(error)
    error["message"] = re.sub(rf"(?<!\d){re.escape(cid)}(?!\d)", "<id>", error["message"])
    error["extensions"] = {k: "<id>" if v == cid else v for k, v in error.get("extensions", {}).items()}
    return error


# ------------------------------------------------------------------ HTTP matrix


@pytest.mark.parametrize("kind", TOKEN_KINDS)
@pytest.mark.parametrize("name", list(OPS))
async def test_http_operation_with_a_token_problem_is_unauthenticated_with_no_data_and_no_writes(authz, name, kind):
    world = await build_world(authz.api)
    before = await snapshot(authz.engine)
    op = OPS[name]

    body = await call(
        authz.api, op, world.group, OWNER, bad_authorization(kind, authz.server.settings.jwt_secret.get_secret_value())
    )

    error = only_error(body, "UNAUTHENTICATED")
    assert SECRET_TITLE not in json.dumps(body) and "secret" not in error["message"]
    assert await snapshot(authz.engine) == before


@pytest.mark.parametrize("caller", [NON_MEMBER, REMOVED], ids=["non-member", "removed-member"])
@pytest.mark.parametrize("name", CONVERSATION_OPS)
async def test_http_operation_on_a_conversation_by_an_outsider_is_not_found_like_a_missing_id_and_writes_nothing(
    authz, name, caller
):
    world = await build_world(authz.api)
    before = await snapshot(authz.engine)
    op = OPS[name]
    token = f"Bearer {authz.api.token(caller)}"

    body = await call(authz.api, op, world.group, caller, token)
    missing = await call(authz.api, op, MISSING, caller, token)

    error = only_error(body, "NOT_FOUND")
    # Indistinguishable from a conversation that does not exist: ids can't be probed.
    assert shape(error, world.group) == shape(only_error(missing, "NOT_FOUND"), MISSING)
    assert "secret" not in json.dumps(body)
    assert await snapshot(authz.engine) == before


@pytest.mark.parametrize("name", list(OPS))
async def test_http_member_control_every_operation_of_the_matrix_succeeds_for_a_member(authz, name):
    """The refusals above are about the caller: the same calls succeed for a member."""
    world = await build_world(authz.api)
    op = OPS[name]
    body = await call(authz.api, op, world.group, op.control_caller, f"Bearer {authz.api.token(op.control_caller)}")
    assert "errors" not in body, body
    assert body["data"] and all(value is not None for value in body["data"].values()), body


@pytest.mark.parametrize("target", [OWNER, OTHER, NON_MEMBER], ids=["the-owner", "another-member", "a-non-member"])
async def test_http_member_without_owner_role_removing_someone_else_is_forbidden_and_removes_nobody(authz, target):
    world = await build_world(authz.api)
    before = await snapshot(authz.engine)

    body = await authz.api.execute(
        OPS["removeMember(other)"].document, {"c": world.group, "u": str(target)}, user=MEMBER
    )

    only_error(body, "FORBIDDEN")
    assert await snapshot(authz.engine) == before
    members = (
        await authz.api.data(
            "query($c: ID!) { conversation(id: $c) { members { userId role } } }", {"c": world.group}, user=OWNER
        )
    )["conversation"]["members"]
    assert members == [
        {"userId": str(OWNER), "role": "OWNER"},
        {"userId": str(MEMBER), "role": "MEMBER"},
        {"userId": str(OTHER), "role": "MEMBER"},
    ]


@pytest.mark.parametrize("caller", [NON_MEMBER, REMOVED], ids=["non-member", "removed-member"])
async def test_http_inbox_and_viewer_of_an_outsider_show_nothing_of_the_conversation(authz, caller):
    await build_world(authz.api)
    data = await authz.api.data(OPS["viewer"].document, user=caller)
    assert data["viewer"] == {"userId": str(caller), "totalUnread": 0, "unreadConversations": 0}
    data = await authz.api.data(OPS["inbox"].document, user=caller)
    assert data["inbox"]["nodes"] == []
    data = await authz.api.data('{ searchMessages(query: "secret") { nodes { body } } }', user=caller)
    assert data["searchMessages"]["nodes"] == []  # every conversation of the viewer's: not that one


async def test_http_sync_mixing_an_own_and_a_foreign_conversation_is_not_found_and_returns_nothing(authz):
    world = await build_world(authz.api)
    own = await authz.api.create_group(NON_MEMBER, [FRIEND])
    await authz.api.send(FRIEND, own, "mine")
    body = await authz.api.execute(
        "query($a: ID!, $b: ID!) { sync(cursors: [{conversationId: $a, afterSeq: 0}, {conversationId: $b, afterSeq: 0}])"
        " { conversationId messages { body } } }",
        {"a": own, "b": world.group},
        user=NON_MEMBER,
    )
    only_error(body, "NOT_FOUND")
    assert "secret" not in json.dumps(body) and "mine" not in json.dumps(body)


# ------------------------------------------------------------------ websockets (the session server: its relay feeds them)


SUBSCRIPTIONS = {
    "messageNew(conversationId)": (MESSAGE_NEW, True),
    "messageNew": (MESSAGE_NEW, False),
    # Resumable: the cursor names the conversation (replayed from the database, then live).
    "messageNew(cursors)": (
        "subscription($c: ID!) { messageNew(cursors: [{conversationId: $c, afterSeq: 0}]) "
        "{ conversationId seq message { seq senderId body } } }",
        True,
    ),
    "readUpdated(conversationId)": (READ_UPDATED, True),
    "readUpdated": (READ_UPDATED, False),
}
SCOPED = [name for name, (_, scoped) in SUBSCRIPTIONS.items() if scoped]
UNSCOPED = [name for name, (_, scoped) in SUBSCRIPTIONS.items() if not scoped]


@pytest.fixture
async def api(client, server) -> ChatApi:
    # Start from no live subscriptions: "one active" below must mean this test's own.
    await wait_active_subscriptions(server, 0)
    return ChatApi(client.http, server.url, server.settings)


def subscribe_frame(protocol: str, name: str, cid: str) -> dict:
    document, scoped = SUBSCRIPTIONS[name]
    kind = "subscribe" if protocol == TRANSPORT_WS else "start"
    return {"id": "1", "type": kind, "payload": {"query": document, "variables": {"c": cid} if scoped else {}}}


async def frames_until_closed(ws: Any, timeout: float = 15) -> list[dict]:
    frames: list[dict] = []

    async def run() -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in ws:
                frames.append(json.loads(raw))

    await asyncio.wait_for(run(), timeout)
    return frames


ACTIVITY = "secret activity"


async def make_activity(api: ChatApi, cid: str, reader: int) -> int:
    """A message.new and a read.updated in cid (reader advances to the new message); returns its seq."""
    seq = await api.send(OWNER if reader != OWNER else MEMBER, cid, ACTIVITY)
    assert (await api.mark_read(reader, cid, seq))["advanced"] is True
    return seq


async def make_sentinel(api: ChatApi, own: str, user: int) -> None:
    """A message.new and a read.updated in the outsider's own conversation."""
    seq = await api.send(FRIEND, own, "sentinel")
    assert (await api.mark_read(user, own, seq))["advanced"] is True


def event_of(data: dict) -> dict:
    return next(iter(data.values()))


@contextlib.asynccontextmanager
async def watching(server: RunningServer, group: str) -> AsyncIterator[Callable[[int, int], Any]]:
    """OWNER's subscriptions to group's messages and reads (2 live subscriptions): `await
    dispatched(seq, reader)` returns once make_activity's events (the message at seq, reader's
    watermark moved to it) have been handed to this process's subscribers. One conversation's
    events keep their order; two conversations' do not (relay shards, partitions), so a
    sentinel in another conversation proves nothing about this one until then."""
    async with await WsClient.connect(server.ws_url, bearer(server.settings, OWNER)) as ws:
        messages = await ws.subscribe(MESSAGE_NEW, {"c": group})
        reads = await ws.subscribe(READ_UPDATED, {"c": group})

        async def dispatched(seq: int, reader: int) -> None:
            await messages.collect_until(lambda got: any(event_of(e)["seq"] == seq for e in got), timeout=20)
            await reads.collect_until(
                lambda got: any((event_of(e)["userId"], event_of(e)["lastReadSeq"]) == (str(reader), seq) for e in got),
                timeout=20,
            )

        yield dispatched


def after_subscribing(events: list[dict], group: str, activity_seq: int) -> list[dict]:
    """The events of group made by the activity after the subscription (a message at activity_seq,
    or a watermark moved to it). Earlier events may still be in flight when a subscription starts;
    those happened before it and are not what the tests below are about."""
    return [
        e
        for e in events
        if e["conversationId"] == group and (e.get("seq") == activity_seq or e.get("lastReadSeq") == activity_seq)
    ]


@pytest.mark.parametrize("kind", TOKEN_KINDS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_ws_connection_init_with_a_token_problem_is_refused_4403_and_runs_no_pipelined_subscription(
    server, api, protocol, kind
):
    world = await build_world(api)
    authorization = bad_authorization(kind, server.settings.jwt_secret.get_secret_value())
    async with websockets.connect(server.ws_url, subprotocols=[protocol], proxy=None, ping_interval=None) as ws:
        payload = {} if authorization is None else {"Authorization": authorization}
        # connection_init and a subscription to OWNER's group in one flight: the second must never run.
        await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
        await ws.send(json.dumps(subscribe_frame(protocol, "messageNew(conversationId)", world.group)))
        await api.send(MEMBER, world.group, "secret while refusing")
        frames = await frames_until_closed(ws)
    types = [frame["type"] for frame in frames]
    assert not {"connection_ack", "next", "data"} & set(types), frames
    if protocol == TRANSPORT_WS:
        assert ws.close_code == 4403, (ws.close_code, frames)
        assert types == []
    else:
        # The legacy protocol has no refusal close code: connection_error, then close.
        assert types == ["connection_error"], frames
        assert frames[0]["payload"]["code"] == "UNAUTHENTICATED"
        assert ws.close_code is not None and ws.close_code != 1000
    assert "secret" not in json.dumps(frames)


@pytest.mark.parametrize("name", list(SUBSCRIPTIONS))
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_ws_subscribe_without_connection_init_is_closed_4401_unauthorized(server, api, protocol, name):
    world = await build_world(api, remove=False)
    async with websockets.connect(server.ws_url, subprotocols=[protocol], proxy=None, ping_interval=None) as ws:
        assert ws.subprotocol == protocol
        await ws.send(json.dumps(subscribe_frame(protocol, name, world.group)))
        await make_activity(api, world.group, MEMBER)
        frames = await frames_until_closed(ws)
    assert ws.close_code == 4401, (ws.close_code, frames)
    assert ws.close_reason == "Unauthorized"
    assert frames == []


async def test_ws_a_valid_connection_does_receive_the_activity_the_refusals_above_do_not(server, api, engine):
    """Control: the same subscription and activity reach a member who connects properly."""
    world = await build_world(api, remove=False)
    await outbox_drained(engine, 20)  # the world's own events are out
    async with await WsClient.connect(server.ws_url, bearer(server.settings, OWNER)) as ws:
        op = await ws.subscribe(MESSAGE_NEW, {"c": world.group})
        await wait_active_subscriptions(server, 1)
        seq = await make_activity(api, world.group, MEMBER)
        events = await op.collect_until(lambda got: any(event_of(e)["seq"] == seq for e in got), timeout=20)
    event = event_of(events[-1])
    assert event["conversationId"] == world.group and event["message"]["body"] == ACTIVITY


@pytest.mark.parametrize("caller", [NON_MEMBER, REMOVED], ids=["non-member", "removed-member"])
@pytest.mark.parametrize("name", SCOPED)
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_ws_subscription_to_a_conversation_by_an_outsider_is_not_found_like_a_missing_id(
    server, api, protocol, name, caller
):
    world = await build_world(api)
    document, _ = SUBSCRIPTIONS[name]
    async with await WsClient.connect(server.ws_url, bearer(server.settings, caller), protocol=protocol) as ws:
        refused = await ws.subscribe(document, {"c": world.group})
        with pytest.raises(SubscriptionError) as raised:
            await refused.next(timeout=15)
        missing = await ws.subscribe(document, {"c": MISSING})
        with pytest.raises(SubscriptionError) as raised_missing:
            await missing.next(timeout=15)
    assert raised.value.code == "NOT_FOUND"
    assert len(raised.value.errors) == 1
    assert shape(raised.value.errors[0], world.group) == shape(raised_missing.value.errors[0], MISSING)
    assert "secret" not in json.dumps(raised.value.errors)


@pytest.mark.parametrize("caller", [NON_MEMBER, REMOVED], ids=["non-member", "removed-member"])
@pytest.mark.parametrize("name", UNSCOPED)
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_ws_all_conversations_subscription_of_an_outsider_never_carries_that_conversations_events(
    server, api, engine, protocol, name, caller
):
    world = await build_world(api)
    own = await api.create_group(FRIEND, [caller])
    await outbox_drained(engine, 20)  # the world's own events are out
    document, _ = SUBSCRIPTIONS[name]
    async with (
        await WsClient.connect(server.ws_url, bearer(server.settings, caller), protocol=protocol) as ws,
        watching(server, world.group) as dispatched,
    ):
        op = await ws.subscribe(document, {})
        await wait_active_subscriptions(server, 3)
        seq = await make_activity(api, world.group, MEMBER)
        await dispatched(seq, MEMBER)  # then anything of it for the caller is queued before the sentinel
        await make_sentinel(api, own, caller)
        got = [
            event_of(e)
            for e in await op.collect_until(
                lambda events: any(event_of(e)["conversationId"] == own for e in events), timeout=20
            )
        ]
    assert after_subscribing(got, world.group, seq) == [], got
    if caller == NON_MEMBER:
        assert [e for e in got if e["conversationId"] == world.group] == [], got  # never a member: nothing ever


@pytest.mark.parametrize("scoped", [True, False], ids=["with-conversationId", "all-conversations"])
@pytest.mark.parametrize("document", [MESSAGE_NEW, READ_UPDATED], ids=["messageNew", "readUpdated"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_ws_a_member_removed_while_subscribed_gets_no_later_events_of_the_conversation(
    server, api, engine, protocol, document, scoped
):
    world = await build_world(api, remove=False)
    own = await api.create_group(FRIEND, [OTHER])
    await outbox_drained(engine, 20)  # the world's own events are out
    async with (
        await WsClient.connect(server.ws_url, bearer(server.settings, OTHER), protocol=protocol) as ws,
        watching(server, world.group) as dispatched,
    ):
        op = await ws.subscribe(document, {"c": world.group} if scoped else {})
        await wait_active_subscriptions(server, 3)
        await api.remove_member(OWNER, world.group, OTHER)
        seq = await make_activity(api, world.group, MEMBER)
        if scoped:
            # The conversation is gone for them: the subscription ends NOT_FOUND, with nothing after.
            error = await op.error(timeout=20)
            assert error.code == "NOT_FOUND"
            assert after_subscribing([event_of(e) for e in error.skipped], world.group, seq) == []
        else:
            await dispatched(seq, MEMBER)  # then anything of it for OTHER is queued before the sentinel
            await make_sentinel(api, own, OTHER)
            got = [
                event_of(e)
                for e in await op.collect_until(
                    lambda events: any(event_of(e)["conversationId"] == own for e in events), timeout=20
                )
            ]
            assert after_subscribing(got, world.group, seq) == [], got
