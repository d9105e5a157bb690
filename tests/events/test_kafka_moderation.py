"""A user's own moderation events (docs/guide/moderation.md) reach subscribers through the outbox,
the relay, a real Kafka and the consumer: blockChanged to the blocker's devices, and an operator's
app-wide ban, made by another process (as `chatgql ban`), ending the banned user's live websocket."""

from __future__ import annotations

import asyncio
import uuid

from websockets.exceptions import ConnectionClosed

from chatgql.server import cli
from chatgql.services import operator as moderation

from ..support.live import ChatApi, SubscriptionError, wait_active_subscriptions, ws_connect


async def test_block_changed_and_an_operators_ban_arrive_through_kafka(kafka_server, http):
    api = ChatApi.of(kafka_server, http)
    tag = uuid.uuid4().hex[:8]
    blocker, blocked = f"kb-{tag}-a", f"kb-{tag}-b"
    ws = await ws_connect(kafka_server, blocker)
    try:
        before = kafka_server.runtime.deps.dispatcher.active
        op = await ws.subscribe("subscription { blockChanged { userId blocked } }")
        await wait_active_subscriptions(kafka_server, before + 1)
        await api.data("mutation($u: ID!) { blockUser(userId: $u) { changed } }", {"u": blocked}, user=blocker)
        assert await op.next(timeout=60) == {"blockChanged": {"userId": blocked, "blocked": True}}
        operator = kafka_server.settings.model_copy(update={"migrate_on_start": False})

        async def ban(database) -> int:
            await moderation.do_ban_user(database, "ops", blocker, None, "test")
            return 0

        await cli._with_database(operator, ban)
        try:
            await op.next(timeout=60)
            raise AssertionError("the banned user's subscription went on")
        except (SubscriptionError, ConnectionClosed):
            pass
        await asyncio.wait_for(ws.ws.wait_closed(), 60)
        assert (ws.ws.close_code, ws.ws.close_reason) == (4403, "Banned")
    finally:
        await ws.close()
