"""Disappearing messages over the API: who may set a conversation's time to live; each message sent while it
is on is erased at its createdAt plus the time to live by the API's clock (the test's, read by the session
server's scheduler), through the one delete path (a tombstone at its seq, no longer unread, a DELETED change
with reason EXPIRED reaching sync and messageChanged), once; messages sent before or after keep their
content; a message deleted before its time is left as it is; and a plain send in a conversation without a
time to live runs the statement it ran before. Against the session's chatgql."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from chatgql.graphql.ids import message_id

from ..conftest import error_code
from ..support.clock import Clock, controlled
from ..support.live import wait_active_subscriptions, wait_until, ws_connect
from .test_query_count import logging_statements

TTL = "mutation($c: ID!, $s: Int!) { setMessageTtl(conversationId: $c, seconds: $s) { id messageTtlSeconds } }"
STATE = "query($c: ID!) { conversation(id: $c) { lastSeq lastChangeSeq unreadCount messageTtlSeconds } }"
INBOX = "{ inbox(first: 10) { nodes { id messageTtlSeconds } } }"
HISTORY = "query($c: ID!) { messages(conversationId: $c, first: 20) { nodes { seq body deletedAt deletedBy } } }"
SYNC = """
query($c: ID!) {
  sync(cursors: [{conversationId: $c, afterSeq: 0, afterChangeSeq: 0}]) {
    lastChangeSeq changes { changeSeq kind seq changedBy reason message { body } } } }
"""
CHANGED = "subscription($c: ID) { messageChanged(conversationId: $c) { changeSeq kind seq changedBy reason } }"
ROLE = "mutation($c: ID!, $u: ID!) { setMemberRole(conversationId: $c, userId: $u, role: ADMIN) { role } }"
DIRECT = "mutation($u: ID!) { createDirectConversation(userId: $u) { id } }"
DELETE = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }"


@pytest.fixture
def clock(server) -> Iterator[Clock]:
    with controlled(server, Clock(datetime.now(UTC) - timedelta(hours=1))) as an_hour_ago:  # nothing of now is due
        yield an_hour_ago


async def created(engine, cid: str) -> dict[int, datetime]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT seq, created_at FROM message WHERE conversation_id = :c"), {"c": int(cid)}
        )
        return {seq: at for seq, at in rows}


async def expiries(engine) -> int:
    async with engine.connect() as conn:
        return (await conn.execute(text("SELECT count(*) FROM message_expiry"))).scalar_one()


async def test_who_may_set_the_time_to_live(api):
    cid = await api.create_group(1, [2, 3])
    await api.data(ROLE, {"c": cid, "u": "2"}, user=1)
    assert (await api.data(TTL, {"c": cid, "s": 60}, user=1))["setMessageTtl"]["messageTtlSeconds"] == 60  # owner
    assert (await api.data(TTL, {"c": cid, "s": 30}, user=2))["setMessageTtl"]["messageTtlSeconds"] == 30  # admin
    member = await api.error(TTL, {"c": cid, "s": 0}, user=3)
    outsider = await api.error(TTL, {"c": cid, "s": 0}, user=9)
    anonymous = (await api.execute(TTL, {"c": cid, "s": 0}))["errors"][0]
    too_short = await api.error(TTL, {"c": cid, "s": 1}, user=1)
    negative = await api.error(TTL, {"c": cid, "s": -5}, user=1)
    assert [(error_code(e), e["extensions"].get("reason")) for e in (member, outsider, anonymous)] == [
        ("FORBIDDEN", "NOT_GROUP_ADMIN"),
        ("NOT_FOUND", None),
        ("UNAUTHENTICATED", None),
    ]
    assert [error_code(e) for e in (too_short, negative)] == ["BAD_USER_INPUT", "BAD_USER_INPUT"]
    state = (await api.data(STATE, {"c": cid}, user=3))["conversation"]
    assert state["messageTtlSeconds"] == 30  # no refused call changed it
    assert {n["id"]: n["messageTtlSeconds"] for n in (await api.data(INBOX, user=3))["inbox"]["nodes"]} == {cid: 30}
    direct = (await api.data(DIRECT, {"u": "5"}, user=4))["createDirectConversation"]["id"]
    assert (await api.data(TTL, {"c": direct, "s": 3600}, user=5))["setMessageTtl"]["messageTtlSeconds"] == 3600
    assert (await api.data(TTL, {"c": direct, "s": 0}, user=4))["setMessageTtl"]["messageTtlSeconds"] == 0


async def test_messages_sent_while_it_is_on_are_erased_at_their_time_once_and_reach_sync_and_live(
    server, api, engine, clock
):
    cid = await api.create_group(1, [2, 3])
    await api.send(1, cid, "kept: sent before")  # 1
    await api.data(TTL, {"c": cid, "s": 60}, user=1)
    await api.send(1, cid, "gone 2")  # 2
    await api.send(2, cid, "gone 3")  # 3
    await api.data(TTL, {"c": cid, "s": 0}, user=1)
    await api.send(1, cid, "kept: sent after")  # 4
    assert await expiries(engine) == 2
    at = await created(engine, cid)
    before = (await api.data(STATE, {"c": cid}, user=3))["conversation"]
    assert before["unreadCount"] == 4  # user 3 read nothing

    scheduler = server.runtime.scheduler
    async with await ws_connect(server, 2) as member:
        live = await member.subscribe(CHANGED, {"c": cid})
        await wait_active_subscriptions(server, 1)
        clock.now = at[2] + timedelta(seconds=60) - timedelta(microseconds=1)
        assert await scheduler.run_due() == 0  # a microsecond early: nothing
        clock.now = at[3] + timedelta(seconds=60)
        scheduler.wake()
        await wait_until(lambda: _none_left(engine), 20, "both expiries fired")
        events = [e["messageChanged"] for e in await live.collect(2, timeout=20)]
    assert [(e["kind"], e["seq"], e["changedBy"], e["reason"]) for e in events] == [
        ("DELETED", 2, None, "EXPIRED"),
        ("DELETED", 3, None, "EXPIRED"),
    ]
    assert await scheduler.run_due() == 0  # never again
    history = (await api.data(HISTORY, {"c": cid}, user=2))["messages"]["nodes"]
    assert [(m["seq"], m["body"], m["deletedAt"] is not None, m["deletedBy"]) for m in history] == [
        (1, "kept: sent before", False, None),
        (2, "", True, None),
        (3, "", True, None),
        (4, "kept: sent after", False, None),
    ]
    after = (await api.data(STATE, {"c": cid}, user=3))["conversation"]
    assert (after["lastSeq"], after["lastChangeSeq"], after["unreadCount"]) == (4, 2, 2)  # 2 and 3 no longer unread
    synced = (await api.data(SYNC, {"c": cid}, user=1))["sync"][0]
    assert [(c["kind"], c["seq"], c["reason"], c["message"]["body"]) for c in synced["changes"]] == [
        ("DELETED", 2, "EXPIRED", ""),
        ("DELETED", 3, "EXPIRED", ""),
    ]
    async with engine.connect() as conn:
        stored = (await conn.execute(text("SELECT body FROM message WHERE seq IN (2, 3)"))).scalars().all()
    assert stored == ["", ""]  # erased from storage


async def _none_left(engine) -> bool:
    return await expiries(engine) == 0


async def test_a_message_deleted_before_its_time_is_left_as_it_is(server, api, engine, clock):
    cid = await api.create_group(1, [2])
    await api.data(TTL, {"c": cid, "s": 5}, user=1)
    await api.send(1, cid, "deleted first")
    await api.data(DELETE, {"c": cid, "s": 1}, user=1)
    at = await created(engine, cid)
    clock.now = at[1] + timedelta(seconds=5)
    server.runtime.scheduler.wake()
    await wait_until(lambda: _none_left(engine), 20, "the expiry fired")
    assert (await api.data(STATE, {"c": cid}, user=2))["conversation"]["lastChangeSeq"] == 1  # the delete's only


async def test_a_plain_send_without_a_time_to_live_runs_the_one_statement_it_ran_before(server, api, engine):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "warm")
    with logging_statements(server) as statements:
        await api.data(
            'mutation($c: ID!, $m: UUID!) { sendMessage(conversationId: $c, clientMsgId: $m, body: "x") '
            "{ message { seq } } }",
            {"c": cid, "m": str(uuid.uuid4())},
            user=1,
        )
    sends = [q for q, _ in statements if "chat_send" in q]
    assert len(sends) == 1 and len(statements) == 1, statements
    assert await expiries(engine) == 0


async def test_an_erased_message_is_a_tombstone_to_members_and_nothing_to_others(server, api, engine, clock):
    cid = await api.create_group(1, [2])
    await api.data(TTL, {"c": cid, "s": 5}, user=1)
    await api.send(2, cid, "soon gone")
    at = await created(engine, cid)
    node = "query($id: ID!) { node(id: $id) { ... on Message { seq body deletedAt } } }"
    mid = message_id(int(cid), 1)
    async with await ws_connect(server, 9) as other:
        denied = await other.subscribe(CHANGED, {"c": cid})
        assert (await denied.error()).code == "NOT_FOUND"
    clock.now = at[1] + timedelta(seconds=5)
    server.runtime.scheduler.wake()
    await wait_until(lambda: _none_left(engine), 20, "the expiry fired")
    member = (await api.data(node, {"id": mid}, user=1))["node"]
    assert (member["body"], member["deletedAt"] is not None) == ("", True)
    assert (await api.data(node, {"id": mid}, user=9))["node"] is None
    assert error_code(await api.error(SYNC, {"c": cid}, user=9)) == "NOT_FOUND"
