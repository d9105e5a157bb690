"""Drafts: one per member per conversation and per thread (the replyTo it will be sent with), saved from
any device and read back by the member's others (drafts, draftUpdated), never by anyone else; cleared by
the member's own send to the same place without a statement on the send path; erased with the user.
Against the session's chatgql and its PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import text

from chatgql.services.erase import erase_user

from ..conftest import error_code
from ..support.live import (
    ChatApi,
    ConnectionRefused,
    SubscriptionError,
    WsClient,
    bearer,
    wait_active_subscriptions,
)
from .test_query_count import counting_statements

SAVE = """
mutation($c: ID!, $b: String!, $r: Long) {
  saveDraft(conversationId: $c, body: $b, replyTo: $r) { conversationId replyTo body baseSeq version updatedAt }
}
"""
DRAFTS = "query($cs: [ID!]) { drafts(conversationIds: $cs) { conversationId replyTo body baseSeq version } }"
UPDATED = "subscription($c: ID) { draftUpdated(conversationId: $c) { conversationId replyTo body version } }"
SEND = """
mutation($c: ID!, $m: UUID!, $b: String!, $r: ID) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: $b, replyTo: $r) { message { seq } }
}
"""
MESSAGE_ID = "query($c: ID!) { messages(conversationId: $c, last: 50) { nodes { id seq } } }"
ROLE = "mutation($c: ID!, $u: ID!) { setMemberRole(conversationId: $c, userId: $u, role: ADMIN) { role } }"
MARK_READ = "mutation($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { lastReadSeq } }"


def users(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:10]
    return [f"drf-{tag}-{i}" for i in range(n)]


async def group(api: ChatApi, owner: str, admin: str, *members: str) -> str:
    """A group: owner, admin (ADMIN) and members."""
    cid = await api.create_group(owner, [admin, *members])  # type: ignore[arg-type]
    await api.data(ROLE, {"c": cid, "u": admin}, user=owner)
    return cid


async def save(api: ChatApi, user: str, cid: str, body: str, reply_to: int | None = None) -> dict | None:
    return (await api.data(SAVE, {"c": cid, "b": body, "r": reply_to}, user=user))["saveDraft"]


async def drafts(api: ChatApi, user: str, cids: list[str] | None = None) -> list[tuple]:
    found = (await api.data(DRAFTS, {"cs": cids}, user=user))["drafts"]
    return [(d["conversationId"], d["replyTo"], d["body"]) for d in found]


async def send(api: ChatApi, user: str, cid: str, body: str, reply_to: int | None = None) -> int:
    reply_id = None
    if reply_to is not None:
        nodes = (await api.data(MESSAGE_ID, {"c": cid}, user=user))["messages"]["nodes"]
        reply_id = next(n["id"] for n in nodes if n["seq"] == reply_to)
    data = await api.data(SEND, {"c": cid, "m": str(uuid.uuid4()), "b": body, "r": reply_id}, user=user)
    return data["sendMessage"]["message"]["seq"]


async def count(engine, user: str) -> int:
    async with engine.connect() as conn:
        query = text("SELECT count(*) FROM message_draft WHERE user_id = :u")
        return (await conn.execute(query, {"u": user})).scalar()


async def test_a_draft_per_conversation_and_thread_is_cleared_by_the_members_own_send_to_the_same_place(api, clock):
    owner, admin, member = users(3)
    cid = await group(api, owner, admin, member)
    await send(api, owner, cid, "root")  # seq 1: a thread's root
    first = await save(api, member, cid, "hel")
    assert first == {
        "conversationId": cid,
        "replyTo": None,
        "body": "hel",
        "baseSeq": 1,
        "version": 1,
        "updatedAt": clock.now.isoformat(),
    }
    clock.advance(seconds=2)
    second = await save(api, member, cid, "hello")
    assert (second["version"], second["updatedAt"]) == (2, clock.now.isoformat())  # the newest save wins
    clock.advance(seconds=1)
    assert (await save(api, member, cid, "in the thread", reply_to=1))["replyTo"] == 1
    assert await drafts(api, member) == [(cid, 1, "in the thread"), (cid, None, "hello")]  # newest first
    assert await drafts(api, member, [cid]) == await drafts(api, member)
    await send(api, owner, cid, "someone else writes")  # seq 2: the member's drafts stay
    await send(api, member, cid, "a reply", reply_to=1)  # seq 3: clears the thread's draft only
    assert await drafts(api, member) == [(cid, None, "hello")]
    await send(api, member, cid, "hello")  # seq 4: clears the conversation's
    assert await drafts(api, member) == []
    again = await save(api, member, cid, "next")  # after the send: shown
    assert (again["baseSeq"], again["version"]) == (4, 3)
    assert await drafts(api, member) == [(cid, None, "next")]
    cleared = await save(api, member, cid, "")  # body "": cleared
    assert (cleared["body"], cleared["version"]) == ("", 4)
    assert await drafts(api, member) == []
    assert await save(api, member, cid, "   ", reply_to=3) is None  # nothing to clear: nothing written
    # a blank body clears as "" does; the thread draft of a message that is not there: refused
    bad = await api.error(SAVE, {"c": cid, "b": "x", "r": 99}, user=member)
    assert error_code(bad) == "BAD_USER_INPUT" and bad["extensions"]["reason"] == "REPLY_TO_NOT_FOUND"
    assert error_code(await api.error(SAVE, {"c": cid, "b": "x", "r": 0}, user=member)) == "BAD_USER_INPUT"
    assert error_code(await api.error(SAVE, {"c": cid, "b": "x" * 100_000}, user=member)) == "BAD_USER_INPUT"
    assert error_code(await api.error(SAVE, {"c": cid, "b": "a\x00b"}, user=member)) == "BAD_USER_INPUT"
    assert await drafts(api, member) == []


async def test_drafts_are_their_members_alone_owner_admin_member_other_user_anonymous(api, engine):
    owner, admin, member, other = users(4)
    cid = await group(api, owner, admin, member)
    for user in (owner, admin, member):  # every member has their own
        await save(api, user, cid, f"draft of {user}")
    for user in (owner, admin, member):
        assert await drafts(api, user) == [(cid, None, f"draft of {user}")]  # never another's
        assert await drafts(api, user, [cid]) == [(cid, None, f"draft of {user}")]
    assert await drafts(api, other, [cid]) == []  # not a member: nothing, whatever they name
    assert error_code(await api.error(SAVE, {"c": cid, "b": "x"}, user=other)) == "NOT_FOUND"
    assert error_code(await api.error(SAVE, {"c": cid, "b": "x"})) == "UNAUTHENTICATED"
    assert error_code(await api.error(DRAFTS, {"cs": None})) == "UNAUTHENTICATED"
    assert await count(engine, other) == 0
    assert error_code(await api.error(DRAFTS, {"cs": ["not-an-id"]}, user=member)) == "BAD_USER_INPUT"
    await api.remove_member(owner, cid, member)  # type: ignore[arg-type]
    assert await drafts(api, member) == []  # out of the group: its draft is not shown
    assert error_code(await api.error(SAVE, {"c": cid, "b": "x"}, user=member)) == "NOT_FOUND"


async def test_drafts_reach_the_members_other_devices_live_and_nobody_else(server, api):
    owner, admin, member, other = users(4)
    cid = await group(api, owner, admin, member)
    phone = await WsClient.connect(server.ws_url, _bearer(server, member))
    laptop = await WsClient.connect(server.ws_url, _bearer(server, member))
    watchers = [await WsClient.connect(server.ws_url, _bearer(server, u)) for u in (owner, admin, other)]
    try:
        denied = await watchers[2].subscribe(UPDATED, {"c": cid})
        assert (await denied.error()).code == "NOT_FOUND"  # not a member
        on_phone = await phone.subscribe(UPDATED, {"c": cid})
        on_laptop = await laptop.subscribe(UPDATED, {})  # every conversation of theirs
        owners = await watchers[0].subscribe(UPDATED, {"c": cid})
        admins = await watchers[1].subscribe(UPDATED, {})
        others = await watchers[2].subscribe(UPDATED, {})
        await wait_active_subscriptions(server, 5)
        await save(api, member, cid, "typed on the laptop")
        await save(api, member, cid, "")
        for sub in (on_phone, on_laptop):
            got = [e["draftUpdated"] for e in await sub.collect(2, timeout=20)]
            assert [(d["conversationId"], d["body"], d["version"]) for d in got] == [
                (cid, "typed on the laptop", 1),
                (cid, "", 2),
            ]
        # the others got nothing of the member's: the first event each gets is their own
        await save(api, owner, cid, "owner's")
        await save(api, admin, cid, "admin's")
        assert (await owners.next())["draftUpdated"]["body"] == "owner's"
        assert (await admins.next())["draftUpdated"]["body"] == "admin's"
        direct = (
            await api.data(
                "mutation($u: ID!) { createDirectConversation(userId: $u) { id } }", {"u": member}, user=other
            )
        )["createDirectConversation"]["id"]
        await save(api, other, direct, "other's")
        assert (await others.next())["draftUpdated"]["body"] == "other's"
    finally:
        for client in (phone, laptop, *watchers):
            await client.close()
    with pytest.raises((ConnectionRefused, SubscriptionError)):  # anonymous: no subscription
        anonymous = await WsClient.connect(server.ws_url, None)
        try:
            await (await anonymous.subscribe(UPDATED, {})).next(timeout=10)
        finally:
            await anonymous.close()


def _bearer(server, user: str) -> str:
    return bearer(server.settings, user)  # type: ignore[arg-type]


async def test_a_draft_adds_no_statement_to_the_plain_send_or_markread(server, api):
    """The send path reads nothing of drafts: a send and a markRead run the same statements whether the
    member has a draft there or not."""
    owner, member = users(2)
    with_draft = await api.create_group(owner, [member])  # type: ignore[arg-type]
    without = await api.create_group(owner, [member])  # type: ignore[arg-type]
    for cid in (with_draft, without):
        await send(api, owner, cid, "warm")
    await save(api, member, with_draft, "unsent text")

    async def statements(cid: str) -> list[str]:
        with counting_statements(server) as seen:
            await send(api, member, cid, "sent")
            seq = await send(api, owner, cid, "to read")
            await api.data(MARK_READ, {"c": cid, "s": seq}, user=member)
            await asyncio.sleep(0.05)  # asyncpg's query loggers run on the loop's next turns
        assert any("chat_send" in statement for statement in seen)  # the send was counted
        return seen

    assert await statements(with_draft) == await statements(without)
    assert not any("message_draft" in s for s in await statements(with_draft))
    assert await drafts(api, member) == []  # and the send cleared it


async def test_erasing_a_user_deletes_their_drafts(server, api, engine):
    owner, member = users(2)
    cid = await api.create_group(owner, [member])  # type: ignore[arg-type]
    await save(api, member, cid, "private")
    await save(api, owner, cid, "the owner's")
    await erase_user(server.runtime.deps.database, member)
    assert await count(engine, member) == 0
    assert await drafts(api, owner) == [(cid, None, "the owner's")]
