"""Threads: a reply's place in its root's thread (its own gap-free reply seq), and who follows it,
against the session's chatgql (real PostgreSQL), the tables inspected with SQL."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import text

from chatgql.graphql import ids

from ..conftest import error_code
from ..support.live import ChatApi, wait_active_subscriptions, ws_connect
from .test_replies import REPLY, message_id, reply


async def thread_rows(engine, cid: str) -> dict:
    async with engine.connect() as conn:
        threads = (
            await conn.execute(
                text("SELECT root_seq, last_reply_seq FROM thread WHERE conversation_id = :c ORDER BY root_seq"),
                {"c": int(cid)},
            )
        ).all()
        replies = (
            await conn.execute(
                text(
                    "SELECT seq, root_seq, reply_seq, thread_only FROM thread_reply"
                    " WHERE conversation_id = :c ORDER BY seq"
                ),
                {"c": int(cid)},
            )
        ).all()
        members = (
            await conn.execute(
                text(
                    "SELECT root_seq, user_id, last_read_reply_seq, following FROM thread_member"
                    " WHERE conversation_id = :c ORDER BY root_seq, user_id"
                ),
                {"c": int(cid)},
            )
        ).all()
    return {
        "threads": [tuple(r) for r in threads],
        "replies": [tuple(r) for r in replies],
        "members": [tuple(r) for r in members],
    }


async def test_replies_are_numbered_per_thread_and_a_reply_to_a_reply_joins_its_root(api, engine):
    cid = await api.create_group(1, [2, 3])
    await api.send(1, cid, "root a")  # 1
    await api.send(2, cid, "root b")  # 2
    a, b = await message_id(api, 1, cid, 1), await message_id(api, 1, cid, 2)
    await reply(api, 2, cid, a, "a1")  # 3
    await reply(api, 3, cid, b, "b1")  # 4
    await api.send(1, cid, "plain")  # 5: in no thread
    a1 = await message_id(api, 1, cid, 3)
    await reply(api, 3, cid, a1, "a2, quoting a1")  # 6: in a's thread
    again = str(uuid.uuid4())
    await reply(api, 2, cid, a, "a3", cmid=again)  # 7
    await reply(api, 2, cid, a, "a3", cmid=again)  # a retry: numbered once
    rows = await thread_rows(engine, cid)
    assert rows["threads"] == [(1, 3), (2, 1)]
    assert rows["replies"] == [(3, 1, 1, False), (4, 2, 1, False), (6, 1, 2, False), (7, 1, 3, False)]
    # the root's author and each replier follow; a replier has read up to their own newest reply
    assert rows["members"] == [
        (1, "1", 0, True),
        (1, "2", 3, True),
        (1, "3", 2, True),
        (2, "2", 0, True),
        (2, "3", 1, True),
    ]


async def test_concurrent_replies_to_one_thread_take_every_reply_seq_once(api, engine):
    cid = await api.create_group(1, [2, 3])
    await api.send(1, cid, "root")
    root = await message_id(api, 1, cid, 1)
    await asyncio.gather(*(reply(api, 2 + i % 2, cid, root, f"r{i}") for i in range(12)))
    rows = await thread_rows(engine, cid)
    assert rows["threads"] == [(1, 12)]
    # gap-free, and in the conversation's seq order (numbered under the conversation's lock)
    assert [(seq, reply_seq) for seq, _, reply_seq, _ in rows["replies"]] == [(s, s - 1) for s in range(2, 14)]


async def test_a_refused_reply_files_nothing(api, engine):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "root")
    other = await api.create_group(1, [2])
    await api.send(1, other, "elsewhere")
    elsewhere = await message_id(api, 1, other, 1)
    variables = {"c": cid, "m": str(uuid.uuid4()), "b": "x", "r": elsewhere}
    await api.error(REPLY, variables, user=2)
    assert await thread_rows(engine, cid) == {"threads": [], "replies": [], "members": []}


THREAD_FIELDS = (
    "conversationId rootSeq replyCount lastReplySeq lastReadReplySeq unreadCount firstUnreadReplySeq following"
    " participants"
    " root { seq } lastReply { seq body }"
)
THREAD = f"query($r: ID!) {{ thread(rootId: $r) {{ {THREAD_FIELDS} }} }}"
MARK = f"mutation($r: ID!, $s: Long!) {{ markThreadRead(rootId: $r, replySeq: $s) {{ {THREAD_FIELDS} }} }}"
FOLLOW = f"mutation($r: ID!) {{ followThread(rootId: $r) {{ {THREAD_FIELDS} }} }}"
UNFOLLOW = f"mutation($r: ID!) {{ unfollowThread(rootId: $r) {{ {THREAD_FIELDS} }} }}"
SET_ROLE = "mutation($c: ID!, $u: ID!) { setMemberRole(conversationId: $c, userId: $u, role: ADMIN) { role } }"


async def thread(api: ChatApi, user: int, root: str) -> dict:
    return (await api.data(THREAD, {"r": root}, user=user))["thread"]


async def test_a_thread_has_its_own_watermark_and_marking_it_read_is_monotonic_and_clamped(api):
    cid = await api.create_group(1, [2, 3])
    await api.send(1, cid, "root")
    root = await message_id(api, 1, cid, 1)
    assert await thread(api, 3, root) == {
        "conversationId": cid,
        "rootSeq": 1,
        "replyCount": 0,
        "lastReplySeq": 0,
        "lastReadReplySeq": 0,
        "unreadCount": 0,
        "firstUnreadReplySeq": None,
        "following": False,
        "participants": ["1"],
        "root": {"seq": 1},
        "lastReply": None,
    }
    for i in range(3):
        await reply(api, 2, cid, root, f"r{i}")
    seen = await thread(api, 3, root)
    assert (seen["lastReplySeq"], seen["unreadCount"], seen["replyCount"]) == (3, 3, 3)
    assert seen["participants"] == ["1", "2"] and seen["lastReply"] == {"seq": 4, "body": "r2"}
    assert (await thread(api, 1, root))["following"] is True  # the root's author
    marked = (await api.data(MARK, {"r": root, "s": 2}, user=3))["markThreadRead"]
    assert (marked["lastReadReplySeq"], marked["unreadCount"], marked["following"]) == (2, 1, False)
    lower = (await api.data(MARK, {"r": root, "s": 1}, user=3))["markThreadRead"]
    assert lower["lastReadReplySeq"] == 2  # never lowered
    past = (await api.data(MARK, {"r": root, "s": 99}, user=3))["markThreadRead"]
    assert (past["lastReadReplySeq"], past["unreadCount"]) == (3, 0)  # clamped
    # the conversation's read state did not move
    conv = await api.data("query($c: ID!) { conversation(id: $c) { lastReadSeq } }", {"c": cid}, user=3)
    assert conv["conversation"]["lastReadSeq"] == 0
    # a reply's id names its root's thread
    assert (await thread(api, 3, await message_id(api, 3, cid, 3)))["rootSeq"] == 1


async def test_follow_and_unfollow_and_a_reply_follows_again(api):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "root")
    root = await message_id(api, 1, cid, 1)
    assert (await api.data(FOLLOW, {"r": root}, user=2))["followThread"]["following"] is True
    assert (await api.data(UNFOLLOW, {"r": root}, user=2))["unfollowThread"]["following"] is False
    assert (await api.data(UNFOLLOW, {"r": root}, user=1))["unfollowThread"]["following"] is False
    await reply(api, 2, cid, root, "back in")
    assert (await thread(api, 2, root))["following"] is True  # their reply follows it again
    assert (await thread(api, 1, root))["following"] is False  # the author's unfollow holds


@pytest.mark.parametrize("who", ["owner", "admin", "member", "non-member", "anonymous"])
async def test_who_may_read_mark_and_follow_a_thread(api, engine, who):
    cid = await api.create_group(1, [2, 3])
    await api.data(SET_ROLE, {"c": cid, "u": "2"}, user=1)
    await api.send(1, cid, "root")
    root = await message_id(api, 1, cid, 1)
    await reply(api, 3, cid, root, "r")
    user = {"owner": 1, "admin": 2, "member": 3, "non-member": 4, "anonymous": None}[who]
    calls = [(THREAD, {"r": root}), (MARK, {"r": root, "s": 1}), (FOLLOW, {"r": root}), (UNFOLLOW, {"r": root})]
    before = await thread_rows(engine, cid)
    for query, variables in calls:
        if user in (1, 2, 3):
            assert "errors" not in await api.execute(query, variables, user=user)
        else:
            expected = "UNAUTHENTICATED" if user is None else "NOT_FOUND"
            assert error_code(await api.error(query, variables, user=user)) == expected
    if user not in (1, 2, 3):
        assert await thread_rows(engine, cid) == before  # a refused call writes nothing


async def test_a_bad_or_missing_root_is_a_coded_error(api):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "root")
    assert error_code(await api.error(THREAD, {"r": cid}, user=1)) == "BAD_USER_INPUT"  # a conversation id
    assert error_code(await api.error(THREAD, {"r": "nonsense"}, user=1)) == "BAD_USER_INPUT"
    assert error_code(await api.error(THREAD, {"r": ids.message_id(int(cid), 9)}, user=1)) == "NOT_FOUND"
    bad = await api.error(MARK, {"r": ids.message_id(int(cid), 1), "s": -1}, user=1)
    assert error_code(bad) == "BAD_USER_INPUT"


THREAD_ONLY = """
mutation($c: ID!, $m: UUID!, $b: String!, $r: ID, $t: Boolean!) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: $b, replyTo: $r, threadOnly: $t) { message { seq } }
}
"""
COUNTS = "query($c: ID!) { conversation(id: $c) { lastSeq lastReadSeq unreadCount firstUnreadSeq } }"
DELETE = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }"
MARK_UNREAD = "mutation($c: ID!, $s: Long!) { markUnread(conversationId: $c, fromSeq: $s) { unreadCount } }"


async def send_reply(api: ChatApi, user: int, cid: str, root: str, *, thread_only: bool) -> int:
    variables = {"c": cid, "m": str(uuid.uuid4()), "b": "r", "r": root, "t": thread_only}
    return (await api.data(THREAD_ONLY, variables, user=user))["sendMessage"]["message"]["seq"]


async def counts(api: ChatApi, user: int, cid: str) -> dict:
    return (await api.data(COUNTS, {"c": cid}, user=user))["conversation"]


async def test_a_thread_only_reply_counts_in_its_thread_not_in_its_conversation(api):
    cid = await api.create_group(1, [2, 3])
    await api.send(1, cid, "root")  # 1
    root = await message_id(api, 1, cid, 1)
    await api.mark_read(3, cid, 1)
    await send_reply(api, 2, cid, root, thread_only=True)  # 2: thread only
    await send_reply(api, 2, cid, root, thread_only=False)  # 3: also in the conversation
    await send_reply(api, 2, cid, root, thread_only=True)  # 4: thread only
    await api.send(1, cid, "plain")  # 5
    assert await counts(api, 3, cid) == {"lastSeq": 5, "lastReadSeq": 1, "unreadCount": 2, "firstUnreadSeq": 3}
    totals = (await api.data("{ viewer { totalUnread } }", user=3))["viewer"]["totalUnread"]
    assert totals >= 2
    seen = await thread(api, 3, root)
    assert (seen["lastReplySeq"], seen["unreadCount"]) == (3, 3)  # every reply counts in the thread
    # a deleted thread-only reply is counted once (it was never in the conversation's unread)
    await api.data(DELETE, {"c": cid, "s": 2}, user=2)
    assert (await counts(api, 3, cid))["unreadCount"] == 2
    await api.data(DELETE, {"c": cid, "s": 3}, user=2)  # the reply also sent to the conversation
    assert await counts(api, 3, cid) == {"lastSeq": 5, "lastReadSeq": 1, "unreadCount": 1, "firstUnreadSeq": 5}
    # reading and rewinding keep thread-only replies out
    await api.mark_read(3, cid, 5)
    assert (await counts(api, 3, cid))["unreadCount"] == 0
    assert (await api.data(MARK_UNREAD, {"c": cid, "s": 2}, user=3))["markUnread"]["unreadCount"] == 1
    assert await counts(api, 3, cid) == {"lastSeq": 5, "lastReadSeq": 1, "unreadCount": 1, "firstUnreadSeq": 5}


async def test_thread_only_without_reply_to_is_bad_user_input(api, engine):
    cid = await api.create_group(1, [2])
    variables = {"c": cid, "m": str(uuid.uuid4()), "b": "x", "r": None, "t": True}
    assert error_code(await api.error(THREAD_ONLY, variables, user=1)) == "BAD_USER_INPUT"
    assert (await counts(api, 1, cid))["lastSeq"] == 0


MENTION_REPLY = """
mutation($c: ID!, $m: UUID!, $r: ID, $who: [ID!]) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: "hey", replyTo: $r, mentions: $who) { message { seq } }
}
"""


async def mention_reply(api: ChatApi, user: int, cid: str, root: str | None, who: list[str]) -> int:
    variables = {"c": cid, "m": str(uuid.uuid4()), "r": root, "who": who}
    return (await api.data(MENTION_REPLY, variables, user=user))["sendMessage"]["message"]["seq"]


async def test_a_member_mentioned_in_a_reply_follows_the_thread_again_after_an_unfollow(api):
    cid = await api.create_group(1, [2, 3, 4])
    await mention_reply(api, 1, cid, None, ["4"])  # 1: a root that mentions 4 (not a reply: no thread)
    root = await message_id(api, 1, cid, 1)
    await mention_reply(api, 2, cid, root, ["3"])
    seen = await thread(api, 3, root)
    assert (seen["following"], seen["unreadCount"], seen["firstUnreadReplySeq"]) == (True, 1, 1)
    assert seen["participants"] == ["1", "2"]  # mentioned is not replied
    assert (await thread(api, 4, root))["following"] is False
    await api.data(UNFOLLOW, {"r": root}, user=3)
    await reply(api, 2, cid, root, "no mention")
    assert (await thread(api, 3, root))["following"] is False
    await mention_reply(api, 2, cid, root, ["3"])
    assert (await thread(api, 3, root))["following"] is True


REPLIES = f"""
query($r: ID!, $a: String, $n: Int) {{
  thread(rootId: $r) {{ {THREAD_FIELDS} replies(first: $n, after: $a) {{ replySeq message {{ seq deletedAt }} }} }}
}}
"""


async def test_a_deleted_reply_leaves_a_tombstone_at_its_reply_seq_and_leaves_the_threads_unread(api):
    cid = await api.create_group(1, [2, 3])
    await api.send(1, cid, "root")  # 1
    root = await message_id(api, 1, cid, 1)
    for i in range(4):
        await reply(api, 2, cid, root, f"r{i}")  # seqs 2..5, replySeqs 1..4
    await api.data(MARK, {"r": root, "s": 1}, user=3)
    await api.data(DELETE, {"c": cid, "s": 3}, user=2)  # replySeq 2
    seen = (await api.data(REPLIES, {"r": root, "n": 50}, user=3))["thread"]
    assert (seen["lastReplySeq"], seen["replyCount"], seen["unreadCount"], seen["firstUnreadReplySeq"]) == (4, 3, 2, 3)
    assert [(r["replySeq"], r["message"]["seq"], r["message"]["deletedAt"] is not None) for r in seen["replies"]] == [
        (1, 2, False),
        (2, 3, True),  # the tombstone keeps its place
        (3, 4, False),
        (4, 5, False),
    ]
    page = (await api.data(REPLIES, {"r": root, "n": 2, "a": "2"}, user=3))["thread"]["replies"]
    assert [r["replySeq"] for r in page] == [3, 4]
    await api.data(DELETE, {"c": cid, "s": 5}, user=2)  # the newest reply
    seen = await thread(api, 3, root)
    assert (seen["unreadCount"], seen["lastReply"]) == (1, {"seq": 4, "body": "r2"})
    await api.data(DELETE, {"c": cid, "s": 4}, user=1)  # the owner deletes another's reply (moderation)
    seen = await thread(api, 3, root)
    assert (seen["unreadCount"], seen["firstUnreadReplySeq"], seen["replyCount"]) == (0, None, 1)
    # the replier's own watermark is past every deletion: nothing goes negative
    assert (await thread(api, 2, root))["unreadCount"] == 0
    # a reply after the deletes takes the next reply seq (the tombstones keep theirs)
    await reply(api, 1, cid, root, "r4")
    seen = await thread(api, 3, root)
    assert (seen["lastReplySeq"], seen["unreadCount"], seen["firstUnreadReplySeq"]) == (5, 1, 5)
    assert error_code(await api.error(REPLIES, {"r": root, "n": 0}, user=3)) == "BAD_USER_INPUT"


MY_THREADS = """
query($n: Int, $a: String) {
  myThreads(first: $n, after: $a) {
    nodes { conversationId rootSeq unreadCount firstUnreadReplySeq }
    pageInfo { hasNextPage endCursor }
  }
  viewer { threadUnread unreadThreads }
}
"""


async def my_threads(api: ChatApi, user: int, n: int = 50, after: str | None = None) -> dict:
    return await api.data(MY_THREADS, {"n": n, "a": after}, user=user)


async def test_my_threads_lists_the_followed_threads_newest_activity_first_with_the_viewers_totals(api):
    one = await api.create_group(1, [2, 3])
    two = await api.create_group(2, [1, 3])
    await api.send(1, one, "root a")  # one:1
    await api.send(2, two, "root b")  # two:1
    await api.send(3, one, "root c")  # one:2
    a, b, c = (
        await message_id(api, 1, one, 1),
        await message_id(api, 1, two, 1),
        await message_id(api, 1, one, 2),
    )
    await reply(api, 2, one, a, "a1")
    await mention_reply(api, 3, two, b, ["1"])  # 1 follows b: mentioned
    await reply(api, 2, two, b, "b2")
    await reply(api, 2, one, c, "c1")  # user 1 does not follow c
    await reply(api, 3, one, a, "a2")  # a: the newest activity
    seen = await my_threads(api, 1)
    assert seen["myThreads"]["nodes"] == [
        {"conversationId": one, "rootSeq": 1, "unreadCount": 2, "firstUnreadReplySeq": 1},
        {"conversationId": two, "rootSeq": 1, "unreadCount": 2, "firstUnreadReplySeq": 1},
    ]
    assert seen["viewer"] == {"threadUnread": 4, "unreadThreads": 2}
    # pages of one visit each thread once
    first = (await my_threads(api, 1, n=1))["myThreads"]
    assert first["pageInfo"]["hasNextPage"] is True and first["nodes"][0]["rootSeq"] == 1
    second = (await my_threads(api, 1, n=1, after=first["pageInfo"]["endCursor"]))["myThreads"]
    assert [n["conversationId"] for n in second["nodes"]] == [two] and second["pageInfo"]["hasNextPage"] is False
    # reading, following and unfollowing move the totals; a thread not followed counts nowhere
    await api.data(MARK, {"r": a, "s": 1}, user=1)
    await api.data(FOLLOW, {"r": c}, user=1)
    await api.data(UNFOLLOW, {"r": b}, user=1)
    seen = await my_threads(api, 1)
    assert [(n["conversationId"], n["rootSeq"], n["unreadCount"]) for n in seen["myThreads"]["nodes"]] == [
        (one, 1, 1),
        (one, 2, 1),
    ]
    assert seen["viewer"] == {"threadUnread": 2, "unreadThreads": 2}
    # leaving a conversation takes its threads out
    await api.data("mutation($c: ID!) { leaveGroup(conversationId: $c) { conversationId } }", {"c": one}, user=1)
    seen = await my_threads(api, 1)
    assert seen["myThreads"]["nodes"] == [] and seen["viewer"] == {"threadUnread": 0, "unreadThreads": 0}
    assert error_code(await api.error(MY_THREADS, {"n": 5, "a": "nonsense"}, user=1)) == "BAD_USER_INPUT"
    assert error_code(await api.error(MY_THREADS, {"n": 5}, user=None)) == "UNAUTHENTICATED"


HIDE_HISTORY = "mutation($c: ID!) { setHistoryVisibility(conversationId: $c, hideHistory: true) { id } }"


async def test_a_late_member_who_may_not_read_the_root_gets_not_found_for_its_thread(api):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "old root")  # 1
    old = await message_id(api, 1, cid, 1)
    await api.data(HIDE_HISTORY, {"c": cid}, user=1)
    await api.add_members(1, cid, [3])
    await api.send(1, cid, "new root")  # 2
    new = await message_id(api, 1, cid, 2)
    await mention_reply(api, 2, cid, old, ["3"])  # 3 is mentioned in a thread whose root they may not read
    await mention_reply(api, 2, cid, new, ["3"])
    assert error_code(await api.error(THREAD, {"r": old}, user=3)) == "NOT_FOUND"
    assert error_code(await api.error(FOLLOW, {"r": old}, user=3)) == "NOT_FOUND"
    assert (await thread(api, 3, new))["unreadCount"] == 1
    seen = await my_threads(api, 3)
    assert [n["rootSeq"] for n in seen["myThreads"]["nodes"]] == [2]
    assert seen["viewer"] == {"threadUnread": 1, "unreadThreads": 1}


THREAD_EVENTS = """
subscription($c: ID) { threadUpdated(conversationId: $c) {
  conversationId rootSeq rootId change lastReplySeq lastReadReplySeq unreadCount following } }
"""


async def test_thread_updates_reach_each_follower_and_the_viewers_own_devices_only(api, server):
    cid = await api.create_group(1, [2, 3])
    await api.send(2, cid, "root")  # 1: 2 follows it
    root = await message_id(api, 1, cid, 1)
    phone, laptop, other = await asyncio.gather(ws_connect(server, 2), ws_connect(server, 2), ws_connect(server, 3))
    try:
        ops = [
            await phone.subscribe(THREAD_EVENTS, {"c": cid}),
            await laptop.subscribe(THREAD_EVENTS, {}),
            await other.subscribe(THREAD_EVENTS, {}),
        ]
        await wait_active_subscriptions(server, 3)
        await reply(api, 1, cid, root, "r1")  # 3 does not follow: told nothing
        expected = {
            "conversationId": cid,
            "rootSeq": 1,
            "rootId": root,
            "change": "REPLY",
            "lastReplySeq": 1,
            "lastReadReplySeq": 0,
            "unreadCount": 1,
            "following": True,
        }
        for op in ops[:2]:
            assert (await op.next())["threadUpdated"] == expected
        await api.data(MARK, {"r": root, "s": 1}, user=2)
        for op in ops[:2]:
            event = (await op.next())["threadUpdated"]
            assert (event["change"], event["lastReadReplySeq"], event["unreadCount"]) == ("READ", 1, 0)
        await api.data(FOLLOW, {"r": root}, user=3)  # 3's first event is their own follow
        event = (await ops[2].next())["threadUpdated"]
        assert (event["change"], event["following"], event["unreadCount"]) == ("FOLLOW", True, 1)
        await api.data(UNFOLLOW, {"r": root}, user=2)
        for op in ops[:2]:
            assert (await op.next())["threadUpdated"]["change"] == "UNFOLLOW"
        await reply(api, 1, cid, root, "r2")  # 3 follows now, 2 does not
        event = (await ops[2].next())["threadUpdated"]
        assert (event["change"], event["lastReplySeq"], event["unreadCount"]) == ("REPLY", 2, 2)
        await api.data(FOLLOW, {"r": root}, user=2)
        for op in ops[:2]:  # 2's next event is their follow, not the reply they no longer followed
            assert (await op.next())["threadUpdated"]["change"] == "FOLLOW"
        # a non-member may not subscribe to the conversation's threads
        stranger = await ws_connect(server, 4)
        try:
            refused = await stranger.subscribe(THREAD_EVENTS, {"c": cid})
            assert (await refused.error()).code == "NOT_FOUND"
        finally:
            await stranger.close()
    finally:
        await asyncio.gather(phone.close(), laptop.close(), other.close())
