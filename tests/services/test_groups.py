"""Managing a group: renameGroup, leaveGroup, setMemberRole, who may do each, and their events."""

from __future__ import annotations

import asyncio

from tests.conftest import error_code
from tests.support.live import ChatApi, SubscriptionError, wait_active_subscriptions, ws_connect

RENAME = "mutation($c: ID!, $t: String!) { renameGroup(conversationId: $c, title: $t) { id title } }"
LEAVE = "mutation($c: ID!) { leaveGroup(conversationId: $c) { conversationId userId } }"
SET_ROLE = """
mutation($c: ID!, $u: ID!, $r: MemberRole!) { setMemberRole(conversationId: $c, userId: $u, role: $r) { userId role } }
"""
ROLES = "query($c: ID!) { conversation(id: $c) { title members { userId role } } }"
EVENTS = """
subscription($c: ID) { conversationUpdated(conversationId: $c) {
  conversationId change userId memberId title role } }
"""


async def roles(api: ChatApi, cid: str, user: int = 1) -> dict[str, str]:
    data = await api.data(ROLES, {"c": cid}, user=user)
    return {m["userId"]: m["role"] for m in data["conversation"]["members"]}


async def set_role(api: ChatApi, actor: int, cid: str, user: int, role: str) -> dict:
    return await api.execute(SET_ROLE, {"c": cid, "u": str(user), "r": role}, user=actor)


async def test_the_owner_and_admins_rename_a_group_members_and_direct_chats_cannot(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2, 3])
    assert (await api.data(RENAME, {"c": cid, "t": "new"}, user=1))["renameGroup"] == {"id": cid, "title": "new"}
    assert error_code(await api.error(RENAME, {"c": cid, "t": "x"}, user=2)) == "FORBIDDEN"
    assert "errors" not in await set_role(api, 1, cid, 2, "ADMIN")
    assert (await api.data(RENAME, {"c": cid, "t": "by admin"}, user=2))["renameGroup"]["title"] == "by admin"
    assert error_code(await api.error(RENAME, {"c": cid, "t": "x"}, user=9)) == "NOT_FOUND"
    assert error_code(await api.error(RENAME, {"c": cid, "t": "  "}, user=1)) == "BAD_USER_INPUT"
    dm = (await api.data('mutation { createDirectConversation(userId: "5") { id } }', user=4))[
        "createDirectConversation"
    ]["id"]
    assert error_code(await api.error(RENAME, {"c": dm, "t": "x"}, user=4)) == "FORBIDDEN"
    assert (await api.data(ROLES, {"c": cid}, user=3))["conversation"]["title"] == "by admin"


async def test_roles_who_may_change_what(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2, 3, 4])
    assert error_code((await set_role(api, 2, cid, 3, "ADMIN"))["errors"][0]) == "FORBIDDEN"  # a MEMBER
    assert (await set_role(api, 1, cid, 2, "ADMIN"))["data"]["setMemberRole"] == {"userId": "2", "role": "ADMIN"}
    assert (await set_role(api, 2, cid, 3, "ADMIN"))["data"]["setMemberRole"]["role"] == "ADMIN"  # admin: admin
    assert (await set_role(api, 2, cid, 3, "MEMBER"))["data"]["setMemberRole"]["role"] == "MEMBER"
    assert error_code((await set_role(api, 2, cid, 1, "MEMBER"))["errors"][0]) == "FORBIDDEN"  # demote the owner
    assert error_code((await set_role(api, 2, cid, 1, "ADMIN"))["errors"][0]) == "FORBIDDEN"
    assert error_code((await set_role(api, 2, cid, 3, "OWNER"))["errors"][0]) == "FORBIDDEN"  # only the owner
    assert error_code((await set_role(api, 1, cid, 1, "MEMBER"))["errors"][0]) == "BAD_USER_INPUT"
    assert error_code((await set_role(api, 1, cid, 9, "ADMIN"))["errors"][0]) == "NOT_FOUND"
    assert error_code((await set_role(api, 9, cid, 2, "ADMIN"))["errors"][0]) == "NOT_FOUND"
    assert await roles(api, cid) == {"1": "OWNER", "2": "ADMIN", "3": "MEMBER", "4": "MEMBER"}
    # handing ownership on: the old OWNER becomes an ADMIN
    assert (await set_role(api, 1, cid, 4, "OWNER"))["data"]["setMemberRole"]["role"] == "OWNER"
    assert await roles(api, cid) == {"1": "ADMIN", "2": "ADMIN", "3": "MEMBER", "4": "OWNER"}
    assert (await set_role(api, 2, cid, 1, "MEMBER"))["data"]["setMemberRole"]["role"] == "MEMBER"
    # an ADMIN may step down
    assert (await set_role(api, 2, cid, 2, "MEMBER"))["data"]["setMemberRole"]["role"] == "MEMBER"
    assert list((await roles(api, cid)).values()).count("OWNER") == 1


async def test_any_member_leaves_and_an_owner_hands_on_to_the_longest_standing_admin(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2, 3, 4])
    await set_role(api, 1, cid, 4, "ADMIN")
    assert (await api.data(LEAVE, {"c": cid}, user=3))["leaveGroup"] == {"conversationId": cid, "userId": "3"}
    assert error_code(await api.error(ROLES, {"c": cid}, user=3)) == "NOT_FOUND"
    assert error_code(await api.error(LEAVE, {"c": cid}, user=3)) == "NOT_FOUND"
    await api.data(LEAVE, {"c": cid}, user=1)  # the OWNER: 4, the ADMIN, before 2, who joined first
    assert await roles(api, cid, user=2) == {"2": "MEMBER", "4": "OWNER"}
    await api.data(LEAVE, {"c": cid}, user=4)  # no ADMIN: the longest-standing member
    assert await roles(api, cid, user=2) == {"2": "OWNER"}
    dm = (await api.data('mutation { createDirectConversation(userId: "6") { id } }', user=5))[
        "createDirectConversation"
    ]["id"]
    assert error_code(await api.error(LEAVE, {"c": dm}, user=5)) == "FORBIDDEN"


async def test_each_change_reaches_the_members_and_the_one_who_left(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2, 3])
    other = await api.create_group(7, [8])
    clients = await asyncio.gather(*(ws_connect(server, user) for user in (1, 2, 3, 8)))
    try:
        one, two, three, outsider = [await c.subscribe(EVENTS, {}) for c in clients]
        three_here = await clients[2].subscribe(EVENTS, {"c": cid})
        await wait_active_subscriptions(server, 5)
        await api.data(RENAME, {"c": cid, "t": "renamed"}, user=1)
        await set_role(api, 1, cid, 2, "ADMIN")
        await api.data(LEAVE, {"c": cid}, user=3)
        await api.data(LEAVE, {"c": cid}, user=1)
        renamed = {"conversationId": cid, "change": "RENAMED", "userId": "1", "memberId": "1", "title": "renamed"}
        role = {"conversationId": cid, "change": "ROLE_CHANGED", "userId": "1", "memberId": "2", "title": "renamed"}
        left3 = {"conversationId": cid, "change": "MEMBER_LEFT", "userId": "3", "memberId": "3", "title": "renamed"}
        left1 = {**left3, "userId": "1", "memberId": "1"}
        handed = {**role, "role": "OWNER"}
        got = [(await op.collect(n)) for op, n in ((one, 4), (two, 5), (three, 3))]
        events = [[e["conversationUpdated"] for e in ops] for ops in got]
        # 3's subscription to the conversation alone ends with NOT_FOUND once 3 has left (what it had
        # buffered and not read yet, MEMBER_LEFT included, may be dropped: the end says it)
        here: list[dict] = []
        while True:
            try:
                here.append((await three_here.next())["conversationUpdated"])
            except SubscriptionError as error:
                assert error.code == "NOT_FOUND"
                break
        assert here == events[0][: len(here)] and len(here) <= 3
        assert events[0] == [
            {**renamed, "role": "OWNER"},
            {**role, "role": "ADMIN"},
            {**left3, "role": None},
            {**left1, "role": None},
        ]
        assert events[1] == events[0] + [handed]
        assert events[2] == events[0][:3]  # 3 is told they left (on all their devices), then hears no more
        await api.data(RENAME, {"c": other, "t": "elsewhere"}, user=7)
        assert (await outsider.next())["conversationUpdated"]["conversationId"] == other  # nothing of cid before
    finally:
        await asyncio.gather(*(c.close() for c in clients))
