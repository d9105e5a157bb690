"""One event to many subscribers costs a fixed number of SQL statements, whatever they select.

seen, seenByCount and seenBy read the conversation's roster. Every subscriber
of a message.new event reads the same roster, so the event reads it once for
all of them (loaders.EventRosters), not once per subscriber; and subscribers
holding the same document share one execution of it (engine/shared.py).
"""

from __future__ import annotations

import asyncio

from ..support.live import ChatApi, wait_active_subscriptions, ws_connect
from .test_query_count import counting_statements, outbox_drained

MEMBERS = 60
SEEN = "subscription($c: ID) { messageNew(conversationId: $c) { seq message { seq seen seenByCount } } }"
# Another document on the same event: its own execution, still the event's one roster read.
SEEN_BY = "subscription { messageNew { message { seenBy(first: 3) seen } } }"


async def send_and_count(server, api: ChatApi, engine, cid: str, operations: list) -> tuple[list[str], list[dict]]:
    await outbox_drained(engine)
    with counting_statements(server) as statements:
        seq = await api.send(1, cid, "hello")
        received = await asyncio.gather(*(op.next(timeout=30) for op in operations))
        await outbox_drained(engine)
    assert all(r["messageNew"]["message"].get("seq", seq) == seq for r in received)
    return statements, received


async def test_one_event_to_many_subscribers_selecting_seen_reads_the_roster_once(server, http, engine):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, range(2, MEMBERS + 1))
    await api.send(1, cid, "before")  # the first send runs statements a later one does not (plans, caches)
    baseline, _ = await send_and_count(server, api, engine, cid, [])

    clients = await asyncio.gather(*(ws_connect(server, user) for user in range(2, MEMBERS + 1)))
    try:
        operations = [
            await client.subscribe(SEEN if i % 2 else SEEN_BY, {"c": cid} if i % 2 else None)
            for i, client in enumerate(clients)
        ]
        await wait_active_subscriptions(server, len(operations))
        await api.mark_read(2, cid, 2)
        await outbox_drained(engine)
        executions = server.app.graphql.planner.stats.executions
        statements, received = await send_and_count(server, api, engine, cid, operations)
        executions = server.app.graphql.planner.stats.executions - executions
    finally:
        await asyncio.gather(*(client.close() for client in clients))

    event_statements = len(statements) - len(baseline)
    assert event_statements <= 2, [s for s in statements if s not in baseline]
    # the send itself (planned), then one execution per document for all its subscribers
    assert executions <= 3, executions
    # and the answers are right: nobody has read the new message yet
    seen = [r["messageNew"]["message"] for r in received]
    assert all(m["seen"] is False for m in seen)
    assert {m.get("seenByCount") for m in seen if "seenByCount" in m} == {0}
    assert {tuple(m["seenBy"]) for m in seen if "seenBy" in m} == {()}


async def test_a_shared_selection_that_fails_fails_for_every_subscriber_alike(server, http, engine):
    from ..support.live import SubscriptionError

    api = ChatApi.of(server, http)
    cid = await api.create_group(1, range(2, 7))
    clients = await asyncio.gather(*(ws_connect(server, user) for user in range(2, 7)))
    try:
        operations = [
            await c.subscribe("subscription { messageNew { message { seenBy(first: -1) } } }") for c in clients
        ]
        await wait_active_subscriptions(server, len(operations))
        await api.send(1, cid, "hello")
        errors = await asyncio.gather(*(op.error(timeout=30) for op in operations))
    finally:
        await asyncio.gather(*(client.close() for client in clients))
    assert all(isinstance(e, SubscriptionError) for e in errors)
    assert {e.code for e in errors} == {"BAD_USER_INPUT"}
    assert len({str(e.errors) for e in errors}) == 1  # the same error for each
