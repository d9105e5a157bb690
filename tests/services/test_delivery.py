"""Delivered receipts: markDelivered's monotonic, clamped watermark, read implies delivered,
Message.delivered / deliveredCount, deliveryUpdated, and big groups (no counts, no events)."""

from __future__ import annotations

import asyncio
import random

from tests.conftest import error_code
from tests.support.live import ChatApi, wait_active_subscriptions, ws_connect

DELIVERED = """
mutation($c: ID!, $s: Long!) { markDelivered(conversationId: $c, seq: $s) { conversationId deliveredSeq advanced } }
"""
MANY = """
mutation($items: [DeliveredCursor!]!) { markDeliveredMany(items: $items) { conversationId deliveredSeq advanced } }
"""
MESSAGES = """
query($c: ID!) { messages(conversationId: $c, first: 50, after: "0") {
  nodes { seq delivered deliveredCount seen seenByCount } } }
"""
EVENTS = "subscription($c: ID) { deliveryUpdated(conversationId: $c) { conversationId userId deliveredSeq } }"


async def delivered(api: ChatApi, user: int, cid: str, seq: int) -> dict:
    return (await api.data(DELIVERED, {"c": cid, "s": seq}, user=user))["markDelivered"]


async def marks(api: ChatApi, user: int, cid: str) -> dict[int, tuple]:
    nodes = (await api.data(MESSAGES, {"c": cid}, user=user))["messages"]["nodes"]
    return {n["seq"]: (n["delivered"], n["deliveredCount"]) for n in nodes}


async def direct(api: ChatApi, a: int, b: int) -> str:
    data = await api.data("mutation($u: ID!) { createDirectConversation(userId: $u) { id } }", {"u": str(b)}, user=a)
    return data["createDirectConversation"]["id"]


async def test_the_delivered_watermark_is_monotonic_and_clamped(server, http):
    api = ChatApi.of(server, http)
    cid = await direct(api, 1, 2)
    for _ in range(3):
        await api.send(1, cid)
    assert await delivered(api, 2, cid, 2) == {"conversationId": cid, "deliveredSeq": 2, "advanced": True}
    assert await marks(api, 1, cid) == {1: (True, 1), 2: (True, 1), 3: (False, 0)}
    assert await delivered(api, 2, cid, 1) == {"conversationId": cid, "deliveredSeq": 2, "advanced": False}
    assert await delivered(api, 2, cid, 99) == {"conversationId": cid, "deliveredSeq": 3, "advanced": True}
    assert await marks(api, 1, cid) == {1: (True, 1), 2: (True, 1), 3: (True, 1)}
    # the sender's own delivery does not count for its own messages
    assert (await marks(api, 2, cid))[3] == (True, 1)


async def test_read_implies_delivered(server, http):
    api = ChatApi.of(server, http)
    cid = await direct(api, 1, 2)
    for _ in range(3):
        await api.send(1, cid)
    await api.mark_read(2, cid, 3)
    assert await marks(api, 1, cid) == {1: (True, 1), 2: (True, 1), 3: (True, 1)}
    assert await delivered(api, 2, cid, 2) == {"conversationId": cid, "deliveredSeq": 3, "advanced": False}


async def test_groups_count_the_members_who_have_it(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2, 3])
    await api.send(1, cid)
    await api.send(1, cid)
    await delivered(api, 2, cid, 2)
    await api.mark_read(3, cid, 1)
    assert await marks(api, 1, cid) == {1: (True, 2), 2: (False, 1)}
    await delivered(api, 3, cid, 2)
    assert await marks(api, 1, cid) == {1: (True, 2), 2: (True, 2)}


async def test_many_conversations_in_one_call_all_or_nothing(server, http, engine):
    api = ChatApi.of(server, http)
    a, b = await direct(api, 1, 2), await api.create_group(1, [2])
    foreign = await direct(api, 1, 3)
    for cid in (a, b, b):
        await api.send(1, cid)
    answer = await api.data(MANY, {"items": [{"conversationId": a, "seq": 5}, {"conversationId": b, "seq": 1}]}, user=2)
    assert answer["markDeliveredMany"] == [
        {"conversationId": a, "deliveredSeq": 1, "advanced": True},
        {"conversationId": b, "deliveredSeq": 1, "advanced": True},
    ]
    bad = [
        ([{"conversationId": b, "seq": 2}, {"conversationId": foreign, "seq": 1}], "NOT_FOUND"),
        ([{"conversationId": b, "seq": 2}, {"conversationId": b, "seq": 2}], "BAD_USER_INPUT"),
        ([{"conversationId": b, "seq": -1}], "BAD_USER_INPUT"),
    ]
    for items, code in bad:
        assert error_code(await api.error(MANY, {"items": items}, user=2)) == code
    assert (await marks(api, 1, b))[2] == (False, 0)  # nothing written by the refused calls
    assert (await api.data(MANY, {"items": []}, user=2))["markDeliveredMany"] == []
    assert error_code(await api.error(DELIVERED, {"c": foreign, "s": 1}, user=2)) == "NOT_FOUND"


async def test_members_are_told_when_it_moved_and_only_then(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2])
    await api.send(1, cid)
    await api.send(1, cid)
    client = await ws_connect(server, 1)
    try:
        op = await client.subscribe(EVENTS, {"c": cid})
        await wait_active_subscriptions(server, 1)
        await delivered(api, 2, cid, 1)
        await delivered(api, 2, cid, 1)  # did not move: no event
        await delivered(api, 2, cid, 2)
        got = [e["deliveryUpdated"] for e in await op.collect(2)]
        assert got == [
            {"conversationId": cid, "userId": "2", "deliveredSeq": 1},
            {"conversationId": cid, "userId": "2", "deliveredSeq": 2},
        ]
    finally:
        await client.close()


async def test_big_groups_keep_no_delivery_counts_and_send_no_delivery_events(server, http):
    api = ChatApi.of(server, http)
    threshold = server.settings.big_group_threshold
    big = await api.create_group(1, range(2, threshold + 3))  # threshold + 2 members
    small = await api.create_group(1, [2])
    for cid in (big, small):
        await api.send(1, cid)
    client = await ws_connect(server, 1)
    try:
        op = await client.subscribe(EVENTS, {})
        await wait_active_subscriptions(server, 1)
        assert (await delivered(api, 2, big, 1))["deliveredSeq"] == 1  # stored all the same
        await delivered(api, 2, small, 1)
        assert (await op.next())["deliveryUpdated"]["conversationId"] == small  # nothing from the big one
    finally:
        await client.close()
    assert await marks(api, 1, big) == {1: (False, None)}
    for user in range(2, threshold + 3):  # everyone reads it: delivered there is seen
        await api.mark_read(user, big, 1)
    assert await marks(api, 1, big) == {1: (True, None)}


async def test_delivered_racing_read_ends_at_the_higher_of_both(server, http):
    api = ChatApi.of(server, http)
    cid = await direct(api, 1, 2)
    for _ in range(20):
        await api.send(1, cid)
    rng = random.Random(21)
    top_read = top_delivered = 0
    for _ in range(15):
        reads = [rng.randint(1, 25) for _ in range(3)]
        deliveries = [rng.randint(1, 25) for _ in range(3)]
        await asyncio.gather(
            *(api.mark_read(2, cid, s) for s in reads), *(delivered(api, 2, cid, s) for s in deliveries)
        )
        top_read = max(top_read, min(20, max(reads)))
        top_delivered = max(top_delivered, min(20, max(reads + deliveries)))
        answer = await delivered(api, 2, cid, 0)
        assert answer["deliveredSeq"] == top_delivered
        state = await marks(api, 1, cid)
        assert all(state[seq] == (seq <= top_delivered, int(seq <= top_delivered)) for seq in state)


async def test_a_subscriber_gets_each_coalesced_move_once_and_the_final_state(server, http):
    """Two devices per user racing markDeliveredMany and markRead (coalesced): the watcher's
    deliveryUpdated per member strictly increase (no duplicate, never back) and end at the final
    delivered_seq (none missing for the final state)."""
    assert server.runtime.deps.delivery_coalescer is not None
    api = ChatApi.of(server, http)
    users = [2, 3, 4, 5]
    cids = [await api.create_group(1, users) for _ in range(3)]
    for cid in cids:
        for _ in range(12):
            await api.send(1, cid)
    client = await ws_connect(server, 1)
    try:
        op = await client.subscribe(EVENTS, {})
        await wait_active_subscriptions(server, 1)
        rng = random.Random(5)

        async def device(user: int) -> None:
            for _ in range(8):
                if rng.random() < 0.75:
                    items = [{"conversationId": cid, "seq": rng.randint(1, 14)} for cid in rng.sample(cids, 2)]
                    await api.data(MANY, {"items": items}, user=user)
                else:
                    await api.mark_read(user, rng.choice(cids), rng.randint(1, 12))

        await asyncio.gather(*(device(u) for u in users for _device in range(2)))
        state = {}
        for cid in cids:
            for user in users:
                answer = await delivered(api, user, cid, 0)  # moves nothing: the current value
                state[(cid, str(user))] = answer["deliveredSeq"]
        async with engine_of(server) as conn:
            raw = {
                (str(r["conversation_id"]), r["user_id"]): r["delivered_seq"]
                for r in await conn.fetch("SELECT conversation_id, user_id, delivered_seq FROM conversation_member")
            }
        received: dict[tuple[str, str], list[int]] = {}

        def done(events: list[dict]) -> bool:
            received.clear()
            for e in events:
                d = e["deliveryUpdated"]
                received.setdefault((d["conversationId"], d["userId"]), []).append(d["deliveredSeq"])
            return all(received.get(key, [0])[-1] == raw[key] for key in state if raw[key] > 0)

        await op.collect_until(done, timeout=30)
        for key, values in received.items():
            assert all(a < b for a, b in zip(values, values[1:], strict=False)), (key, values)
            assert values[-1] == raw[key]
            assert raw[key] <= state[key]  # delivered_seq never above GREATEST(delivered, read)
    finally:
        await client.close()


def engine_of(server):
    return server.runtime.deps.database.connection()
