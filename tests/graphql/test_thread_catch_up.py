"""Thread catch-up: every change of a member's thread state takes their next thread version in the
conversation; sync(afterThreadVersion:) and threadUpdated(cursors:) answer the threads above a version, so a
device offline through replies, reads on another device, follows, unfollows and deletes converges. Against
the session's chatgql (real PostgreSQL), over HTTP and websockets; the lock order under concurrent replies,
reads, follows, unfollows and deletes is held by a race of a few hundred operations."""

from __future__ import annotations

import asyncio
import random
import uuid

from chatgql.graphql import ids

from ..conftest import error_code
from ..support.live import ChatApi, wait_active_subscriptions, ws_connect
from .test_query_count import counting_statements
from .test_replies import reply

STATE = (
    "rootSeq version following lastReplySeq lastReadReplySeq unreadCount replyCount firstUnreadReplySeq participants"
)
SYNC = f"""
query($cursors: [SyncCursor!]!, $n: Int) {{
  sync(cursors: $cursors, limit: $n) {{
    conversationId lastThreadVersion threadsHaveMore threads {{ {STATE} }}
  }}
}}
"""
THREAD = f"query($r: ID!) {{ thread(rootId: $r) {{ {STATE} }} }}"
MARK = "mutation($r: ID!, $s: Long!) { markThreadRead(rootId: $r, replySeq: $s) { version } }"
FOLLOW = "mutation($r: ID!) { followThread(rootId: $r) { version } }"
UNFOLLOW = "mutation($r: ID!) { unfollowThread(rootId: $r) { version } }"
DELETE = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }"
MENTION_REPLY = """
mutation($c: ID!, $m: UUID!, $r: ID, $who: [ID!]) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: "hey", replyTo: $r, mentions: $who) { message { seq } }
}
"""
RESUME = """
subscription($c: ID, $cursors: [ThreadCursor!]) {
  threadUpdated(conversationId: $c, cursors: $cursors) {
    conversationId rootSeq change version lastReplySeq lastReadReplySeq unreadCount following
  }
}
"""


async def sync_threads(api: ChatApi, user: int, cid: str, after: int | None, limit: int = 100) -> dict:
    cursors = [{"conversationId": cid, "afterSeq": 0, "afterThreadVersion": after}]
    return (await api.data(SYNC, {"cursors": cursors, "n": limit}, user=user))["sync"][0]


async def thread(api: ChatApi, user: int, root: str) -> dict:
    return (await api.data(THREAD, {"r": root}, user=user))["thread"]


async def send_root(api: ChatApi, user: int, cid: str, body: str) -> str:
    return ids.message_id(int(cid), await api.send(user, cid, body))


async def test_a_device_offline_through_replies_reads_follows_and_deletes_syncs_exactly_the_changed_threads(api):
    cid = await api.create_group(1, [2, 3])
    a, b, c, d = [await send_root(api, 1, cid, name) for name in "abcd"]
    f = await send_root(api, 3, cid, "f")
    g = await send_root(api, 3, cid, "g")
    for root in (a, b, c):
        await reply(api, 2, cid, root, "first")
    d1 = (await reply(api, 2, cid, d, "to be deleted"))["message"]["seq"]
    await reply(api, 3, cid, f, "f1")
    synced = await sync_threads(api, 1, cid, 0)
    assert [t["rootSeq"] for t in synced["threads"]] == [1, 2, 3, 4]  # the root's author follows each
    held = synced["lastThreadVersion"]
    assert held == synced["threads"][-1]["version"]
    # offline: each of these changes a thread for user 1...
    await reply(api, 3, cid, a, "a2")
    await api.data(MARK, {"r": b, "s": 1}, user=1)  # on another device
    await api.data(UNFOLLOW, {"r": c}, user=1)
    await api.data(DELETE, {"c": cid, "s": d1}, user=2)
    await api.data(FOLLOW, {"r": f}, user=1)
    # ...and these do not: a reply in a thread they do not follow, a read that moves nothing, a follow again
    await reply(api, 2, cid, g, "g1")
    await api.data(MARK, {"r": b, "s": 1}, user=1)
    await api.data(FOLLOW, {"r": f}, user=1)
    back = await sync_threads(api, 1, cid, held)
    assert [t["rootSeq"] for t in back["threads"]] == [1, 2, 3, 4, 5]  # a, b, c, d, f: in the order they changed
    versions = [t["version"] for t in back["threads"]]
    assert versions == sorted(versions) and len(set(versions)) == 5 and versions[0] > held
    assert back["lastThreadVersion"] == versions[-1] and back["threadsHaveMore"] is False
    for got, root in zip(back["threads"], (a, b, c, d, f), strict=True):
        assert got == await thread(api, 1, root)  # each as it is now
    by_root = {t["rootSeq"]: t for t in back["threads"]}
    assert (by_root[1]["lastReplySeq"], by_root[1]["unreadCount"]) == (2, 2)
    assert (by_root[2]["lastReadReplySeq"], by_root[2]["unreadCount"]) == (1, 0)
    assert by_root[3]["following"] is False  # the unfollow comes too
    assert (by_root[4]["replyCount"], by_root[4]["unreadCount"]) == (0, 0)  # the deleted reply
    assert (by_root[5]["following"], by_root[5]["unreadCount"]) == (True, 1)
    # again from lastThreadVersion: nothing
    again = await sync_threads(api, 1, cid, back["lastThreadVersion"])
    assert again["threads"] == [] and again["lastThreadVersion"] == back["lastThreadVersion"]
    # small pages, each from the last thread's version: every thread once
    paged, after = [], held
    while True:
        page = await sync_threads(api, 1, cid, after, limit=2)
        paged += page["threads"]
        if not page["threadsHaveMore"]:
            break
        assert len(page["threads"]) == 2
        after = page["threads"][-1]["version"]
    assert paged == back["threads"]
    # without afterThreadVersion: no threads
    plain = await sync_threads(api, 1, cid, None)
    assert (plain["threads"], plain["lastThreadVersion"], plain["threadsHaveMore"]) == ([], 0, False)


async def test_sync_leaves_out_a_thread_whose_root_the_member_may_not_read_and_other_conversations(api):
    cid = await api.create_group(1, [2])
    old = await send_root(api, 1, cid, "old")
    hide = "mutation($c: ID!) { setHistoryVisibility(conversationId: $c, hideHistory: true) { id } }"
    await api.data(hide, {"c": cid}, user=1)
    await api.add_members(1, cid, [3])
    new = await send_root(api, 1, cid, "new")
    for root in (old, new):
        await api.data(MENTION_REPLY, {"c": cid, "m": str(uuid.uuid4()), "r": root, "who": ["3"]}, user=2)
    other = await api.create_group(3, [1])
    await reply(api, 1, other, await send_root(api, 3, other, "elsewhere"), "r")
    synced = await sync_threads(api, 3, cid, 0)
    assert [t["rootSeq"] for t in synced["threads"]] == [2]
    # a stranger's cursor is NOT_FOUND, as for the messages
    cursors = [{"conversationId": cid, "afterSeq": 0, "afterThreadVersion": 0}]
    assert error_code(await api.error(SYNC, {"cursors": cursors, "n": 5}, user=4)) == "NOT_FOUND"


async def test_a_resumed_thread_subscription_replays_each_change_once_in_version_order_then_goes_live(
    server, api, monkeypatch
):
    """The replay's read is raced deterministically: a reply commits between the subscription's registration
    and its read (so it is both read and, once relayed, buffered), another after the read (only live). Each
    reaches the device once, by version."""
    from chatgql.graphql.features import threads as feature

    cid = await api.create_group(1, [2, 3])
    a, b, c = [await send_root(api, 1, cid, name) for name in "abc"]
    for root in (a, b, c):
        await reply(api, 2, cid, root, "first")
    held = (await sync_threads(api, 1, cid, 0))["lastThreadVersion"]
    await reply(api, 3, cid, a, "missed")  # held + 1
    await api.data(MARK, {"r": b, "s": 1}, user=1)  # held + 2
    await api.data(UNFOLLOW, {"r": c}, user=1)  # held + 3
    real_read = feature.read_thread_replay

    async def racing_read(*args, **kwargs):
        await reply(api, 3, cid, b, "between registration and read")  # held + 4: b again
        replay = await real_read(*args, **kwargs)
        await reply(api, 3, cid, a, "after the read")  # held + 5
        return replay

    monkeypatch.setattr(feature, "read_thread_replay", racing_read)
    async with await ws_connect(server, 1) as ws:
        op = await ws.subscribe(RESUME, {"c": cid, "cursors": [{"conversationId": cid, "afterVersion": held}]})
        got = [e["threadUpdated"] for e in await op.collect(4)]
        monkeypatch.undo()
        await api.data(FOLLOW, {"r": c}, user=1)  # held + 6, live
        got.append((await op.next())["threadUpdated"])
    assert [(e["rootSeq"], e["change"], e["version"]) for e in got] == [
        (1, "REPLY", held + 1),
        (3, "UNFOLLOW", held + 3),
        (2, "REPLY", held + 4),  # b's read is behind its newer reply: once, as it is now
        (1, "REPLY", held + 5),
        (3, "FOLLOW", held + 6),
    ]
    assert got[2]["lastReadReplySeq"] == 1 and got[2]["unreadCount"] == 1
    # a cursor at the clock replays nothing; a stranger's is NOT_FOUND; a cursor of another conversation than
    # conversationId is refused
    async with await ws_connect(server, 1) as ws:
        op = await ws.subscribe(RESUME, {"c": cid, "cursors": [{"conversationId": cid, "afterVersion": held + 6}]})
        await wait_active_subscriptions(server, 1)
        await api.data(MARK, {"r": a, "s": 3}, user=1)
        event = (await op.next())["threadUpdated"]
        assert (event["change"], event["version"]) == ("READ", held + 7)
    async with await ws_connect(server, 4) as ws:
        refused = await ws.subscribe(RESUME, {"c": None, "cursors": [{"conversationId": cid, "afterVersion": 0}]})
        assert (await refused.error()).code == "NOT_FOUND"


async def test_a_replys_statements_do_not_grow_with_its_followers(server, api):
    """A reply takes a version for each follower in its one statement for them: a thread of 101 followers runs
    what a thread of 2 runs."""
    small = await api.create_group(1, [2])
    big = await api.create_group(1, list(range(2, 102)))
    counts = []
    for cid, followers in ((small, [2]), (big, list(range(2, 102)))):
        root = await send_root(api, 1, cid, "root")
        for user in followers:
            await api.data(FOLLOW, {"r": root}, user=user)
        await reply(api, 2, cid, root, "warm")
        with counting_statements(server) as statements:
            await reply(api, 2, cid, root, "counted")
        counts.append(len(statements))
        synced = await sync_threads(api, followers[-1], cid, 0)
        assert synced["threads"][0]["lastReplySeq"] == 2
    assert counts[0] == counts[1], counts


async def test_concurrent_replies_reads_follows_unfollows_and_deletes_never_deadlock_and_converge(api):
    """The lock order (thread rows, then clocks, then thread_member rows) under a race: 300 operations from
    several members on three threads of one group and two of another sharing members, 24 at a time. No error
    but the expected coded ones; afterwards each member's sync from 0 is thread(rootId) for every thread, and
    their versions in a conversation are distinct."""
    rng = random.Random(37)
    one = await api.create_group(1, [2, 3, 4, 5])
    two = await api.create_group(2, [1, 3, 6])
    members = {one: [1, 2, 3, 4, 5], two: [1, 2, 3, 6]}
    roots = {one: [await send_root(api, 1, one, f"r{i}") for i in range(3)]}
    roots[two] = [await send_root(api, 2, two, f"s{i}") for i in range(2)]
    replies: list[tuple[str, int, int]] = []  # (conversation, seq, sender)

    async def op() -> dict:
        cid = rng.choice([one, two])
        user, root = rng.choice(members[cid]), rng.choice(roots[cid])
        kind = rng.choice(["reply", "reply", "reply", "read", "follow", "unfollow", "delete"])
        if kind == "delete" and replies:
            rcid, seq, sender = rng.choice(replies)
            return await api.execute(DELETE, {"c": rcid, "s": seq}, user=sender)
        if kind == "read":
            return await api.execute(MARK, {"r": root, "s": rng.randint(1, 30)}, user=user)
        if kind in ("follow", "unfollow"):
            return await api.execute(FOLLOW if kind == "follow" else UNFOLLOW, {"r": root}, user=user)
        who = [str(rng.choice(members[cid]))] if rng.random() < 0.2 else []
        body = await api.execute(MENTION_REPLY, {"c": cid, "m": str(uuid.uuid4()), "r": root, "who": who}, user=user)
        if "errors" not in body:
            replies.append((cid, body["data"]["sendMessage"]["message"]["seq"], user))
        return body

    gate = asyncio.Semaphore(24)

    async def gated() -> dict:
        async with gate:
            return await op()

    results = await asyncio.gather(*(gated() for _ in range(300)))
    errors = [e for body in results for e in body.get("errors", ())]
    assert not [e for e in errors if "deadlock" in str(e).lower()], errors
    assert {error_code(e) for e in errors} <= {"CONFLICT"}, errors  # a reply deleted twice
    assert len(replies) > 100
    for cid, users in members.items():
        for user in users:
            synced = await sync_threads(api, user, cid, 0)
            versions = [t["version"] for t in synced["threads"]]
            assert len(set(versions)) == len(versions) and versions == sorted(versions)
            assert not versions or versions[-1] <= synced["lastThreadVersion"]
            by_root = {t["rootSeq"]: t for t in synced["threads"]}
            for root in roots[cid]:
                now = await thread(api, user, root)
                if now["version"]:
                    assert by_root[now["rootSeq"]] == now, (user, root)
                else:
                    assert now["rootSeq"] not in by_root and not now["following"]
