"""Pinned messages: who may pin and unpin (a direct chat's members, a group's OWNER and ADMINs), an
optional expiry read from a clock the test controls, a cap, the pinned list that a deleted or erased
message leaves; each pin and unpin a change (change seq, never unread) that reaches sync's change cursor
and messageChanged. Against the session's chatgql and its PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from sqlalchemy import text

from chatgql.services.erase import erase_user
from chatgql.services.pins import MAX_PINS

from ..conftest import error_code
from ..support.live import ChatApi, wait_active_subscriptions, ws_connect

PIN = """
mutation($c: ID!, $s: Long!, $until: DateTime) {
  pinMessage(conversationId: $c, seq: $s, expiresAt: $until) {
    changeSeq message { seq } pin { conversationId seq pinnedBy pinnedAt expiresAt message { body } }
  }
}
"""
UNPIN = """
mutation($c: ID!, $s: Long!) { unpinMessage(conversationId: $c, seq: $s) { changeSeq pin { seq } message { seq } } }
"""
PINNED = """
query($c: ID!) {
  pinnedMessages(conversationId: $c) { seq pinnedBy pinnedAt expiresAt message { id seq body } }
  conversation(id: $c) { lastSeq lastChangeSeq unreadCount }
}
"""
LIST = "query($c: ID!) { pinnedMessages(conversationId: $c) { seq } }"
SYNC = """
query($cursors: [SyncCursor!]!) {
  sync(cursors: $cursors) { lastSeq lastChangeSeq messages { seq } changes { changeSeq kind seq changedBy message { seq } } }
}
"""
CHANGED = """
subscription($c: ID, $cursors: [ChangeCursor!]) {
  messageChanged(conversationId: $c, cursors: $cursors) { conversationId changeSeq kind seq changedBy message { seq body } }
}
"""
ROLE = "mutation($c: ID!, $u: ID!) { setMemberRole(conversationId: $c, userId: $u, role: ADMIN) { role } }"
DIRECT = "mutation($u: ID!) { createDirectConversation(userId: $u) { id } }"
NODE = "query($id: ID!) { node(id: $id) { id ... on Message { seq body } } }"


async def pin(api: ChatApi, user: int, cid: str, seq: int, until: datetime | None = None) -> dict:
    variables = {"c": cid, "s": seq, "until": None if until is None else until.isoformat()}
    return (await api.data(PIN, variables, user=user))["pinMessage"]


async def unpin(api: ChatApi, user: int, cid: str, seq: int) -> dict:
    return (await api.data(UNPIN, {"c": cid, "s": seq}, user=user))["unpinMessage"]


async def listed(api: ChatApi, user: int, cid: str) -> list[int]:
    return [p["seq"] for p in (await api.data(LIST, {"c": cid}, user=user))["pinnedMessages"]]


async def group(api: ChatApi, messages: int = 2) -> str:
    """A group of OWNER 1, ADMIN 2 and MEMBER 3 with `messages` messages of 3's."""
    cid = await api.create_group(1, [2, 3])
    await api.data(ROLE, {"c": cid, "u": "2"}, user=1)
    for i in range(messages):
        await api.send(3, cid, f"m{i + 1}")
    return cid


async def rows(engine, table: str) -> int:
    async with engine.connect() as conn:
        return (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar()


async def test_a_pin_is_a_change_never_unread_and_the_list_says_who_pinned_and_when(api, clock):
    cid = await group(api)
    before = (await api.data(PINNED, {"c": cid}, user=3))["conversation"]
    first = await pin(api, 1, cid, 1)
    assert first["changeSeq"] == 1
    assert first["pin"] == {
        "conversationId": cid,
        "seq": 1,
        "pinnedBy": "1",
        "pinnedAt": clock.now.isoformat(),
        "expiresAt": None,
        "message": {"body": "m1"},
    }
    clock.advance(seconds=1)
    second = await pin(api, 2, cid, 2, until=clock.now + timedelta(days=1))
    assert second["changeSeq"] == 2
    assert (await pin(api, 1, cid, 1))["changeSeq"] is None  # pinned already with this expiry: nothing written
    data = await api.data(PINNED, {"c": cid}, user=3)
    assert [(p["seq"], p["pinnedBy"], p["message"]["body"]) for p in data["pinnedMessages"]] == [
        (2, "2", "m2"),  # the newest pin first
        (1, "1", "m1"),
    ]
    assert data["pinnedMessages"][0]["expiresAt"] == (clock.now + timedelta(days=1)).isoformat()
    conv = data["conversation"]
    assert conv["lastSeq"] == before["lastSeq"] == 2 and conv["lastChangeSeq"] == 2  # never a message seq
    assert conv["unreadCount"] == before["unreadCount"]
    longer = await pin(api, 1, cid, 2, until=clock.now + timedelta(days=2))  # another expiry: replaces the pin
    assert longer["changeSeq"] == 3 and longer["pin"]["pinnedBy"] == "1"
    assert await listed(api, 3, cid) == [2, 1]
    gone = await unpin(api, 2, cid, 1)
    assert gone["changeSeq"] == 4 and gone["pin"] is None and gone["message"]["seq"] == 1
    assert (await unpin(api, 2, cid, 1))["changeSeq"] is None  # not pinned: nothing written
    assert await listed(api, 3, cid) == [2]


async def test_who_may_pin_and_see_pins_owner_admin_member_other_user_anonymous(api, engine):
    cid = await group(api)
    for user in (1, 2):  # the OWNER and an ADMIN pin and unpin
        assert (await pin(api, user, cid, 1))["changeSeq"] is not None
        assert (await unpin(api, user, cid, 1))["changeSeq"] is not None
    changes = await rows(engine, "message_change")
    for query, variables in ((PIN, {"c": cid, "s": 1}), (UNPIN, {"c": cid, "s": 1})):
        member = await api.error(query, variables, user=3)  # a plain MEMBER: FORBIDDEN
        assert error_code(member) == "FORBIDDEN" and member["extensions"]["reason"] == "PIN_NOT_ALLOWED"
        assert error_code(await api.error(query, variables, user=9)) == "NOT_FOUND"  # not in it: as if absent
        assert error_code(await api.error(query, variables)) == "UNAUTHENTICATED"
    assert (await rows(engine, "message_change"), await rows(engine, "pinned_message")) == (changes, 0)
    await pin(api, 1, cid, 2)
    assert await listed(api, 3, cid) == [2]  # every member sees the list
    assert error_code(await api.error(LIST, {"c": cid}, user=9)) == "NOT_FOUND"
    assert error_code(await api.error(LIST, {"c": cid})) == "UNAUTHENTICATED"
    message_id = (await api.data(PINNED, {"c": cid}, user=3))["pinnedMessages"][0]["message"]["id"]
    assert (await api.data(NODE, {"id": message_id}, user=3))["node"]["seq"] == 2
    assert (await api.data(NODE, {"id": message_id}, user=9))["node"] is None  # a pin opens no node
    direct = (await api.data(DIRECT, {"u": "5"}, user=4))["createDirectConversation"]["id"]
    await api.send(4, direct, "d")
    assert (await pin(api, 5, direct, 1))["changeSeq"] == 1  # either member of a direct chat
    assert (await unpin(api, 4, direct, 1))["changeSeq"] == 2
    assert error_code(await api.error(PIN, {"c": direct, "s": 1}, user=3)) == "NOT_FOUND"


async def test_an_expired_pin_leaves_the_list_by_the_clock_the_test_controls(api, clock, engine):
    cid = await group(api, messages=3)
    await pin(api, 1, cid, 1, until=clock.now + timedelta(hours=1))
    await pin(api, 1, cid, 2)
    clock.advance(minutes=59)
    assert await listed(api, 3, cid) == [2, 1]
    clock.advance(minutes=1)  # at expiresAt: no longer pinned
    assert await listed(api, 3, cid) == [2]
    changes = await rows(engine, "message_change")
    assert (await unpin(api, 1, cid, 1))["changeSeq"] is None  # expired: nothing to unpin, no change
    assert await rows(engine, "message_change") == changes  # an expiry is no change either
    past = await api.error(PIN, {"c": cid, "s": 3, "until": clock.now.isoformat()}, user=1)
    assert error_code(past) == "BAD_USER_INPUT" and past["extensions"]["reason"] == "EXPIRES_IN_THE_PAST"
    again = await pin(api, 2, cid, 1, until=clock.now + timedelta(hours=1))  # pinned anew
    assert again["changeSeq"] is not None and again["pin"]["pinnedAt"] == clock.now.isoformat()
    assert await listed(api, 3, cid) == [1, 2]


async def test_a_conversation_holds_at_most_the_cap_and_expired_or_deleted_pins_make_room(api, clock):
    cid = await group(api, messages=MAX_PINS + 2)
    for seq in range(1, MAX_PINS + 1):
        await pin(api, 1, cid, seq, until=clock.now + timedelta(hours=1) if seq == 1 else None)
    full = await api.error(PIN, {"c": cid, "s": MAX_PINS + 1}, user=1)
    assert error_code(full) == "LIMIT_EXCEEDED" and full["extensions"]["reason"] == "PINS_PER_CONVERSATION"
    assert (await pin(api, 1, cid, 3, until=clock.now + timedelta(days=1)))["changeSeq"] is not None  # not new
    await api.data("mutation($c: ID!) { deleteMessage(conversationId: $c, seq: 2) { changeSeq } }", {"c": cid}, user=3)
    assert (await pin(api, 1, cid, MAX_PINS + 1))["changeSeq"] is not None  # the deleted one's room
    assert error_code(await api.error(PIN, {"c": cid, "s": MAX_PINS + 2}, user=1)) == "LIMIT_EXCEEDED"
    clock.advance(hours=1)
    assert (await pin(api, 1, cid, MAX_PINS + 2))["changeSeq"] is not None  # the expired one's room
    assert len(await listed(api, 3, cid)) == MAX_PINS


async def test_a_deleted_or_erased_message_leaves_the_list(api, server, engine):
    cid = await group(api, messages=0)
    await api.send(3, cid, "by 3")
    await api.send(1, cid, "by 1")
    await api.send(3, cid, "by 3 again")
    for seq in (1, 2, 3):
        await pin(api, 1, cid, seq)
    await api.data("mutation($c: ID!) { deleteMessage(conversationId: $c, seq: 2) { changeSeq } }", {"c": cid}, user=1)
    assert await listed(api, 3, cid) == [3, 1]
    error = await api.error(PIN, {"c": cid, "s": 2}, user=1)
    assert error_code(error) == "CONFLICT" and error["extensions"]["reason"] == "MESSAGE_DELETED"
    assert await erase_user(server.runtime.deps.database, "3") == 2  # the operator's erase: a delete each
    assert await listed(api, 3, cid) == []
    assert error_code(await api.error(PIN, {"c": cid, "s": 9}, user=1)) == "NOT_FOUND"


async def test_sync_after_the_change_cursor_carries_pins_and_unpins(api):
    cid = await group(api)
    await pin(api, 1, cid, 1)
    await pin(api, 2, cid, 2)
    await unpin(api, 1, cid, 1)
    cursors = [{"conversationId": cid, "afterSeq": 2, "afterChangeSeq": 1}]
    (answer,) = (await api.data(SYNC, {"cursors": cursors}, user=3))["sync"]
    assert answer["messages"] == [] and (answer["lastSeq"], answer["lastChangeSeq"]) == (2, 3)
    assert [(c["changeSeq"], c["kind"], c["seq"], c["changedBy"]) for c in answer["changes"]] == [
        (2, "PINNED", 2, "2"),
        (3, "UNPINNED", 1, "1"),
    ]


async def test_pins_reach_messagechanged_live_and_on_resume_and_not_a_non_member(server, api):
    cid = await group(api)
    await pin(api, 1, cid, 1)
    async with await ws_connect(server, 3) as member, await ws_connect(server, 9) as other:
        denied = await other.subscribe(CHANGED, {"c": cid})
        assert (await denied.error()).code == "NOT_FOUND"
        resumed = await member.subscribe(CHANGED, {"c": cid, "cursors": [{"conversationId": cid, "afterChangeSeq": 0}]})
        replayed = (await resumed.next())["messageChanged"]
        assert (replayed["changeSeq"], replayed["kind"], replayed["seq"]) == (1, "PINNED", 1)
        await wait_active_subscriptions(server, 1)
        await pin(api, 2, cid, 2)
        await unpin(api, 1, cid, 1)
        live = [e["messageChanged"] for e in await resumed.collect(2, timeout=20)]
    assert [(e["changeSeq"], e["kind"], e["seq"], e["changedBy"]) for e in live] == [
        (2, "PINNED", 2, "2"),
        (3, "UNPINNED", 1, "1"),
    ]
    assert live[0]["message"] == {"seq": 2, "body": "m2"}


async def test_concurrent_pins_past_the_cap_let_exactly_one_in_and_keep_change_seqs_gap_free(api, engine):
    cid = await group(api, messages=MAX_PINS + 3)
    for seq in range(1, MAX_PINS):
        await pin(api, 1, cid, seq)
    racing = [MAX_PINS, MAX_PINS + 1, MAX_PINS + 2, MAX_PINS + 3]
    answers = await asyncio.gather(
        *(api.execute(PIN, {"c": cid, "s": seq}, user=1 + i % 2) for i, seq in enumerate(racing))
    )
    won = [a["data"]["pinMessage"] for a in answers if "errors" not in a]
    refused = [a["errors"][0]["extensions"]["reason"] for a in answers if "errors" in a]
    assert len(won) == 1 and refused == ["PINS_PER_CONVERSATION"] * 3
    assert won[0]["changeSeq"] == MAX_PINS  # the next change seq, none skipped by the refused ones
    assert len(await listed(api, 3, cid)) == MAX_PINS
    async with engine.connect() as conn:
        seqs = (await conn.execute(text("SELECT change_seq FROM message_change ORDER BY 1"))).scalars().all()
    assert seqs == list(range(1, MAX_PINS + 1))
