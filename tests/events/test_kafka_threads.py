"""threadUpdated (docs/guide/threads.md) reaches subscribers through the outbox, the relay, a real Kafka and
the consumer: a reply to each follower of its thread, and a member's own thread read to their devices only."""

from __future__ import annotations

import asyncio
import uuid

from ..support.live import ChatApi, wait_active_subscriptions, ws_connect

EVENTS = "subscription { threadUpdated { conversationId rootSeq change lastReplySeq lastReadReplySeq unreadCount } }"
REPLY = """
mutation($c: ID!, $m: UUID!, $r: ID) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: "reply", replyTo: $r) { message { seq } }
}
"""
MARK = "mutation($r: ID!, $s: Long!) { markThreadRead(rootId: $r, replySeq: $s) { unreadCount } }"
ROOT = "query($c: ID!) { messages(conversationId: $c, first: 1) { nodes { id } } }"


async def test_thread_updates_arrive_through_kafka(kafka_server, http):
    api = ChatApi.of(kafka_server, http)
    tag = uuid.uuid4().hex[:8]
    author, replier, other = f"kt-{tag}-a", f"kt-{tag}-b", f"kt-{tag}-c"
    cid = (
        await api.data(
            'mutation($m: [ID!]!) { createGroup(title: "t", memberIds: $m) { id } }',
            {"m": [replier, other]},
            user=author,
        )
    )["createGroup"]["id"]
    await api.send(author, cid, "root")
    root = (await api.data(ROOT, {"c": cid}, user=author))["messages"]["nodes"][0]["id"]
    phone, laptop, bystander = await asyncio.gather(
        ws_connect(kafka_server, author), ws_connect(kafka_server, author), ws_connect(kafka_server, other)
    )
    try:
        before = kafka_server.runtime.deps.dispatcher.active
        ops = [await ws.subscribe(EVENTS) for ws in (phone, laptop, bystander)]
        await wait_active_subscriptions(kafka_server, before + 3)
        await api.data(REPLY, {"c": cid, "m": str(uuid.uuid4()), "r": root}, user=replier)
        replied = {"conversationId": cid, "rootSeq": 1, "change": "REPLY", "lastReplySeq": 1}
        for op in ops[:2]:
            event = (await op.next(timeout=60))["threadUpdated"]
            assert {k: event[k] for k in replied} == replied and event["unreadCount"] == 1
        await api.data(MARK, {"r": root, "s": 1}, user=author)
        for op in ops[:2]:
            event = (await op.next(timeout=60))["threadUpdated"]
            assert (event["change"], event["lastReadReplySeq"], event["unreadCount"]) == ("READ", 1, 0)
        # the bystander follows nothing: their first event is their own read, after all of the above
        await api.data(MARK, {"r": root, "s": 1}, user=other)
        event = (await ops[2].next(timeout=60))["threadUpdated"]
        assert (event["change"], event["lastReadReplySeq"]) == ("READ", 1)
    finally:
        await asyncio.gather(phone.close(), laptop.close(), bystander.close())
