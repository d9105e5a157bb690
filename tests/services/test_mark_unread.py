"""markUnread: the viewer's own unread starts again, what others see never moves back.

Against the session server (real PostgreSQL, its relay and bus; markRead coalesced, as by
default) over HTTP and websockets, and against the services without the coalescer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from chatgql import db
from chatgql.services.membership import do_mark_unread
from chatgql.services.reads import do_mark_read
from tests.conftest import error_code
from tests.support.live import ChatApi, outbox_drained, wait_active_subscriptions, ws_connect

MARK_UNREAD = """
mutation U($c: ID!, $s: Long!) { markUnread(conversationId: $c, fromSeq: $s) { lastReadSeq unreadCount lastSeq } }
"""
CONVERSATION = """
query C($c: ID!) { conversation(id: $c) { lastReadSeq unreadCount
  members { userId lastReadSeq } lastMessage { seq seen seenByCount seenBy } } }
"""
TOTALS = "{ viewer { totalUnread unreadConversations } }"
OWN_EVENTS = "subscription($c: ID) { membershipUpdated(conversationId: $c) { conversationId lastReadSeq } }"
READS = "subscription($c: ID) { readUpdated(conversationId: $c) { userId lastReadSeq } }"


async def mark_unread(api: ChatApi, user: int, cid: str, from_seq: int) -> dict:
    return (await api.data(MARK_UNREAD, {"c": cid, "s": from_seq}, user=user))["markUnread"]


async def conversation(api: ChatApi, user: int, cid: str) -> dict:
    return (await api.data(CONVERSATION, {"c": cid}, user=user))["conversation"]


async def group_with(api: ChatApi, messages: int, read_by_2: int) -> str:
    cid = await api.create_group(1, [2])
    for _ in range(messages):
        await api.send(1, cid)
    if read_by_2:
        await api.mark_read(2, cid, read_by_2)
    return cid


async def test_the_viewers_unread_starts_again_and_what_others_see_does_not_move(server, http):
    api = ChatApi.of(server, http)
    cid = await group_with(api, 5, 5)
    assert await mark_unread(api, 2, cid, 3) == {"lastReadSeq": 2, "unreadCount": 3, "lastSeq": 5}
    own = await conversation(api, 2, cid)
    assert (own["lastReadSeq"], own["unreadCount"]) == (2, 3)
    assert (await api.data(TOTALS, user=2))["viewer"] == {"totalUnread": 3, "unreadConversations": 1}
    # user 1 still sees 2 at 5: seen, seen by 2, and the member's watermark
    theirs = await conversation(api, 1, cid)
    assert {m["userId"]: m["lastReadSeq"] for m in theirs["members"]} == {"1": 5, "2": 5}
    assert theirs["lastMessage"] == {"seq": 5, "seen": True, "seenByCount": 1, "seenBy": ["2"]}
    # and 2's own view of others' receipts is the watermark too
    assert (await conversation(api, 2, cid))["members"][1] == {"userId": "2", "lastReadSeq": 5}


async def test_mark_unread_never_marks_anything_read(server, http):
    api = ChatApi.of(server, http)
    cid = await group_with(api, 5, 2)
    assert await mark_unread(api, 2, cid, 5) == {"lastReadSeq": 2, "unreadCount": 3, "lastSeq": 5}
    assert await mark_unread(api, 2, cid, 1) == {"lastReadSeq": 0, "unreadCount": 5, "lastSeq": 5}
    assert await mark_unread(api, 2, cid, 4) == {"lastReadSeq": 0, "unreadCount": 5, "lastSeq": 5}


async def test_reading_again_moves_the_own_position_up_and_past_the_watermark_ends_the_rewind(server, http):
    api = ChatApi.of(server, http)
    cid = await group_with(api, 5, 5)
    await mark_unread(api, 2, cid, 2)
    read = await api.mark_read(2, cid, 3)
    assert read == {"lastReadSeq": 3, "advanced": False, "unreadCount": 2}
    assert (await conversation(api, 2, cid))["unreadCount"] == 2
    await api.send(1, cid)  # seq 6: unread counts it too
    assert (await conversation(api, 2, cid))["unreadCount"] == 3
    read = await api.mark_read(2, cid, 6)
    assert read == {"lastReadSeq": 6, "advanced": True, "unreadCount": 0}
    await api.mark_read(2, cid, 5)  # a late, older markRead changes nothing
    assert (await conversation(api, 2, cid))["lastReadSeq"] == 6


async def test_reading_up_to_the_watermark_ends_the_rewind(server, http):
    api = ChatApi.of(server, http)
    cid = await group_with(api, 5, 5)
    await mark_unread(api, 2, cid, 2)
    assert await api.mark_read(2, cid, 99) == {"lastReadSeq": 5, "advanced": False, "unreadCount": 0}
    assert (await api.data(TOTALS, user=2))["viewer"] == {"totalUnread": 0, "unreadConversations": 0}


async def test_the_viewers_own_send_ends_the_rewind(server, http):
    api = ChatApi.of(server, http)
    cid = await group_with(api, 5, 5)
    await mark_unread(api, 2, cid, 1)
    await api.send(2, cid)
    assert (await conversation(api, 2, cid))["unreadCount"] == 0


async def test_bad_from_seq_is_a_coded_error_and_writes_nothing(server, http):
    api = ChatApi.of(server, http)
    cid = await group_with(api, 5, 5)
    for from_seq in (0, -1, 6, 2**63 - 1):
        error = await api.error(MARK_UNREAD, {"c": cid, "s": from_seq}, user=2)
        assert error_code(error) == "BAD_USER_INPUT", from_seq
    assert error_code(await api.error(MARK_UNREAD, {"c": cid, "s": 1}, user=3)) == "NOT_FOUND"
    assert error_code(await api.error(MARK_UNREAD, {"c": "424242", "s": 1}, user=2)) == "NOT_FOUND"
    assert (await conversation(api, 2, cid))["unreadCount"] == 0
    empty = await api.create_group(1, [2])
    assert error_code(await api.error(MARK_UNREAD, {"c": empty, "s": 1}, user=2)) == "BAD_USER_INPUT"


async def test_every_device_of_the_viewer_is_told_and_the_others_see_no_receipt(server, http, engine):
    api = ChatApi.of(server, http)
    cid = await group_with(api, 5, 5)
    # group_with's own events (2's read to 5) out first: relayed after the subscriptions start,
    # they would be the first each one sees (seen beside another test worker).
    await outbox_drained(engine, 60)
    phone, laptop, other = await asyncio.gather(ws_connect(server, 2), ws_connect(server, 2), ws_connect(server, 1))
    try:
        own = [await phone.subscribe(OWN_EVENTS, {"c": cid}), await laptop.subscribe(OWN_EVENTS, {})]
        receipts = await other.subscribe(READS, {"c": cid})
        await wait_active_subscriptions(server, 3)
        await mark_unread(api, 2, cid, 4)
        for op in own:
            assert (await op.next())["membershipUpdated"] == {"conversationId": cid, "lastReadSeq": 3}
        await api.mark_read(2, cid, 4)  # below the watermark: the own position only
        for op in own:
            assert (await op.next())["membershipUpdated"] == {"conversationId": cid, "lastReadSeq": 4}
        await api.send(1, cid)
        await api.mark_read(2, cid, 6)
        # user 1's first receipt since: 2's move to 6, nothing from the rewind
        assert (await receipts.next())["readUpdated"] == {"userId": "2", "lastReadSeq": 6}
    finally:
        await asyncio.gather(phone.close(), laptop.close(), other.close())


@pytest.fixture
async def database(migrated_url: str) -> AsyncIterator[db.Database]:
    database = await db.Database(migrated_url, max_size=4).open()
    try:
        yield database
    finally:
        await database.close()


@pytest.mark.slow
@pytest.mark.parametrize("rounds", [40])
async def test_mark_read_racing_mark_unread_from_two_devices_ends_as_one_order_of_them(server, http, database, rounds):
    """The two serialise on the member row: the later one wins. markUnread(3) then markRead(5): read
    (5); markRead(5) then markUnread(3): unread from 3 (own 2). Never anything else, and the last
    membershipUpdated a device gets is the final state (or, read last, the readUpdated it made)."""
    api = ChatApi.of(server, http)
    outcomes = set()
    for round_ in range(rounds):
        cid = await group_with(api, 5, 5)
        coalesced = round_ % 2 == 0  # the session server coalesces; the services alone do not
        if coalesced:
            await asyncio.gather(api.mark_read(2, cid, 5), mark_unread(api, 2, cid, 3))
        else:
            await asyncio.gather(do_mark_read(database, "2", int(cid), 5), do_mark_unread(database, "2", int(cid), 3))
        final = await conversation(api, 2, cid)
        assert (final["lastReadSeq"], final["unreadCount"]) in {(5, 0), (2, 3)}, final
        assert final["members"][1]["lastReadSeq"] == 5  # the watermark others see never moved
        outcomes.add(final["lastReadSeq"])
    assert outcomes <= {2, 5}


async def test_the_last_event_to_the_viewers_devices_is_the_final_state(server, http):
    """markRead(5), markUnread(3) and markUnread(4) at once, from three devices: whatever order they
    take at the member row, the event each change writes follows that order (the row is locked until
    commit), so the last one a device gets is the state that stays. A pin afterwards marks the end
    of the race's events (no waiting for time)."""
    api = ChatApi.of(server, http)
    device = await ws_connect(server, 2)
    try:
        op = await device.subscribe("subscription { membershipUpdated { conversationId lastReadSeq pinned } }", {})
        await wait_active_subscriptions(server, 1)
        finals = set()
        for _ in range(12):
            cid = await group_with(api, 5, 5)
            await asyncio.gather(api.mark_read(2, cid, 5), mark_unread(api, 2, cid, 3), mark_unread(api, 2, cid, 4))
            final = (await conversation(api, 2, cid))["lastReadSeq"]
            finals.add(final)
            await api.data(
                "mutation($c: ID!) { updateMembership(conversationId: $c, pinned: true) { id } }", {"c": cid}, user=2
            )
            events = []
            while not events or not events[-1]["pinned"]:
                events.append((await op.next())["membershipUpdated"])
            assert {e["conversationId"] for e in events} == {cid}
            assert events[-1]["lastReadSeq"] == final
            assert events[-2]["lastReadSeq"] == final, events  # the race wrote at least one event
        assert finals <= {2, 3, 5}
    finally:
        await device.close()


async def test_mark_read_after_mark_unread_answers_the_unread_the_conversation_then_has(server, http):
    """The issue's case: with deleted messages inside the rewound range, markRead's answer counts the deleted
    ones above its new own position, as Conversation.unreadCount read right after it does."""
    api = ChatApi.of(server, http)
    cid = await group_with(api, 5, read_by_2=5)
    for seq in (1, 4):
        await api.data(
            "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }",
            {"c": cid, "s": seq},
            user=1,
        )
    assert (await mark_unread(api, 2, cid, 1))["unreadCount"] == 3
    answer = await api.mark_read(2, cid, 2)
    after = await conversation(api, 2, cid)
    assert answer == {"lastReadSeq": 2, "advanced": False, "unreadCount": 2}
    assert (after["lastReadSeq"], after["unreadCount"]) == (2, 2)
    assert (await api.data(TOTALS, user=2))["viewer"]["totalUnread"] == 2
