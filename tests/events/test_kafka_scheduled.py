"""A scheduled message and its erase as a disappearing message reach subscribers through the outbox, the relay,
a real Kafka and the consumer: the scheduler's firing writes its events in its transaction like any send or
delete. The API's clock is the test's (Deps.clock, which the server's scheduler reads)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from ..support.clock import Clock
from ..support.live import ChatApi, subscribe_messages, wait_active_subscriptions, ws_connect

CHANGED = "subscription($c: ID) { messageChanged(conversationId: $c) { changeSeq kind seq reason message { body } } }"
SCHEDULE = """
mutation($c: ID!, $m: UUID!, $b: String!, $at: DateTime!) {
  scheduleMessage(conversationId: $c, clientMsgId: $m, body: $b, sendAt: $at) { scheduledMessage { id } } }
"""
TTL = "mutation($c: ID!) { setMessageTtl(conversationId: $c, seconds: 60) { messageTtlSeconds } }"


async def test_a_scheduled_message_and_its_erase_arrive_through_kafka(kafka_server, http, engine):
    api = ChatApi.of(kafka_server, http)
    deps = kafka_server.runtime.deps
    saved, deps.clock = deps.clock, Clock(datetime.now(UTC))
    try:
        cid = await api.create_group(1, [2])
        await api.data(TTL, {"c": cid}, user=1)
        key = str(uuid.uuid4())
        at = deps.clock.now + timedelta(minutes=5)
        await api.data(SCHEDULE, {"c": cid, "m": key, "b": "later, then gone", "at": at.isoformat()}, user=1)
        async with await ws_connect(kafka_server, 2) as ws:
            new = await subscribe_messages(ws, cid)
            changed = await ws.subscribe(CHANGED, {"c": cid})
            await wait_active_subscriptions(kafka_server, 2)
            deps.clock.now = at
            kafka_server.runtime.scheduler.wake()
            sent = (await new.next(timeout=60))["messageNew"]
            assert (sent["seq"], sent["message"]["senderId"], sent["message"]["body"]) == (1, "1", "later, then gone")
            async with engine.connect() as conn:
                created = (
                    await conn.execute(
                        text("SELECT created_at FROM message WHERE conversation_id = :c"), {"c": int(cid)}
                    )
                ).scalar_one()
            deps.clock.now = created + timedelta(seconds=60)
            kafka_server.runtime.scheduler.wake()
            erased = (await changed.next(timeout=60))["messageChanged"]
        assert erased == {"changeSeq": 1, "kind": "DELETED", "seq": 1, "reason": "EXPIRED", "message": {"body": ""}}
    finally:
        deps.clock = saved
