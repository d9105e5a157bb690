"""Slow mode (services/moderation.py, chat_send in migration 0019_slow_mode): a group's OWNER or an
ADMIN sets it; a MEMBER then sends at most one message every slowModeSeconds, the OWNER and ADMINs
are exempt, and a send too soon is LIMIT_EXCEEDED (reason SLOW_MODE, retryAfter) with nothing stored.

Time is the database's clock, under the conversation's lock: the tests move a member's last send
into the past (conversation_member.last_sent_at) instead of waiting. The racing sends come from
two pools (two "processes") and through group commit, and exactly one of a member's sends is stored.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from chatgql.db import Database
from chatgql.errors import LimitExceeded
from chatgql.services.conversations import do_create_group
from chatgql.services.groupcommit import SendBatcher
from chatgql.services.messages import do_send_message
from chatgql.services.moderation import do_set_slow_mode
from tests.conftest import error_code
from tests.support.live import ChatApi, wait_active_subscriptions, ws_connect

SET = "mutation($c: ID!, $s: Int!) { setSlowMode(conversationId: $c, seconds: $s) { id slowModeSeconds } }"
SEND = (
    "mutation($c: ID!, $m: UUID!, $b: String!) "
    "{ sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { seq } duplicate } }"
)
SET_ROLE = "mutation($c: ID!, $u: ID!) { setMemberRole(conversationId: $c, userId: $u, role: ADMIN) { role } }"
SLOW = "query($c: ID!) { conversation(id: $c) { slowModeSeconds lastSeq } }"
INBOX = "{ inbox { nodes { id slowModeSeconds } } }"
EVENTS = "subscription { conversationUpdated { conversationId change userId memberId role conversation { slowModeSeconds } } }"


async def send(api: ChatApi, user: int, cid: str, key: str | None = None, body: str = "hi") -> dict:
    return await api.execute(SEND, {"c": cid, "m": key or str(uuid.uuid4()), "b": body}, user=user)


def refusal(body: dict) -> dict:
    (error,) = body["errors"]
    assert body["data"] is None
    return error["extensions"]


async def age_last_send(engine, cid: str, user: int, seconds: int) -> None:
    """The member's last send `seconds` earlier, as if that much time had passed."""
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE conversation_member SET last_sent_at = last_sent_at - make_interval(secs => :s)"
                " WHERE conversation_id = :c AND user_id = :u"
            ),
            {"s": seconds, "c": int(cid), "u": str(user)},
        )


async def test_a_member_sends_once_per_interval_admins_and_the_owner_are_exempt(api, engine):
    cid = await api.create_group(1, [2, 3])
    await api.data(SET_ROLE, {"c": cid, "u": "3"}, user=1)
    assert (await api.data(SET, {"c": cid, "s": 3600}, user=1))["setSlowMode"] == {"id": cid, "slowModeSeconds": 3600}
    assert (await api.data(SLOW, {"c": cid}, user=2))["conversation"]["slowModeSeconds"] == 3600
    assert (await api.data(INBOX, user=2))["inbox"]["nodes"] == [{"id": cid, "slowModeSeconds": 3600}]
    first = str(uuid.uuid4())
    assert "errors" not in await send(api, 2, cid, first, "first")
    too_soon = refusal(await send(api, 2, cid, body="second"))
    assert too_soon["code"] == "LIMIT_EXCEEDED" and too_soon["reason"] == "SLOW_MODE"
    assert 3500 <= too_soon["retryAfter"] <= 3600
    # a retry of the stored message is not a new send: the same message, duplicate
    assert (await send(api, 2, cid, first, "first"))["data"]["sendMessage"] == {
        "message": {"seq": 1},
        "duplicate": True,
    }
    for exempt in (1, 3, 1, 3):
        assert "errors" not in await send(api, exempt, cid)
    assert (await api.data(SLOW, {"c": cid}, user=1))["conversation"]["lastSeq"] == 5  # the refused one: nothing
    await age_last_send(engine, cid, 2, 3000)
    retry_after = refusal(await send(api, 2, cid))["retryAfter"]
    assert 1 <= retry_after <= 600  # counted from the send 3000 s ago
    await age_last_send(engine, cid, 2, 600)
    assert (await send(api, 2, cid))["data"]["sendMessage"]["message"]["seq"] == 6
    assert refusal(await send(api, 2, cid))["reason"] == "SLOW_MODE"  # counted from that send now
    await api.data(SET, {"c": cid, "s": 0}, user=3)  # an ADMIN turns it off
    assert [(await send(api, 2, cid))["data"]["sendMessage"]["message"]["seq"] for _ in range(2)] == [7, 8]


async def test_who_may_set_slow_mode_and_bad_values(api):
    cid = await api.create_group(1, [2])
    member = await api.execute(SET, {"c": cid, "s": 10}, user=2)
    assert refusal(member)["code"] == "FORBIDDEN" and refusal(member)["reason"] == "NOT_GROUP_ADMIN"
    assert refusal(await api.execute(SET, {"c": cid, "s": 10}, user=9))["code"] == "NOT_FOUND"
    for bad in (-1, 3601):
        assert refusal(await api.execute(SET, {"c": cid, "s": bad}, user=1))["code"] == "BAD_USER_INPUT"
    dm = (await api.data('mutation { createDirectConversation(userId: "4") { id } }', user=3))[
        "createDirectConversation"
    ]["id"]
    assert refusal(await api.execute(SET, {"c": dm, "s": 10}, user=3))["code"] == "FORBIDDEN"
    assert (await api.data(SLOW, {"c": cid}, user=1))["conversation"]["slowModeSeconds"] == 0
    assert error_code(await api.error(SLOW, {"c": cid}, user=9)) == "NOT_FOUND"


async def test_the_members_are_told_when_the_settings_change(server, api):
    cid = await api.create_group(1, [2])
    client = await ws_connect(server, 2)
    try:
        op = await client.subscribe(EVENTS, {})
        await wait_active_subscriptions(server, 1)
        await api.data(SET, {"c": cid, "s": 30}, user=1)
        await api.data(SET, {"c": cid, "s": 30}, user=1)  # no change: no event
        await api.data(SET, {"c": cid, "s": 0}, user=1)
        got = [e["conversationUpdated"] for e in await op.collect(2)]
        told = {"conversationId": cid, "change": "SETTINGS_CHANGED", "userId": "1", "memberId": "1", "role": "OWNER"}
        # each event's conversation is read when it is delivered: the setting as it is then
        assert [{k: v for k, v in e.items() if k != "conversation"} for e in got] == [told, told]
        assert got[1]["conversation"] == {"slowModeSeconds": 0}
    finally:
        await client.close()


@pytest.fixture
async def two_pools(migrated_url: str) -> AsyncIterator[tuple[Database, Database]]:
    one, two = Database(migrated_url, max_size=6), Database(migrated_url, max_size=6)
    await one.open()
    await two.open()
    try:
        yield one, two
    finally:
        await one.close()
        await two.close()


@pytest.mark.parametrize("batched", [False, True], ids=["alone", "group-commit"])
async def test_racing_sends_of_one_member_from_two_processes_store_exactly_one(two_pools, batched):
    one, two = two_pools
    cid = await do_create_group(one, "1", "g", ["2", "3"], max_members=10)
    await do_set_slow_mode(one, "1", cid, 60)
    batchers = [SendBatcher(db, max_batch=8) if batched else None for db in two_pools]

    async def attempt(k: int, user: str) -> int | None:
        database = two_pools[k % 2]
        try:
            result = await do_send_message(database, user, cid, uuid.uuid4(), f"{user}-{k}", batcher=batchers[k % 2])
        except LimitExceeded as refused:
            assert refused.extensions["reason"] == "SLOW_MODE" and 1 <= refused.extensions["retryAfter"] <= 60
            return None
        return result.message.seq

    members = await asyncio.gather(*(attempt(k, "2") for k in range(30)), *(attempt(k, "3") for k in range(30)))
    admin = await asyncio.gather(*(attempt(k, "1") for k in range(10)))
    assert len([seq for seq in members[:30] if seq is not None]) == 1
    assert len([seq for seq in members[30:] if seq is not None]) == 1
    assert None not in admin
    async with one.connection() as conn:
        senders = [
            r["sender_id"] for r in await conn.fetch("SELECT sender_id FROM message WHERE conversation_id = $1", cid)
        ]
    assert sorted(senders) == ["1"] * 10 + ["2", "3"]
