"""Scheduled messages over the API: schedule, list, edit and cancel before the time; at its time (the API's
clock, which the test holds, read by the session server's scheduler) sent once as an ordinary message with
the sender's clientMsgId and the conversation's next seq, live (messageNew) and through sync; refused at
its time (FAILED, coded) when the sender is no longer a member, is banned from the group, or is blocked;
who may do what (non-member, member, admin, owner, other user, anonymous). Against the session's chatgql."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from chatgql.graphql.features.scheduled import scheduled_id

from ..conftest import error_code
from ..support.clock import Clock, controlled
from ..support.live import ChatApi, subscribe_messages, wait_active_subscriptions, wait_until, ws_connect

T0 = datetime(2031, 1, 1, tzinfo=UTC)
FIELDS = "id conversationId clientMsgId body sendAt createdAt state seq doneAt failureCode failureReason"
SCHEDULE = f"""
mutation($c: ID!, $m: UUID!, $b: String!, $at: DateTime!) {{
  scheduleMessage(conversationId: $c, clientMsgId: $m, body: $b, sendAt: $at) {{ duplicate scheduledMessage {{ {FIELDS} }} }}
}}
"""
EDIT = f"""
mutation($id: ID!, $b: String, $at: DateTime) {{ editScheduledMessage(id: $id, body: $b, sendAt: $at) {{ {FIELDS} }} }}
"""
CANCEL = f"mutation($id: ID!) {{ cancelScheduledMessage(id: $id) {{ {FIELDS} }} }}"
LIST = f"""
query($c: ID, $states: [ScheduledMessageState!]) {{ scheduledMessages(conversationId: $c, states: $states) {{ {FIELDS} }} }}
"""
SYNC = """
query($c: ID!, $after: Long!) {
  sync(cursors: [{conversationId: $c, afterSeq: $after, afterChangeSeq: 0}]) {
    lastSeq messages { seq senderId clientMsgId body } } }
"""
STATE = "query($c: ID!) { conversation(id: $c) { lastSeq unreadCount } }"
ROLE = "mutation($c: ID!, $u: ID!) { setMemberRole(conversationId: $c, userId: $u, role: ADMIN) { role } }"
LEAVE = "mutation($c: ID!) { leaveGroup(conversationId: $c) { conversationId } }"
BAN = "mutation($c: ID!, $u: ID!) { banMember(conversationId: $c, userId: $u) { userId } }"
DIRECT = "mutation($u: ID!) { createDirectConversation(userId: $u) { id } }"
BLOCK = "mutation($u: ID!) { blockUser(userId: $u) { blocked } }"


@pytest.fixture
def clock(server) -> Iterator[Clock]:
    """The API's clock, which the server's scheduler reads too, at T0."""
    with controlled(server, Clock(T0)) as at_t0:
        yield at_t0


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


async def schedule(api: ChatApi, user: int, cid: str, body: str, seconds: float, key: str | None = None) -> dict:
    variables = {"c": cid, "m": key or str(uuid.uuid4()), "b": body, "at": at(seconds)}
    return (await api.data(SCHEDULE, variables, user=user))["scheduleMessage"]["scheduledMessage"]


async def reach(server, clock: Clock, api: ChatApi, user: int, seconds: float, states: dict[str, str]) -> list[dict]:
    """Move the clock to T0 + seconds, wake the server's scheduler, and wait until the user's scheduled
    messages (by id) are in the states given; returns the user's list of every state."""
    clock.now = T0 + timedelta(seconds=seconds)
    server.runtime.scheduler.wake()
    every = {"states": ["PENDING", "SENT", "CANCELED", "FAILED"]}
    found: list[dict] = []

    async def there() -> bool:
        nonlocal found
        found = (await api.data(LIST, every, user=user))["scheduledMessages"]
        return all(any(s["id"] == i and s["state"] == want for s in found) for i, want in states.items())

    await wait_until(there, 20, lambda: f"states {states}, have {found}")
    return found


async def test_a_scheduled_message_is_listed_edited_and_sent_once_at_its_time_as_an_ordinary_message(
    server, api, clock
):
    cid = await api.create_group(1, [2, 3])
    await api.send(2, cid, "first")  # seq 1
    key = str(uuid.uuid4())
    made = await schedule(api, 1, cid, "draft", 60, key)
    assert (made["state"], made["body"], made["clientMsgId"], made["seq"], made["createdAt"]) == (
        "PENDING",
        "draft",
        key,
        None,
        T0.isoformat(),
    )
    again = await api.data(SCHEDULE, {"c": cid, "m": key, "b": "draft", "at": at(60)}, user=1)  # a retry
    assert again["scheduleMessage"]["duplicate"] is True
    assert again["scheduleMessage"]["scheduledMessage"]["id"] == made["id"]
    other = await api.error(SCHEDULE, {"c": cid, "m": key, "b": "else", "at": at(60)}, user=1)
    assert error_code(other) == "CONFLICT"
    edited = (await api.data(EDIT, {"id": made["id"], "b": "final", "at": at(120)}, user=1))["editScheduledMessage"]
    assert (edited["body"], edited["sendAt"]) == ("final", at(120))
    listed = (await api.data(LIST, {"c": cid}, user=1))["scheduledMessages"]
    assert [s["id"] for s in listed] == [made["id"]]
    assert (await api.data(LIST, {}, user=2))["scheduledMessages"] == []  # another's: never listed
    await api.send(3, cid, "second")  # seq 2: the scheduled one takes the next seq at its time

    async with await ws_connect(server, 2) as member:
        live = await subscribe_messages(member, cid)
        await wait_active_subscriptions(server, 1)
        await reach(server, clock, api, 1, 119, {made["id"]: "PENDING"})  # a second before: not sent
        (sent,) = [s for s in await reach(server, clock, api, 1, 120, {made["id"]: "SENT"}) if s["id"] == made["id"]]
        event = (await live.next())["messageNew"]
    assert (sent["seq"], sent["doneAt"], sent["failureCode"]) == (3, at(120), None)
    assert event["seq"] == 3 and event["message"] == {"seq": 3, "senderId": "1", "body": "final"}
    synced = (await api.data(SYNC, {"c": cid, "after": 2}, user=3))["sync"][0]
    assert synced["messages"] == [{"seq": 3, "senderId": "1", "clientMsgId": key, "body": "final"}]
    assert (await api.data(STATE, {"c": cid}, user=3))["conversation"] == {"lastSeq": 3, "unreadCount": 1}

    server.runtime.scheduler.wake()
    assert await server.runtime.scheduler.run_due() == 0  # never again
    late_edit = await api.error(EDIT, {"id": made["id"], "b": "too late"}, user=1)
    late_cancel = await api.error(CANCEL, {"id": made["id"]}, user=1)
    assert [(error_code(e), e["extensions"].get("reason")) for e in (late_edit, late_cancel)] == [
        ("CONFLICT", "NOT_PENDING"),
        ("CONFLICT", "NOT_PENDING"),
    ]
    assert (await api.data(STATE, {"c": cid}, user=3))["conversation"]["lastSeq"] == 3
    # the clientMsgId is the message's now: sendMessage's retry with it is a duplicate, not a second message
    retry = await api.data(
        'mutation($c: ID!, $m: UUID!) { sendMessage(conversationId: $c, clientMsgId: $m, body: "final") '
        "{ duplicate message { seq } } }",
        {"c": cid, "m": key},
        user=1,
    )
    assert retry["sendMessage"] == {"duplicate": True, "message": {"seq": 3}}


async def test_a_canceled_message_is_never_sent_and_bad_times_are_refused(server, api, clock):
    cid = await api.create_group(1, [2])
    made = await schedule(api, 1, cid, "never", 30)
    canceled = (await api.data(CANCEL, {"id": made["id"]}, user=1))["cancelScheduledMessage"]
    assert (canceled["state"], canceled["doneAt"]) == ("CANCELED", T0.isoformat())
    assert (await api.data(CANCEL, {"id": made["id"]}, user=1))["cancelScheduledMessage"]["state"] == "CANCELED"
    kept = await schedule(api, 1, cid, "kept", 30)
    await reach(server, clock, api, 1, 31, {kept["id"]: "SENT", made["id"]: "CANCELED"})
    assert (await api.data(STATE, {"c": cid}, user=2))["conversation"]["lastSeq"] == 1

    past = await api.error(SCHEDULE, {"c": cid, "m": str(uuid.uuid4()), "b": "x", "at": at(0)}, user=1)
    far = await api.error(SCHEDULE, {"c": cid, "m": str(uuid.uuid4()), "b": "x", "at": at(400 * 86400)}, user=1)
    blank = await api.error(SCHEDULE, {"c": cid, "m": str(uuid.uuid4()), "b": "  ", "at": at(99)}, user=1)
    bad_id = await api.error(CANCEL, {"id": "not-an-id"}, user=1)
    assert [(error_code(e), e["extensions"].get("reason")) for e in (past, far, blank, bad_id)] == [
        ("BAD_USER_INPUT", "SEND_AT_IN_THE_PAST"),
        ("BAD_USER_INPUT", "SEND_AT_TOO_FAR"),
        ("BAD_USER_INPUT", None),
        ("BAD_USER_INPUT", None),
    ]
    pending = await schedule(api, 1, cid, "later", 300)
    moved_back = await api.error(EDIT, {"id": pending["id"], "at": at(10)}, user=1)  # before the clock's now
    assert error_code(moved_back) == "BAD_USER_INPUT"


async def test_who_may_schedule_list_edit_and_cancel(api, clock):
    cid = await api.create_group(1, [2, 3])
    await api.data(ROLE, {"c": cid, "u": "2"}, user=1)
    made = {user: await schedule(api, user, cid, f"from {user}", 60) for user in (1, 2, 3)}  # owner, admin, member
    assert all(m["state"] == "PENDING" for m in made.values())
    outsider = await api.error(SCHEDULE, {"c": cid, "m": str(uuid.uuid4()), "b": "x", "at": at(60)}, user=9)
    assert error_code(outsider) == "NOT_FOUND"
    for user in (1, 2, 9):  # the owner, an admin and another user: none edits, cancels or lists a member's
        assert error_code(await api.error(EDIT, {"id": made[3]["id"], "b": "hijacked"}, user=user)) == "NOT_FOUND"
        assert error_code(await api.error(CANCEL, {"id": made[3]["id"]}, user=user)) == "NOT_FOUND"
        listed = (await api.data(LIST, {"c": cid}, user=user))["scheduledMessages"]
        assert made[3]["id"] not in [s["id"] for s in listed]
    forged = scheduled_id(int(cid), 10**6)
    assert error_code(await api.error(CANCEL, {"id": forged}, user=3)) == "NOT_FOUND"
    for query, variables in (
        (SCHEDULE, {"c": cid, "m": str(uuid.uuid4()), "b": "x", "at": at(60)}),
        (LIST, {}),
        (CANCEL, {"id": made[3]["id"]}),
    ):
        anonymous = await api.execute(query, variables)
        assert error_code(anonymous["errors"][0]) == "UNAUTHENTICATED"
    assert (await api.data(LIST, {"c": cid}, user=3))["scheduledMessages"][0]["body"] == "from 3"


async def test_at_its_time_a_send_the_sender_may_no_longer_make_is_refused_with_a_code(server, api, clock):
    cid = await api.create_group(1, [2, 3, 4])
    left = await schedule(api, 2, cid, "from one who left", 10)
    banned = await schedule(api, 3, cid, "from one banned", 10)
    stays = await schedule(api, 4, cid, "from one who stays", 10)
    await api.data(LEAVE, {"c": cid}, user=2)
    await api.data(BAN, {"c": cid, "u": "3"}, user=1)
    direct = (await api.data(DIRECT, {"u": "6"}, user=5))["createDirectConversation"]["id"]
    blocked = await schedule(api, 5, direct, "to one who blocked me", 10)
    await api.data(BLOCK, {"u": "5"}, user=6)

    await reach(server, clock, api, 4, 10, {stays["id"]: "SENT"})
    outcomes = {}
    for user, made in ((2, left), (3, banned), (5, blocked)):
        (row,) = [s for s in await reach(server, clock, api, user, 10, {made["id"]: "FAILED"}) if s["id"] == made["id"]]
        outcomes[user] = (row["failureCode"], row["failureReason"], row["seq"])
    assert outcomes == {
        2: ("NOT_FOUND", "NOT_A_MEMBER", None),
        3: ("NOT_FOUND", "NOT_A_MEMBER", None),
        5: ("FORBIDDEN", "BLOCKED", None),
    }
    assert (await api.data(STATE, {"c": cid}, user=1))["conversation"]["lastSeq"] == 1  # the one who stays
    assert (await api.data(STATE, {"c": direct}, user=6))["conversation"]["lastSeq"] == 0


async def test_at_its_time_slow_mode_refuses_a_members_scheduled_message_too(server, api, clock):
    cid = await api.create_group(1, [2])
    await api.data("mutation($c: ID!) { setSlowMode(conversationId: $c, seconds: 3600) { id } }", {"c": cid}, user=1)
    await api.send(2, cid, "a member's send: the next one in an hour")
    made = await schedule(api, 2, cid, "too soon", 10)
    (row,) = [s for s in await reach(server, clock, api, 2, 10, {made["id"]: "FAILED"}) if s["id"] == made["id"]]
    assert (row["failureCode"], row["failureReason"]) == ("LIMIT_EXCEEDED", "SLOW_MODE")
    assert (await api.data(STATE, {"c": cid}, user=1))["conversation"]["lastSeq"] == 1
