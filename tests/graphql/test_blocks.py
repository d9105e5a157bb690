"""Blocking (docs/guide/moderation.md): a block refuses the pair's direct conversation (creating it, and
sending in it, either way, with the same coded answer), adding either to a group by the other; messages
in shared groups stay and say their sender is blocked by the viewer; the block list pages; blocking is
idempotent; unblocking restores nothing refused meanwhile; no send is stored after a block has committed.
Against the session's chatgql and its PostgreSQL. Every test has users of its own: a block is app-wide."""

from __future__ import annotations

import asyncio
import uuid

from ..conftest import error_code
from ..support.live import ChatApi, wait_active_subscriptions, ws_connect

BLOCK = "mutation($u: ID!) { blockUser(userId: $u) { userId blocked changed } }"
UNBLOCK = "mutation($u: ID!) { unblockUser(userId: $u) { userId blocked changed } }"
DIRECT = "mutation($u: ID!) { createDirectConversation(userId: $u) { id } }"
SEND = """mutation($c: ID!, $m: UUID!, $b: String!) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { seq } duplicate } }"""
BLOCKED_LIST = "query($f: Int, $a: ID) { viewer { blockedUsers(first: $f, after: $a) { userId blockedAt } } }"
MESSAGES = """query($c: ID!) {
  messages(conversationId: $c, first: 50) { nodes { seq senderId senderBlockedByViewer } }
  conversation(id: $c) { lastSeq unreadCount } }"""
LAST_SEQ = "query($c: ID!) { conversation(id: $c) { lastSeq } }"


def users(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:10]
    return [f"blk-{tag}-{i}" for i in range(n)]


async def send_error(api: ChatApi, user: str, cid: str) -> dict:
    return await api.error(SEND, {"c": cid, "m": str(uuid.uuid4()), "b": "x"}, user=user)


async def direct(api: ChatApi, a: str, b: str) -> str:
    return (await api.data(DIRECT, {"u": b}, user=a))["createDirectConversation"]["id"]


async def test_a_block_refuses_the_direct_chat_both_ways_with_one_answer_and_unblock_restores_it(api):
    a, b = users(2)
    cid = await direct(api, a, b)
    await api.send(b, cid, "before")
    assert (await api.data(BLOCK, {"u": b}, user=a))["blockUser"] == {"userId": b, "blocked": True, "changed": True}
    again = (await api.data(BLOCK, {"u": b}, user=a))["blockUser"]
    assert again == {"userId": b, "blocked": True, "changed": False}  # idempotent
    from_blocked = await send_error(api, b, cid)
    from_blocker = await send_error(api, a, cid)
    for error in (from_blocked, from_blocker):
        assert error_code(error) == "FORBIDDEN" and error["extensions"]["reason"] == "BLOCKED"
    assert from_blocked["message"] == from_blocker["message"]  # the blocked user learns no more than the blocker
    for x, y in ((a, b), (b, a)):
        error = await api.error(DIRECT, {"u": y}, user=x)
        assert error_code(error) == "FORBIDDEN" and error["extensions"]["reason"] == "BLOCKED"
    history = await api.data(MESSAGES, {"c": cid}, user=a)
    assert history["conversation"]["lastSeq"] == 1  # the history stays readable, nothing new in it
    assert history["messages"]["nodes"] == [{"seq": 1, "senderId": b, "senderBlockedByViewer": True}]
    unblocked = (await api.data(UNBLOCK, {"u": b}, user=a))["unblockUser"]
    assert unblocked == {"userId": b, "blocked": False, "changed": True}
    assert (await api.data(UNBLOCK, {"u": b}, user=a))["unblockUser"]["changed"] is False
    assert (await api.data(LAST_SEQ, {"c": cid}, user=a))["conversation"]["lastSeq"] == 1  # nothing refused came back
    assert await api.send(b, cid, "after") == 2
    assert await direct(api, a, b) == cid


async def test_a_block_made_first_refuses_creating_the_direct_chat(api):
    a, b = users(2)
    await api.data(BLOCK, {"u": a}, user=b)
    for x, y in ((a, b), (b, a)):
        error = await api.error(DIRECT, {"u": y}, user=x)
        assert error["extensions"]["reason"] == "BLOCKED"
    await api.data(UNBLOCK, {"u": a}, user=b)
    await direct(api, a, b)


async def test_neither_adds_the_other_to_a_group_and_shared_groups_keep_their_messages(api):
    a, b, c = users(3)
    shared = await api.create_group(c, [a, b])
    await api.send(b, shared, "from b")
    await api.data(BLOCK, {"u": b}, user=a)
    for owner, other in ((a, b), (b, a)):
        error = await api.error(
            'mutation($m: [ID!]!) { createGroup(title: "g", memberIds: $m) { id } }', {"m": [c, other]}, user=owner
        )
        assert error_code(error) == "FORBIDDEN" and error["extensions"]["reason"] == "BLOCKED"
    group = await api.create_group(a, [c])
    error = await api.error(
        "mutation($c: ID!, $u: [ID!]!) { addMembers(conversationId: $c, userIds: $u) { id } }",
        {"c": group, "u": [b]},
        user=a,
    )
    assert error["extensions"]["reason"] == "BLOCKED"
    await api.add_members(c, group, [b])  # a third member may add them: the block is between the two
    await api.send(b, shared, "still here")  # in a shared group both still write
    await api.send(c, shared, "from c")
    seen_by_a = await api.data(MESSAGES, {"c": shared}, user=a)
    assert [(n["senderId"], n["senderBlockedByViewer"]) for n in seen_by_a["messages"]["nodes"]] == [
        (b, True),
        (b, True),
        (c, False),
    ]
    assert seen_by_a["conversation"]["unreadCount"] == 3  # unread stays lastSeq - lastReadSeq
    seen_by_b = await api.data(MESSAGES, {"c": shared}, user=b)
    assert not any(n["senderBlockedByViewer"] for n in seen_by_b["messages"]["nodes"])


async def test_the_block_list_pages_by_id_and_is_the_viewers_own(api):
    me, *others = users(5)
    for other in reversed(others):
        await api.data(BLOCK, {"u": other}, user=me)
    first = (await api.data(BLOCKED_LIST, {"f": 3}, user=me))["viewer"]["blockedUsers"]
    assert [row["userId"] for row in first] == others[:3]
    rest = (await api.data(BLOCKED_LIST, {"f": 3, "a": others[2]}, user=me))["viewer"]["blockedUsers"]
    assert [row["userId"] for row in rest] == others[3:]
    assert (await api.data(BLOCKED_LIST, {}, user=others[0]))["viewer"]["blockedUsers"] == []  # not who blocked them
    error = await api.error(BLOCKED_LIST, {"f": -1}, user=me)
    assert error_code(error) == "BAD_USER_INPUT"


async def test_bad_block_requests_are_coded_errors_that_write_nothing(api):
    (me,) = users(1)
    assert error_code(await api.error(BLOCK, {"u": me}, user=me)) == "BAD_USER_INPUT"
    assert error_code(await api.error(BLOCK, {"u": ""}, user=me)) == "BAD_USER_INPUT"
    assert error_code(await api.error(BLOCK, {"u": "x"})) == "UNAUTHENTICATED"
    assert (await api.data(BLOCKED_LIST, {}, user=me))["viewer"]["blockedUsers"] == []


async def test_no_send_is_stored_after_a_block_has_committed(api):
    """Many senders on both sides race a block: each keeps sending until refused; once blockUser has
    answered, the conversation's lastSeq never moves again."""
    a, b = users(2)
    cid = await direct(api, a, b)
    started = asyncio.Event()
    sent = 0

    async def sender(user: str) -> str:
        nonlocal sent
        while True:
            body = await api.execute(SEND, {"c": cid, "m": str(uuid.uuid4()), "b": "race"}, user=user)
            if "errors" in body:
                return body["errors"][0]["extensions"].get("reason")
            sent += 1
            if sent >= 4:
                started.set()

    tasks = [asyncio.create_task(sender(user)) for user in (a, b) * 4]
    await started.wait()
    await api.data(BLOCK, {"u": b}, user=a)
    at_block = (await api.data(LAST_SEQ, {"c": cid}, user=a))["conversation"]["lastSeq"]
    assert await asyncio.gather(*tasks) == ["BLOCKED"] * 8
    assert (await api.data(LAST_SEQ, {"c": cid}, user=a))["conversation"]["lastSeq"] == at_block == sent


async def test_a_block_racing_the_direct_chats_creation_leaves_no_chat_to_write_in(api):
    """For many pairs at once: one creates the direct chat while the other blocks. Whichever commits first,
    once both answered no message can be sent between them, and the chat, if created, is the pair's one."""
    pairs = [users(2) for _ in range(12)]

    async def race(a: str, b: str) -> None:
        created, _ = await asyncio.gather(api.execute(DIRECT, {"u": b}, user=a), api.data(BLOCK, {"u": a}, user=b))
        if "errors" in created:
            assert created["errors"][0]["extensions"]["reason"] == "BLOCKED"
            return
        cid = created["data"]["createDirectConversation"]["id"]
        assert (await send_error(api, a, cid))["extensions"]["reason"] == "BLOCKED"

    await asyncio.gather(*(race(a, b) for a, b in pairs))


async def test_block_changed_reaches_the_blockers_devices_only(api, server):
    a, b = users(2)
    mine = await ws_connect(server, a)
    theirs = await ws_connect(server, b)
    try:
        before = server.runtime.deps.dispatcher.active
        op_a = await mine.subscribe("subscription { blockChanged { userId blocked } }")
        op_b = await theirs.subscribe("subscription { blockChanged { userId blocked } }")
        await wait_active_subscriptions(server, before + 2)
        await api.data(BLOCK, {"u": b}, user=a)
        await api.data(UNBLOCK, {"u": b}, user=a)
        assert await op_a.next() == {"blockChanged": {"userId": b, "blocked": True}}
        assert await op_a.next() == {"blockChanged": {"userId": b, "blocked": False}}
        await api.data(BLOCK, {"u": a}, user=b)  # b's own block reaches b: nothing of a's came before it
        assert await op_b.next() == {"blockChanged": {"userId": a, "blocked": True}}
    finally:
        await mine.close()
        await theirs.close()
