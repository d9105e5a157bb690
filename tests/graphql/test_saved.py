"""Saved messages (saveMessage, unsaveMessage, savedMessages, savedChanges, savedMessageChanged): a member's
own list of messages they read, newest save first and paginated; who may save (any member, whatever their
role; nobody else), what leaves the list (a deleted message, a conversation left); and how the member's
devices converge: each change takes the member's next saved version, which savedChanges replays after a
version a device holds and savedMessageChanged carries live to all of their devices and nobody else's.
Against the session's chatgql and its PostgreSQL, with the API's clock in the test's hands."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from chatgql import db
from chatgql.services.saved import SOURCE

from ..conftest import RunningServer, drop_database, error_code, make_settings, scratch_database
from ..support.clock import Clock
from ..support.live import ChatApi, ConnectionRefused, WsClient, wait_active_subscriptions, wait_until, ws_connect
from ..support.webhooks import Receiver, new_secret

SAVE = """
mutation($c: ID!, $s: Long!, $r: DateTime) {
  saveMessage(conversationId: $c, seq: $s, remindAt: $r) {
    changed saved { conversationId seq savedAt remindAt remindedAt version message { body } }
  }
}
"""
UNSAVE = "mutation($c: ID!, $s: Long!) { unsaveMessage(conversationId: $c, seq: $s) { changed saved { seq } } }"
LIST = """
query($f: Int!, $a: String) {
  savedMessages(first: $f, after: $a) { nodes { conversationId seq savedAt message { body } } hasNextPage endCursor version }
}
"""
LIST_IDS = "{ savedMessages(first: 10) { nodes { message { id } } } }"
CHANGES = """
query($v: Long!) {
  savedChanges(afterVersion: $v) { version hasMore changes { conversationId seq version saved remindAt message { body } } }
}
"""
CHANGED = "subscription { savedMessageChanged { conversationId seq version saved remindAt } }"
REMINDER = "subscription { reminderDue { conversationId seq version remindAt remindedAt message { body } } }"
ROLE = "mutation($c: ID!, $u: ID!) { setMemberRole(conversationId: $c, userId: $u, role: ADMIN) { role } }"
HIDE = "mutation($c: ID!) { setHistoryVisibility(conversationId: $c, hideHistory: true) { hideHistory } }"
DELETE = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }"


async def save(api: ChatApi, user: int, cid: str, seq: int, remind_at: datetime | None = None) -> dict:
    variables = {"c": cid, "s": seq, "r": None if remind_at is None else remind_at.isoformat()}
    return (await api.data(SAVE, variables, user=user))["saveMessage"]


async def listed(api: ChatApi, user: int, first: int = 50) -> list[tuple[str, int]]:
    page = (await api.data(LIST, {"f": first}, user=user))["savedMessages"]
    return [(node["conversationId"], node["seq"]) for node in page["nodes"]]


async def changes(api: ChatApi, user: int, after: int) -> dict:
    return (await api.data(CHANGES, {"v": after}, user=user))["savedChanges"]


async def rows(engine, table: str) -> int:
    async with engine.connect() as conn:
        return (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar()


async def test_a_saved_list_is_the_members_own_newest_save_first_and_paginated(api, clock):
    first = await api.create_group(1, [2])
    second = await api.create_group(2, [1])
    for cid in (first, second):
        for i in range(2):
            await api.send(2, cid, f"{cid}-{i + 1}")
    order = [(first, 2), (second, 1), (first, 1), (second, 2)]
    for cid, seq in order:
        clock.advance(seconds=1)
        saved = (await save(api, 1, cid, seq))["saved"]
        assert saved["savedAt"] == clock.now.isoformat() and saved["message"]["body"] == f"{cid}-{seq}"
    newest_first = list(reversed(order))
    page = (await api.data(LIST, {"f": 3}, user=1))["savedMessages"]
    assert [(n["conversationId"], n["seq"]) for n in page["nodes"]] == newest_first[:3]
    assert page["hasNextPage"] is True and page["version"] == 4
    rest = (await api.data(LIST, {"f": 3, "a": page["endCursor"]}, user=1))["savedMessages"]
    assert [(n["conversationId"], n["seq"]) for n in rest["nodes"]] == newest_first[3:]
    assert rest["hasNextPage"] is False
    clock.advance(seconds=1)
    again = (await save(api, 1, first, 2))["saved"]  # saved again: it keeps its place, takes a version
    assert again["version"] == 5 and await listed(api, 1) == newest_first
    assert await listed(api, 2) == []  # another member's list is their own
    node = "query($id: ID!) { node(id: $id) { id } }"
    saved_ids = [n["message"]["id"] for n in (await api.data(LIST_IDS, {}, user=1))["savedMessages"]["nodes"]]
    assert len(saved_ids) == 4
    for message_id in saved_ids:  # a saved message's id opens nothing to a non-member
        assert (await api.data(node, {"id": message_id}, user=9))["node"] is None
    for bad in ({"f": 0}, {"f": 101}, {"f": 5, "a": "not-a-cursor"}):
        assert error_code(await api.error(LIST, bad, user=1)) == "BAD_USER_INPUT"
    assert error_code(await api.error(LIST, {"f": 5})) == "UNAUTHENTICATED"


async def test_who_may_save_owner_admin_member_other_user_anonymous_and_hidden_history(api, clock, engine):
    cid = await api.create_group(1, [2, 3])
    await api.data(ROLE, {"c": cid, "u": "2"}, user=1)
    await api.send(3, cid, "m1")
    for user in (1, 2, 3):  # OWNER, ADMIN, MEMBER: each their own
        assert (await save(api, user, cid, 1))["saved"]["seq"] == 1
        assert await listed(api, user) == [(cid, 1)]
    before = await rows(engine, "saved_message")
    refusals = [
        ({"c": cid, "s": 1}, 9, "NOT_FOUND"),  # not a member: as if absent
        ({"c": cid, "s": 7}, 1, "NOT_FOUND"),  # no such message
        ({"c": cid, "s": 1}, None, "UNAUTHENTICATED"),
        ({"c": cid, "s": 1, "r": (clock.now - timedelta(seconds=1)).isoformat()}, 1, "BAD_USER_INPUT"),
        ({"c": "nope", "s": 1}, 1, "BAD_USER_INPUT"),
    ]
    for variables, user, code in refusals:
        refused = await api.error(SAVE, variables, user=user)
        assert error_code(refused) == code, (variables, user, refused)
    past = await api.error(SAVE, {"c": cid, "s": 1, "r": clock.now.isoformat()}, user=1)
    assert past["extensions"]["reason"] == "REMIND_AT_IN_THE_PAST"
    assert error_code(await api.error(UNSAVE, {"c": cid, "s": 1}, user=9)) == "NOT_FOUND"
    assert error_code(await api.error(UNSAVE, {"c": cid, "s": 1})) == "UNAUTHENTICATED"
    await api.data(HIDE, {"c": cid}, user=1)
    await api.add_members(1, cid, [4])  # 4 joins after m1, which the group hides from them
    assert error_code(await api.error(SAVE, {"c": cid, "s": 1}, user=4)) == "NOT_FOUND"
    await api.data(DELETE, {"c": cid, "s": 1}, user=3)
    deleted = await api.error(SAVE, {"c": cid, "s": 1}, user=1)
    assert error_code(deleted) == "CONFLICT" and deleted["extensions"]["reason"] == "MESSAGE_DELETED"
    assert await rows(engine, "saved_message") == before


async def test_a_deleted_message_or_a_conversation_left_leaves_the_list_and_devices_learn_it(api, clock):
    cid = await api.create_group(1, [2])
    other = await api.create_group(2, [1])
    await api.send(2, cid, "a")
    await api.send(2, cid, "b")
    await api.send(1, other, "c")
    for key in ((cid, 1), (cid, 2), (other, 1)):
        await save(api, 1, *key)
    held = (await changes(api, 1, 0))["version"]  # a device caught up at version 3
    assert held == 3
    await api.data(DELETE, {"c": cid, "s": 1}, user=2)
    assert await listed(api, 1) == [(other, 1), (cid, 2)]
    await api.remove_member(1, other, 1)  # 1 leaves: what they saved there goes from their list
    assert await listed(api, 1) == [(cid, 2)]
    everything = await changes(api, 1, 0)  # a new device: the whole state, what they no longer read not saved
    assert [(c["conversationId"], c["seq"], c["saved"]) for c in everything["changes"]] == [
        (cid, 1, False),
        (cid, 2, True),
        (other, 1, False),
    ]
    assert everything["changes"][1]["message"] == {"body": "b"}
    assert (await api.data(UNSAVE, {"c": cid, "s": 2}, user=1))["unsaveMessage"] == {"changed": True, "saved": None}
    assert (await api.data(UNSAVE, {"c": cid, "s": 2}, user=1))["unsaveMessage"]["changed"] is False
    after = await changes(api, 1, held)  # the device that held 3: only the unsave
    assert after["version"] == 4
    assert [(c["seq"], c["version"], c["saved"]) for c in after["changes"]] == [(2, 4, False)]
    assert await listed(api, 1) == []


async def test_every_device_of_the_member_is_told_live_and_nobody_else(server, api, clock):
    cid = await api.create_group(1, [2])
    await api.send(2, cid, "a")
    phone, laptop, other = await ws_connect(server, 1), await ws_connect(server, 1), await ws_connect(server, 2)
    try:
        ops = [await client.subscribe(CHANGED) for client in (phone, laptop, other)]
        await wait_active_subscriptions(server, 3)
        remind = clock.now + timedelta(hours=1)
        await save(api, 1, cid, 1, remind)
        await api.data(UNSAVE, {"c": cid, "s": 1}, user=1)
        await save(api, 2, cid, 1)  # 2's own: to 2's device only
        got = [await op.collect(2) for op in ops[:2]] + [await ops[2].collect(1)]
    finally:
        for client in (phone, laptop, other):
            await client.close()
    mine = [
        {"conversationId": cid, "seq": 1, "version": 1, "saved": True, "remindAt": remind.isoformat()},
        {"conversationId": cid, "seq": 1, "version": 2, "saved": False, "remindAt": None},
    ]
    assert [[e["savedMessageChanged"] for e in events] for events in got[:2]] == [mine, mine]
    assert [e["savedMessageChanged"]["version"] for e in got[2]] == [1]  # 2's first change, not 1's
    assert await anonymous_subscription_refused(server, CHANGED)


async def anonymous_subscription_refused(server, query: str) -> bool:
    """A subscription without a token: the connection refused, or the subscription UNAUTHENTICATED."""
    try:
        client = await WsClient.connect(server.ws_url, None)
    except ConnectionRefused:
        return True
    try:
        op = await client.subscribe(query)
        return (await op.error()).code == "UNAUTHENTICATED"
    finally:
        await client.close()


async def reminded(engine) -> list[tuple[str, int]]:
    async with engine.connect() as conn:
        found = await conn.execute(text("SELECT user_id, seq FROM saved_message WHERE reminded_at IS NOT NULL"))
        return sorted((row.user_id, row.seq) for row in found)


async def fire_due(server, engine, expected: list[tuple[str, int]]) -> None:
    """Wake the server's scheduler (its clock is the test's) and wait until exactly `expected` have fired."""
    server.runtime.scheduler.wake()
    await wait_until(lambda: _reminded_are(engine, expected), 20, f"the reminders {expected} fired")


async def _reminded_are(engine, expected: list[tuple[str, int]]) -> bool:
    return await reminded(engine) == sorted(expected)


def test_reminders_are_a_source_of_the_scheduler(server) -> None:
    assert SOURCE in server.runtime.scheduler.sources


async def test_a_reminder_fires_once_at_its_time_to_the_members_devices_only(server, api, clock, engine):
    """Not a microsecond early, at its time through the server's own scheduler, then never again; live on the
    member's reminderDue (not another user's), in the list and in savedChanges; an unsaved one never, and one of
    a message deleted meanwhile is done with no event."""
    cid = await api.create_group(1, [2])
    for body in ("call mum", "gone", "unsaved", "theirs"):
        await api.send(2, cid, body)
    at = clock.now + timedelta(hours=1)
    phone, other = await ws_connect(server, 1), await ws_connect(server, 2)
    try:
        ops = [await phone.subscribe(REMINDER), await other.subscribe(REMINDER)]
        await wait_active_subscriptions(server, 2)
        await save(api, 1, cid, 2, at - timedelta(minutes=1))  # its message deleted before it is due
        await save(api, 1, cid, 1, at)
        await save(api, 1, cid, 3, at)
        await api.data(UNSAVE, {"c": cid, "s": 3}, user=1)
        await api.data(DELETE, {"c": cid, "s": 2}, user=2)
        clock.now = at - timedelta(minutes=1, microseconds=1)
        assert await server.runtime.scheduler.run_due() == 0 and await reminded(engine) == []
        clock.now = at - timedelta(microseconds=1)
        await fire_due(server, engine, [("1", 2)])  # the deleted one: done, nobody told
        clock.now = at
        await fire_due(server, engine, [("1", 1), ("1", 2)])
        await save(api, 2, cid, 4, at + timedelta(hours=1))  # the other user's own, later
        clock.advance(hours=2)
        await fire_due(server, engine, [("1", 1), ("1", 2), ("2", 4)])
        assert await server.runtime.scheduler.run_due() == 0  # each fired once: nothing left
        mine = [e["reminderDue"] for e in await ops[0].collect(1)]
        theirs = [e["reminderDue"] for e in await ops[1].collect(1)]
    finally:
        await phone.close()
        await other.close()
    assert mine == [
        {
            "conversationId": cid,
            "seq": 1,
            "version": 6,  # 3 saves, an unsave, the deleted one's firing, this firing
            "remindAt": at.isoformat(),
            "remindedAt": at.isoformat(),
            "message": {"body": "call mum"},
        }
    ]
    assert [(e["seq"], e["version"]) for e in theirs] == [(4, 2)]  # the other user's own, none of user 1's
    listed_now = (await api.data(LIST, {"f": 10}, user=1))["savedMessages"]["nodes"]
    assert [n["seq"] for n in listed_now] == [1]
    latest = await changes(api, 1, 5)
    assert [(c["seq"], c["version"], c["saved"]) for c in latest["changes"]] == [(1, 6, True)]
    assert await anonymous_subscription_refused(server, REMINDER)


@pytest.fixture
async def own_database(migrated_url: str) -> AsyncIterator[str]:
    """A database of the test's own: no other server's relay takes its outbox (the session server's would,
    and it copies nothing to the webhook queue)."""
    name = f"{make_url(db.asyncpg_url(migrated_url)).database}_reminders"
    url = await scratch_database(migrated_url, name)
    try:
        yield url
    finally:
        await drop_database(migrated_url, name)


async def test_a_reminder_reaches_the_webhook_once(own_database, http):
    """With CHATGQL_WEBHOOK_EVENTS naming reminder.due: the fired reminder is POSTed, signed, once."""
    migrated_url = own_database
    secret = new_secret()
    async with Receiver(secret) as receiver:
        settings = make_settings(
            migrated_url,
            webhook_url=receiver.url,
            webhook_secret=secret,
            webhook_events="message.new,reminder.due",
            webhook_allow_private=True,
            webhook_poll_seconds=0.05,
        )
        async with RunningServer(settings) as server:
            clock = Clock()
            server.runtime.deps.clock = clock
            api = ChatApi.of(server, http)
            cid = await api.create_group(1, [2])
            await api.send(2, cid, "remind me")
            await save(api, 1, cid, 1, clock.now + timedelta(minutes=5))
            clock.advance(minutes=5)
            server.runtime.scheduler.wake()

            def due() -> list:
                return [r for r in receiver.done() if r.event["type"] == "reminder.due"]

            await wait_until(lambda: len(due()) == 1, 30, "the reminder's webhook")
            await wait_until(lambda: len(receiver.taken_keys()) == 1, 30, "the message's webhook")
    [request] = due()
    data = request.event["data"]
    assert (data["conversationId"], data["userId"], data["seq"], data["version"]) == (cid, "1", 1, 2)
    assert data["remindedAt"] == clock.now.isoformat()
