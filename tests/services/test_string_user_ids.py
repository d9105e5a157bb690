"""User ids are the identity provider's subjects: opaque strings of 1..255 characters (issue 22, item 1).

A UUID (Keycloak, Supabase, Cognito), an Auth0 subject (`auth0|…`), a Clerk id (`user_…`) and a
255-character id each go through createConversation, sendMessage, markRead, the inbox, node ids and a
subscription's events exactly as given; a user id of 256 characters, an empty one, or one with a
control character is refused with BAD_USER_INPUT (an argument) or UNAUTHENTICATED (a token's sub),
writing nothing. A decimal id is one string among others ("7"), as it always was on the wire.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import jwt
import pytest
from sqlalchemy import text

from chatgql.events import types as events
from chatgql.graphql import ids
from chatgql.services.checks import MAX_USER_ID_CHARS, check_user_id
from tests.conftest import GraphQLClient, error_code
from tests.support.live import READ_UPDATED, subscribe_messages, ws_connect

UUID_USER = "3f9b2c1e-7d4a-4e8f-9a6b-0c5d1e2f3a4b"
AUTH0_USER = "auth0|5f7c8ec7c33c6c004bbafe82"
CLERK_USER = "user_2NNEqL2nrIRdJ194ndJqAHwEfxC"
LONG_USER = "x" * 254 + "é"  # 255 characters, 256 bytes in UTF-8
COLON_USER = "oidc:tenant:42"  # a ':' in a user id: node ids still parse
STRING_USERS = [UUID_USER, AUTH0_USER, CLERK_USER, LONG_USER, COLON_USER]
BAD_USER_IDS = {
    "256-chars": "u" * 256,
    "empty": "",
    "newline": "auth0|a\nb",
    "nul": "user_\x00",
    "escape": "\x1b[31mred",
    "del": "a\x7f",
    "c1": "a\x85",
}

CREATE_GROUP = (
    "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id members { id userId role } } }"
)
CREATE_DIRECT = "mutation($u: ID!) { createDirectConversation(userId: $u) { id members { userId } } }"
ADD = "mutation($c: ID!, $u: [ID!]!) { addMembers(conversationId: $c, userIds: $u) { id memberCount } }"
REMOVE = "mutation($c: ID!, $u: ID!) { removeMember(conversationId: $c, userId: $u) { userId } }"
SEND = """
mutation($c: ID!, $m: UUID!, $b: String!, $mentions: [ID!]) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: $b, mentions: $mentions) {
    message { seq senderId mentions }
  }
}
"""
MARK_READ = "mutation($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { lastReadSeq unreadCount } }"
INBOX = "{ viewer { id userId totalUnread } inbox(first: 10) { nodes { id unreadCount lastMessage { senderId } } } }"
MESSAGES = "query($c: ID!) { messages(conversationId: $c, last: 5) { nodes { seq senderId seenBy seenByCount } } }"
NODE = "query($id: ID!) { node(id: $id) { id ... on Member { userId role } ... on Viewer { userId } } }"


def _token(client: GraphQLClient, sub: object) -> dict:
    signed = jwt.encode(
        {"sub": sub, "exp": int(time.time()) + 600}, client.settings.jwt_secret.get_secret_value(), algorithm="HS256"
    )
    return {"authorization": f"Bearer {signed}"}


async def test_string_user_ids_flow_through_every_operation_and_event(client, server):
    owner, *others = STRING_USERS
    created = (await client.data(CREATE_GROUP, {"t": "ids", "m": others}, user=owner))["createGroup"]
    cid = created["id"]
    members = {m["userId"]: m for m in created["members"]}
    assert set(members) == set(STRING_USERS)
    assert [m["userId"] for m in created["members"]] == sorted(STRING_USERS)  # text order, byte by byte
    assert members[owner]["role"] == "OWNER"
    # a Member's node id names the user as given, and reads back
    for user in STRING_USERS:
        found = (await client.data(NODE, {"id": members[user]["id"]}, user=CLERK_USER))["node"]
        assert found == {"id": members[user]["id"], "userId": user, "role": members[user]["role"]}

    async with await ws_connect(server, LONG_USER) as ws:
        messages = await subscribe_messages(ws, cid)
        reads = await ws.subscribe(READ_UPDATED, {"c": cid})
        sent = await client.data(
            SEND, {"c": cid, "m": str(uuid.uuid4()), "b": "hello", "mentions": [LONG_USER, AUTH0_USER]}, user=UUID_USER
        )
        message = sent["sendMessage"]["message"]
        assert message["senderId"] == UUID_USER
        assert message["mentions"] == sorted([LONG_USER, AUTH0_USER])
        event = await messages.next()
        assert event["messageNew"]["message"]["senderId"] == UUID_USER

        read = (await client.data(MARK_READ, {"c": cid, "s": message["seq"]}, user=AUTH0_USER))["markRead"]
        assert read == {"lastReadSeq": 1, "unreadCount": 0}
        seen = await reads.next()
        assert seen["readUpdated"] == {"conversationId": cid, "userId": AUTH0_USER, "lastReadSeq": 1}

    page = (await client.data(MESSAGES, {"c": cid}, user=LONG_USER))["messages"]["nodes"]
    assert page == [{"seq": 1, "senderId": UUID_USER, "seenBy": [AUTH0_USER], "seenByCount": 1}]
    inbox = await client.data(INBOX, user=LONG_USER)
    assert inbox["viewer"]["userId"] == LONG_USER
    assert inbox["viewer"]["totalUnread"] == 1
    assert inbox["inbox"]["nodes"] == [{"id": cid, "unreadCount": 1, "lastMessage": {"senderId": UUID_USER}}]
    viewer_node = (await client.data(NODE, {"id": inbox["viewer"]["id"]}, user=LONG_USER))["node"]
    assert viewer_node == {"id": inbox["viewer"]["id"], "userId": LONG_USER}
    assert (await client.data(NODE, {"id": inbox["viewer"]["id"]}, user=UUID_USER))["node"] is None

    removed = await client.data(REMOVE, {"c": cid, "u": COLON_USER}, user=owner)
    assert removed["removeMember"]["userId"] == COLON_USER


async def test_a_direct_conversation_of_two_string_ids_is_one_conversation_from_either_side(client, engine):
    first = (await client.data(CREATE_DIRECT, {"u": UUID_USER}, user=AUTH0_USER))["createDirectConversation"]
    again = (await client.data(CREATE_DIRECT, {"u": AUTH0_USER}, user=UUID_USER))["createDirectConversation"]
    assert first["id"] == again["id"]
    assert [m["userId"] for m in first["members"]] == sorted([UUID_USER, AUTH0_USER])
    async with engine.connect() as conn:
        pair = (await conn.execute(text("SELECT user_low, user_high FROM direct_pair"))).one()
    assert tuple(pair) == tuple(sorted([UUID_USER, AUTH0_USER]))


async def test_user_ids_compare_exactly_case_and_spaces_included(client):
    cid = (await client.data(CREATE_GROUP, {"t": "g", "m": ["Alice", " alice", "alice "]}, user="alice"))[
        "createGroup"
    ]["id"]
    count = await client.data("query($c: ID!) { conversation(id: $c) { memberCount } }", {"c": cid}, user="alice")
    assert count["conversation"]["memberCount"] == 4
    denied = await client.error("query($c: ID!) { conversation(id: $c) { id } }", {"c": cid}, user="ALICE")
    assert error_code(denied) == "NOT_FOUND"


@pytest.mark.parametrize("bad", list(BAD_USER_IDS.values()), ids=list(BAD_USER_IDS))
async def test_a_bad_user_id_argument_is_bad_user_input_and_writes_nothing(client, engine, bad):
    assert error_code(await client.error(CREATE_DIRECT, {"u": bad}, user=AUTH0_USER)) == "BAD_USER_INPUT"
    assert error_code(await client.error(CREATE_GROUP, {"t": "g", "m": [UUID_USER, bad]}, user=AUTH0_USER)) == (
        "BAD_USER_INPUT"
    )
    cid = (await client.data(CREATE_GROUP, {"t": "g", "m": [UUID_USER]}, user=AUTH0_USER))["createGroup"]["id"]
    assert error_code(await client.error(ADD, {"c": cid, "u": [CLERK_USER, bad]}, user=AUTH0_USER)) == "BAD_USER_INPUT"
    assert error_code(await client.error(REMOVE, {"c": cid, "u": bad}, user=AUTH0_USER)) == "BAD_USER_INPUT"
    sent = await client.execute(SEND, {"c": cid, "m": str(uuid.uuid4()), "b": "x", "mentions": [bad]}, user=AUTH0_USER)
    assert [error_code(e) for e in sent["errors"]] == ["BAD_USER_INPUT"]
    async with engine.connect() as conn:
        counts = (
            await conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM conversation), (SELECT count(*) FROM conversation_member),"
                    " (SELECT count(*) FROM message), (SELECT count(*) FROM direct_pair)"
                )
            )
        ).one()
    assert tuple(counts) == (1, 2, 0, 0)  # the one group made above, nothing else


@pytest.mark.parametrize("bad", list(BAD_USER_IDS.values()), ids=list(BAD_USER_IDS))
async def test_a_token_whose_sub_is_not_a_user_id_is_unauthenticated(client, bad):
    body = await client.execute(INBOX, headers=_token(client, bad))
    assert [error_code(e) for e in body["errors"]] == ["UNAUTHENTICATED"]
    assert body["data"] is None


async def test_a_255_character_sub_is_a_user_id(client):
    assert (await client.execute(INBOX, headers=_token(client, LONG_USER)))["data"]["viewer"]["userId"] == LONG_USER


def test_check_user_id_takes_1_to_255_characters_without_control_characters():
    assert MAX_USER_ID_CHARS == 255
    for user in [*STRING_USERS, "7", "x" * 255, "日本語", "a b"]:
        assert check_user_id(user) == user
    for bad in [*BAD_USER_IDS.values(), "\ud800", 7, None]:
        with pytest.raises(Exception) as raised:
            check_user_id(bad)
        assert getattr(raised.value, "code", None) == "BAD_USER_INPUT"


def test_node_ids_of_decimal_users_are_those_of_before_and_string_users_round_trip():
    # The texts every client of before holds (base64 of "Member:12:7", "Viewer:7"): unchanged.
    assert ids.member_id(12, "7") == "TWVtYmVyOjEyOjc"
    assert ids.viewer_id("7") == "Vmlld2VyOjc"
    assert ids.parse("TWVtYmVyOjEyOjc") == ids.GlobalId("Member", (12,), "7")
    for user in STRING_USERS:
        assert ids.parse(ids.member_id(12, user)) == ids.GlobalId("Member", (12,), user)
        assert ids.parse(ids.viewer_id(user)) == ids.GlobalId("Viewer", (), user)
    assert ids.parse(ids.member_id(12, "u" * 256)) is None  # not a user id: no object


def test_an_event_written_before_text_user_ids_names_the_same_users():
    """An outbox row or Kafka record of before 0014_text_user_ids carries numbers: read as their text."""
    old = {"type": "member.added", "conversationId": 3, "userIds": [7, 10]}
    assert events.parse(dict(old)) == events.MembersAdded(conversation_id=3, user_ids=["7", "10"])
    assert events.with_text_user_ids(dict(old))["userIds"] == ["7", "10"]
    new = {"type": "read.updated", "conversationId": 3, "userId": 7, "lastReadSeq": 2}
    assert events.with_text_user_ids(new) == {
        "type": "read.updated",
        "conversationId": 3,
        "userId": "7",
        "lastReadSeq": 2,
    }
    message = {
        "type": "message.new",
        "conversationId": 3,
        "senderId": 12,
        "clientMsgId": str(uuid.uuid4()),
        "body": "b",
        "seq": 1,
        "createdAt": "2026-12-02T00:00:00+00:00",
    }
    assert events.parse(message).sender_id == "12"
    deleted = {**message, "type": "message.deleted", "changeSeq": 1, "userId": 12, "deletedBy": 12}
    parsed = events.parse(events.with_text_user_ids(deleted))
    assert (parsed.user_id, parsed.deleted_by, parsed.sender_id) == ("12", "12", "12")  # type: ignore[attr-defined]
    assert events.with_text_user_ids({"type": "unknown", "userId": 1}) == {"type": "unknown", "userId": 1}


async def test_the_dispatcher_routes_an_event_of_before_by_its_numeric_ids_as_text():
    """A membership.updated of before (userId 7, a number) reaches user "7"'s own subscription only."""
    from chatgql.events.dispatch import Dispatcher, MembershipCache

    async def members(conversation_id: int, subscribed: list[str]) -> tuple[int, list[str]]:
        return 2, ["7", "8"]

    dispatcher = Dispatcher(MembershipCache(members), buffer=10)
    old = {"type": "membership.updated", "conversationId": 1, "userId": 7, "muted": True}
    old.update(archived=False, pinned=False, lastReadSeq=0)
    async with (
        dispatcher.subscribe("7", 1, events.MEMBERSHIP_UPDATED) as mine,
        dispatcher.subscribe("8", 1, events.MEMBERSHIP_UPDATED) as theirs,
    ):
        await dispatcher.dispatch(dict(old))
        await dispatcher.dispatch({**old, "userId": "8", "muted": False})  # one of after, for 8
        got = await asyncio.wait_for(anext(mine), 5)
        assert got["userId"] == "7"
        assert events.parse(got).user_id == "7"  # type: ignore[attr-defined]
        # 8's first event is its own: the one of before was never offered to 8
        assert (await asyncio.wait_for(anext(theirs), 5))["userId"] == "8"
