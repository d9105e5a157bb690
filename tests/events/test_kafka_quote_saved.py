"""Quotes, forwards and saved messages end to end: through the outbox, the relay, a real Kafka, the consumer and
the bus to live subscribers, each viewer's quote resolved as they may read it, a save told to the saver's devices
only."""

from __future__ import annotations

import uuid

from ..support.live import ChatApi, wait_active_subscriptions, ws_connect

NEW = """
subscription($c: ID) {
  messageNew(conversationId: $c) { seq message { body forwarded quote { state message { body } } } }
}
"""
SEND = """
mutation($c: ID!, $k: UUID!, $b: String!, $q: ID) {
  sendMessage(conversationId: $c, clientMsgId: $k, body: $b, quote: $q) { message { id } }
}
"""
FORWARD = """
mutation($m: ID!, $c: ID!, $k: UUID!) { forwardMessage(messageId: $m, conversationId: $c, clientMsgId: $k) { duplicate } }
"""
SAVE = "mutation($c: ID!, $s: Long!) { saveMessage(conversationId: $c, seq: $s) { saved { version } } }"
SAVED = "subscription { savedMessageChanged { conversationId seq version saved } }"


async def test_quotes_forwards_and_saves_reach_live_subscribers_through_kafka(kafka_server, http):
    api = ChatApi.of(kafka_server, http)
    source = await api.create_group(1, [2])
    target = await api.create_group(1, [2, 3])
    sent = await api.data(SEND, {"c": source, "k": str(uuid.uuid4()), "b": "original"}, user=2)
    original = sent["sendMessage"]["message"]["id"]
    reader, outsider, saver = [await ws_connect(kafka_server, user) for user in (2, 3, 1)]
    try:
        ops = [await reader.subscribe(NEW, {"c": target}), await outsider.subscribe(NEW, {"c": target})]
        saves = [await saver.subscribe(SAVED), await reader.subscribe(SAVED)]
        await wait_active_subscriptions(kafka_server, 4)
        await api.data(SEND, {"c": target, "k": str(uuid.uuid4()), "b": "look", "q": original}, user=1)
        await api.data(FORWARD, {"m": original, "c": target, "k": str(uuid.uuid4())}, user=1)
        await api.data(SAVE, {"c": target, "s": 2}, user=1)
        await api.data(SAVE, {"c": source, "s": 1}, user=2)
        got = [[e["messageNew"] for e in await op.collect(2, timeout=60)] for op in ops]
        told = [[e["savedMessageChanged"] for e in await op.collect(1, timeout=60)] for op in saves]
    finally:
        for client in (reader, outsider, saver):
            await client.close()
    assert got[0] == [
        {
            "seq": 1,
            "message": {
                "body": "look",
                "forwarded": False,
                "quote": {"state": "VISIBLE", "message": {"body": "original"}},
            },
        },
        {"seq": 2, "message": {"body": "original", "forwarded": True, "quote": None}},
    ]
    assert got[1][0]["message"]["quote"] == {"state": "UNAVAILABLE", "message": None}
    assert got[1][1]["message"]["forwarded"] is True
    assert told == [
        [{"conversationId": target, "seq": 2, "version": 1, "saved": True}],
        [{"conversationId": source, "seq": 1, "version": 1, "saved": True}],
    ]
