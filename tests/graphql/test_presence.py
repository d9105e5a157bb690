"""Presence and last seen: online while a websocket of the user's is open, last seen written at most once
a minute per user (the test's clock), shown only to users who share a conversation with them and within
their visibility (EVERYONE, CONTACTS, NOBODY), by query and live (presenceChanged), never to anyone else.
Against the session's chatgql (one process, memory bus) and its PostgreSQL; across processes on Redis:
tests/events/test_presence_processes.py."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from chatgql.store.presence import touch_last_seen

from ..conftest import error_code
from ..support.live import ChatApi, ConnectionRefused, Operation, SubscriptionError, WsClient, bearer, wait_until

PRESENCE = "query($u: [ID!]!) { presence(userIds: $u) { userId visible online lastSeenAt visibility } }"
VISIBILITY = "mutation($v: PresenceVisibility!) { setPresenceVisibility(visibility: $v) { userId visibility } }"
CHANGED = "subscription($u: [ID!]!) { presenceChanged(userIds: $u) { userId visible online lastSeenAt } }"
DIRECT = "mutation($u: ID!) { createDirectConversation(userId: $u) { id } }"


def users(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:10]
    return [f"prs-{tag}-{i}" for i in range(n)]


async def seen(api: ChatApi, viewer: str, *of: str) -> dict[str, tuple]:
    found = (await api.data(PRESENCE, {"u": list(of)}, user=viewer))["presence"]
    return {p["userId"]: (p["visible"], p["online"], p["lastSeenAt"]) for p in found}


async def connect(server, user: str) -> WsClient:
    return await WsClient.connect(server.ws_url, bearer(server.settings, user))  # type: ignore[arg-type]


async def next_of(op: Operation) -> tuple:
    p = (await op.next(timeout=20))["presenceChanged"]
    return p["userId"], p["visible"], p["online"], p["lastSeenAt"]


async def test_presence_is_shown_to_who_shares_a_conversation_within_the_users_visibility(server, api, clock):
    owner, admin, member, friend, stranger = users(5)
    cid = await api.create_group(owner, [admin, member])  # type: ignore[arg-type]
    await api.data(
        "mutation($c: ID!, $u: ID!) { setMemberRole(conversationId: $c, userId: $u, role: ADMIN) { role } }",
        {"c": cid, "u": admin},
        user=owner,
    )
    await api.data(DIRECT, {"u": friend}, user=member)
    never = await seen(api, admin, member, stranger)
    assert never == {member: (True, False, None), stranger: (False, None, None)}  # never seen; shares nothing
    phone = await connect(server, member)
    try:
        at = clock.now.isoformat()

        # online shows as soon as the socket is registered; the last seen is written by the settling task after
        async def online_and_seen() -> bool:
            return (await seen(api, owner, member))[member] == (True, True, at)

        await wait_until(online_and_seen, 10, "the member online, last seen now")
        for viewer in (owner, admin, friend, member):  # everyone who shares a conversation, and themselves
            assert (await seen(api, viewer, member))[member] == (True, True, at)
        assert (await seen(api, stranger, member))[member] == (False, None, None)  # shares none: nothing
        await api.data(VISIBILITY, {"v": "CONTACTS"}, user=member)
        assert (await seen(api, owner, member))[member] == (False, None, None)  # a group only
        assert (await seen(api, admin, member))[member] == (False, None, None)
        assert (await seen(api, friend, member))[member] == (True, True, at)  # a direct conversation
        await api.data(VISIBILITY, {"v": "NOBODY"}, user=member)
        assert (await seen(api, friend, member))[member] == (False, None, None)
        own = (await api.data(PRESENCE, {"u": [member]}, user=member))["presence"][0]
        assert (own["visible"], own["online"], own["visibility"]) == (True, True, "NOBODY")  # their own, always
        assert (await api.data(PRESENCE, {"u": [member]}, user=owner))["presence"][0]["visibility"] is None
    finally:
        await phone.close()
    assert error_code(await api.error(PRESENCE, {"u": [member]})) == "UNAUTHENTICATED"
    assert error_code(await api.error(VISIBILITY, {"v": "NOBODY"})) == "UNAUTHENTICATED"
    assert error_code(await api.error(PRESENCE, {"u": [""]}, user=owner)) == "BAD_USER_INPUT"
    many = [f"u{i}" for i in range(201)]
    assert error_code(await api.error(PRESENCE, {"u": many}, user=owner)) == "LIMIT_EXCEEDED"
    assert error_code(await api.error(VISIBILITY, {"v": "SOME"}, user=owner)) == "BAD_USER_INPUT"
    with pytest.raises((ConnectionRefused, SubscriptionError)):  # anonymous: no subscription
        anonymous = await WsClient.connect(server.ws_url, None)
        try:
            await (await anonymous.subscribe(CHANGED, {"u": [member]})).next(timeout=10)
        finally:
            await anonymous.close()


async def _online(api: ChatApi, viewer: str, user: str) -> bool:
    return (await seen(api, viewer, user))[user][1] is True


async def test_last_seen_is_written_at_most_once_a_minute_by_the_clock_the_test_controls(server, api, clock):
    member, watcher = users(2)
    await api.create_group(member, [watcher])  # type: ignore[arg-type]
    live = await connect(server, watcher)
    try:
        changes = await live.subscribe(CHANGED, {"u": [member]})
        assert await next_of(changes) == (member, True, False, None)  # now: never seen
        start = clock.now
        first = await connect(server, member)
        assert await next_of(changes) == (member, True, True, start.isoformat())  # seen as it connects
        clock.advance(seconds=30)
        await first.close()  # within the minute: last seen stays where it is
        assert await next_of(changes) == (member, True, False, start.isoformat())
        clock.advance(seconds=45)  # 75 s after the write
        second = await connect(server, member)
        assert await next_of(changes) == (member, True, True, clock.now.isoformat())
        clock.advance(minutes=5)
        await second.close()
        assert await next_of(changes) == (member, True, False, clock.now.isoformat())
        assert (await seen(api, watcher, member))[member] == (True, False, clock.now.isoformat())
    finally:
        await live.close()


async def test_presence_changed_is_live_for_who_may_see_it_and_follows_visibility_and_membership(server, api, clock):
    member, watcher, stranger, owner = users(4)
    cid = await api.create_group(owner, [member, watcher])  # type: ignore[arg-type]
    watching = await connect(server, watcher)
    outside = await connect(server, stranger)
    try:
        changes = await watching.subscribe(CHANGED, {"u": [member, stranger]})
        first = {(await next_of(changes))[0]: None for _ in range(2)}
        assert set(first) == {member, stranger}
        theirs = await outside.subscribe(CHANGED, {"u": [member]})
        assert await next_of(theirs) == (member, False, None, None)  # shares nothing with the member
        phone = await connect(server, member)
        assert (await next_of(changes))[:3] == (member, True, True)
        await api.data(VISIBILITY, {"v": "NOBODY"}, user=member)
        assert await next_of(changes) == (member, False, None, None)
        await api.data(VISIBILITY, {"v": "EVERYONE"}, user=member)
        assert (await next_of(changes))[:3] == (member, True, True)
        await api.remove_member(owner, cid, watcher)  # type: ignore[arg-type]
        await phone.close()  # the watcher shares nothing with them any more
        assert await next_of(changes) == (member, False, None, None)
        # the stranger got nothing of all this: their first event comes once they share a conversation
        await api.data(DIRECT, {"u": member}, user=stranger)
        again = await connect(server, member)
        assert (await next_of(theirs))[:3] == (member, True, True)
        await again.close()
    finally:
        await watching.close()
        await outside.close()


async def test_the_last_seen_statement_refuses_a_write_within_the_minute_whichever_process_asks(server):
    """The process's memory spares the statement; the statement itself keeps the bound across processes."""
    (user,) = users(1)
    at = datetime(2031, 6, 1, tzinfo=UTC)
    async with server.runtime.deps.database.connection() as conn:
        assert await touch_last_seen(conn, user, at) == at
        assert await touch_last_seen(conn, user, at + timedelta(seconds=59)) == at
        assert await touch_last_seen(conn, user, at + timedelta(seconds=60)) == at + timedelta(seconds=60)
