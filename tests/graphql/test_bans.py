"""Bans (services/bans.py): a group's OWNER or an ADMIN bans a user, who is removed and kept out
while the ban holds; unbanMember lifts it; Conversation.bans lists them (OWNER and ADMINs only).

- who may ban whom: the OWNER anyone but themselves, an ADMIN MEMBERs only, a MEMBER nobody,
  an outsider gets NOT_FOUND, a direct conversation cannot (the token problems, the non-member
  and the removed member are in tests/services/test_authorization.py's matrix);
- a banned user cannot be added back (FORBIDDEN, USER_BANNED) until unbanned or the ban expires
  (the expiry is the database's clock: the test moves the ban's `until` into the past);
- the banned user's live subscriptions end at once, after they are told (MEMBER_BANNED), and
  a resumed subscription, node(id:) and the history answer them as any outsider;
- many sends of the member racing the ban: none is stored after the ban's commit.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from chatgql.db import Database
from chatgql.errors import ChatError, NotFound
from chatgql.events import types as events
from chatgql.services.bans import do_ban_member
from chatgql.services.conversations import do_add_members, do_create_group
from chatgql.services.groupcommit import SendBatcher
from chatgql.services.messages import do_send_message
from tests.conftest import drop_database, error_code, scratch_database
from tests.support.live import ChatApi, SubscriptionError, wait_active_subscriptions, ws_connect

BAN = """
mutation($c: ID!, $u: ID!, $until: DateTime, $r: String) {
  banMember(conversationId: $c, userId: $u, until: $until, reason: $r) {
    conversationId userId until bannedBy reason createdAt } }
"""
UNBAN = "mutation($c: ID!, $u: ID!) { unbanMember(conversationId: $c, userId: $u) { conversationId userId } }"
BANS = "query($c: ID!, $f: Int, $a: ID) { conversation(id: $c) { bans(first: $f, after: $a) { userId reason } } }"
MEMBERS = "query($c: ID!) { conversation(id: $c) { members { userId role } } }"
ADD = "mutation($c: ID!, $u: [ID!]!) { addMembers(conversationId: $c, userIds: $u) { memberCount } }"
SET_ROLE = "mutation($c: ID!, $u: ID!) { setMemberRole(conversationId: $c, userId: $u, role: ADMIN) { role } }"
EVENTS = "subscription($c: ID) { conversationUpdated(conversationId: $c) { conversationId change userId memberId } }"
NEW = "subscription($c: ID, $k: [SyncCursor!]) { messageNew(conversationId: $c, cursors: $k) { seq } }"
NODE = "query($id: ID!) { node(id: $id) { id } }"
MESSAGES = "query($c: ID!) { messages(conversationId: $c) { nodes { seq } } }"


async def ban(api: ChatApi, actor: int, cid: str, user: int, **more: object) -> dict:
    return await api.execute(BAN, {"c": cid, "u": str(user), **more}, user=actor)


async def members(api: ChatApi, cid: str, user: int = 1) -> dict[str, str]:
    return {m["userId"]: m["role"] for m in (await api.data(MEMBERS, {"c": cid}, user=user))["conversation"]["members"]}


def code_and_reason(body: dict) -> tuple[str, str | None]:
    (error,) = body["errors"]
    return error_code(error), error["extensions"].get("reason")


async def test_a_banned_member_is_removed_and_cannot_be_added_back_until_unbanned(api):
    cid = await api.create_group(1, [2, 3])
    banned = (await ban(api, 1, cid, 2, r="  spam  "))["data"]["banMember"]
    assert banned["userId"] == "2" and banned["bannedBy"] == "1" and banned["reason"] == "spam"
    assert banned["until"] is None and banned["conversationId"] == cid
    assert await members(api, cid) == {"1": "OWNER", "3": "MEMBER"}
    assert error_code(await api.error(MEMBERS, {"c": cid}, user=2)) == "NOT_FOUND"
    refused = await api.execute(ADD, {"c": cid, "u": ["2", "4"]}, user=3)
    assert code_and_reason(refused) == ("FORBIDDEN", "USER_BANNED")
    assert refused["errors"][0]["extensions"]["userIds"] == ["2"]
    assert await members(api, cid) == {"1": "OWNER", "3": "MEMBER"}  # nobody added, 4 neither
    assert (await api.data(BANS, {"c": cid}, user=1))["conversation"]["bans"] == [{"userId": "2", "reason": "spam"}]
    assert (await api.data(UNBAN, {"c": cid, "u": "2"}, user=1))["unbanMember"] == {
        "conversationId": cid,
        "userId": "2",
    }
    assert error_code(await api.error(UNBAN, {"c": cid, "u": "2"}, user=1)) == "NOT_FOUND"  # nothing holds now
    assert (await api.data(BANS, {"c": cid}, user=1))["conversation"]["bans"] == []
    await api.data(ADD, {"c": cid, "u": ["2"]}, user=3)
    assert await members(api, cid) == {"1": "OWNER", "2": "MEMBER", "3": "MEMBER"}


async def test_a_ban_with_an_end_holds_until_it_passes(api, engine):
    cid = await api.create_group(1, [2])
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    assert code_and_reason(await ban(api, 1, cid, 2, until=past)) == ("BAD_USER_INPUT", None)
    assert await members(api, cid) == {"1": "OWNER", "2": "MEMBER"}  # nothing done
    until = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
    banned = (await ban(api, 1, cid, 2, until=until.isoformat()))["data"]["banMember"]
    assert datetime.fromisoformat(banned["until"]) == until
    assert code_and_reason(await api.execute(ADD, {"c": cid, "u": ["2"]}, user=1)) == ("FORBIDDEN", "USER_BANNED")
    async with engine.begin() as conn:  # a day later, as the database's clock sees it
        await conn.execute(text("UPDATE conversation_ban SET until = now() - interval '1 second'"))
    assert (await api.data(BANS, {"c": cid}, user=1))["conversation"]["bans"] == []
    await api.data(ADD, {"c": cid, "u": ["2"]}, user=1)
    assert await members(api, cid) == {"1": "OWNER", "2": "MEMBER"}
    # banning again replaces the expired ban
    await ban(api, 1, cid, 2)
    assert (await api.data(BANS, {"c": cid}, user=1))["conversation"]["bans"] == [{"userId": "2", "reason": None}]


async def test_who_may_ban_whom_and_list_bans(api):
    cid = await api.create_group(1, [2, 3, 4, 5])
    await api.data(SET_ROLE, {"c": cid, "u": "2"}, user=1)  # 2 and 3 ADMINs
    await api.data(SET_ROLE, {"c": cid, "u": "3"}, user=1)
    assert code_and_reason(await ban(api, 4, cid, 5)) == ("FORBIDDEN", "NOT_GROUP_ADMIN")  # a MEMBER
    assert code_and_reason(await ban(api, 2, cid, 3)) == ("FORBIDDEN", "NOT_GROUP_ADMIN")  # an ADMIN, an ADMIN
    assert code_and_reason(await ban(api, 2, cid, 1)) == ("FORBIDDEN", "NOT_GROUP_ADMIN")  # the OWNER
    assert code_and_reason(await ban(api, 1, cid, 1)) == ("BAD_USER_INPUT", None)  # oneself
    assert code_and_reason(await ban(api, 9, cid, 4)) == ("NOT_FOUND", None)  # an outsider
    assert code_and_reason(await ban(api, 9, "987654321", 4)) == ("NOT_FOUND", None)  # a missing group
    assert code_and_reason(await ban(api, 1, cid, 4, r="x" * 501)) == ("BAD_USER_INPUT", None)
    assert code_and_reason(await api.execute(UNBAN, {"c": cid, "u": "5"}, user=4)) == ("FORBIDDEN", "NOT_GROUP_ADMIN")
    assert await members(api, cid) == {"1": "OWNER", "2": "ADMIN", "3": "ADMIN", "4": "MEMBER", "5": "MEMBER"}
    assert "errors" not in await ban(api, 2, cid, 4)  # an ADMIN bans a MEMBER
    assert "errors" not in await ban(api, 1, cid, 3)  # the OWNER bans an ADMIN
    assert "errors" not in await ban(api, 1, cid, 10)  # someone not in the group: kept out before
    assert "errors" not in await ban(api, 1, cid, 11)
    pages = [
        (await api.data(BANS, {"c": cid, "f": 2, "a": after}, user=2))["conversation"]["bans"] for after in (None, "11")
    ]
    assert [[b["userId"] for b in page] for page in pages] == [["10", "11"], ["3", "4"]]  # text order
    assert code_and_reason(await api.execute(BANS, {"c": cid}, user=5)) == ("FORBIDDEN", "NOT_GROUP_ADMIN")
    assert error_code(await api.error(BANS, {"c": cid}, user=4)) == "NOT_FOUND"  # banned: an outsider now
    assert code_and_reason(await api.execute(UNBAN, {"c": cid, "u": "4"}, user=9)) == ("NOT_FOUND", None)
    dm = (await api.data('mutation { createDirectConversation(userId: "7") { id } }', user=6))[
        "createDirectConversation"
    ]["id"]
    assert code_and_reason(await ban(api, 6, dm, 7)) == ("FORBIDDEN", None)


async def test_the_banned_users_subscriptions_end_after_they_are_told_and_they_read_nothing_more(server, api):
    cid = await api.create_group(1, [2, 3])
    seq = await api.send(3, cid, "before")
    message_id = (
        await api.data("query($c: ID!) { messages(conversationId: $c) { nodes { id } } }", {"c": cid}, user=2)
    )["messages"]["nodes"][0]["id"]
    elsewhere = await api.create_group(5, [6])
    clients = await asyncio.gather(*(ws_connect(server, user) for user in (1, 2, 5)))
    try:
        owner_all = await clients[0].subscribe(EVENTS, {})
        banned_all = await clients[1].subscribe(EVENTS, {})
        banned_here = await clients[1].subscribe(EVENTS, {"c": cid})
        banned_messages = await clients[1].subscribe(NEW, {"c": cid})
        outsider_all = await clients[2].subscribe(EVENTS, {})
        await wait_active_subscriptions(server, 5)
        await ban(api, 1, cid, 5)  # not a member: nobody is told, 5 least of all
        await api.data(
            'mutation($c: ID!) { renameGroup(conversationId: $c, title: "x") { id } }', {"c": elsewhere}, user=5
        )
        assert (await outsider_all.next())["conversationUpdated"]["conversationId"] == elsewhere
        await ban(api, 1, cid, 2)
        told = {"conversationId": cid, "change": "MEMBER_BANNED", "userId": "1", "memberId": "2"}
        assert (await owner_all.next())["conversationUpdated"] == told
        assert (await banned_all.next())["conversationUpdated"] == told
        for ended in (banned_here, banned_messages):
            with pytest.raises(SubscriptionError) as raised:
                while True:  # what was buffered before the end may come first
                    await ended.next()
            assert raised.value.code == "NOT_FOUND"
        # resuming from a cursor, reading the history and the message by its id: as an outsider
        resumed = await clients[1].subscribe(NEW, {"k": [{"conversationId": cid, "afterSeq": 0}]})
        with pytest.raises(SubscriptionError) as raised:
            await resumed.next()
        assert raised.value.code == "NOT_FOUND"
        assert error_code(await api.error(MESSAGES, {"c": cid}, user=2)) == "NOT_FOUND"
        assert await api.execute(NODE, {"id": message_id}, user=2) == await api.execute(
            NODE, {"id": message_id}, user=9
        )
        assert (await api.data(NODE, {"id": message_id}, user=3))["node"] == {"id": message_id}
        # the unban reaches the members, not the one unbanned (no longer a member)
        await api.data(UNBAN, {"c": cid, "u": "2"}, user=1)
        unbanned = (await owner_all.next())["conversationUpdated"]
        assert unbanned == {**told, "change": "MEMBER_UNBANNED"}
        assert seq == 1
    finally:
        await asyncio.gather(*(c.close() for c in clients))


@pytest.fixture
async def scratch(migrated_url: str) -> AsyncIterator[Database]:
    """A database no relay drains: the outbox keeps every row, in the order the conversation's lock gave."""
    url = await scratch_database(migrated_url, "bans_race")
    database = await Database(url, max_size=12).open()
    try:
        yield database
    finally:
        await database.close()
        await drop_database(migrated_url, "bans_race")


@pytest.mark.parametrize("batched", [False, True], ids=["alone", "group-commit"])
async def test_no_message_of_a_banned_member_is_stored_after_the_bans_commit(scratch, batched):
    database = scratch
    cid = await do_create_group(database, "1", "g", ["2", "3"], max_members=100)
    batcher = SendBatcher(database, max_batch=8) if batched else None

    async def send(user: str, k: int) -> int | None:
        try:
            result = await do_send_message(database, user, cid, uuid.uuid4(), f"{user}-{k}", batcher=batcher)
        except NotFound:
            assert user == "2"
            return None
        return result.message.seq

    def wave(first: int) -> list[asyncio.Task[int | None]]:
        return [asyncio.create_task(send(user, k)) for k in range(first, first + 20) for user in ("2", "3")]

    sends = wave(0)
    while True:  # the ban lands while sends are under way
        async with database.connection() as conn:
            if await conn.fetchval("SELECT last_seq FROM conversation WHERE id = $1", cid) >= 10:
                break
    banning = asyncio.create_task(do_ban_member(database, "1", cid, "2"))
    sends += wave(20)  # racing the ban
    await banning
    sends += wave(40)  # after it: 2's are refused
    seqs = await asyncio.gather(*sends)
    acknowledged = {seq for seq in seqs[0::2] if seq is not None}
    assert seqs[-40::2] == [None] * 20 and None not in seqs[1::2]
    async with database.connection() as conn:
        stored = {
            r["seq"]
            for r in await conn.fetch("SELECT seq FROM message WHERE conversation_id = $1 AND sender_id = '2'", cid)
        }
        outbox = [(r["id"], r["payload"]) for r in await conn.fetch("SELECT id, payload FROM outbox ORDER BY id")]
    assert stored == acknowledged and stored  # every stored one was acknowledged, and some were
    # the outbox rows of one conversation are written under its lock: their order is the commits' order
    (banned_at,) = [i for i, p in outbox if p["type"] == events.CONVERSATION_UPDATED and p["change"] == "MEMBER_BANNED"]
    after = [p for i, p in outbox if i > banned_at and p["type"] == events.MESSAGE_NEW]
    assert len(after) >= 20 and all(p["senderId"] == "3" for p in after), after
    assert {p["seq"] for _, p in outbox if p["type"] == events.MESSAGE_NEW and p["senderId"] == "2"} == stored
    with pytest.raises(ChatError) as raised:
        await do_add_members(database, "3", cid, ["2"], max_members=100)
    assert raised.value.extensions["reason"] == "USER_BANNED"
