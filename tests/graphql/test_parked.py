"""Parked subscriptions (engine/parked.py): an idle messageNew subscription has no task.

Both protocols, against the session's server (in this process, so its tasks can be
counted): a parked subscription gets every event, parks again after each, ends as an
ordinary one ends (stop/complete from the client, the member removed, the socket
closed); an operation that cannot park (resume cursors, another root field) keeps its
task and is served as before.
"""

from __future__ import annotations

import asyncio
import gc
import json

import pytest
from graphql import parse

from chatgql.engine.parked import Parked, parkable

from ..support.live import (
    LEGACY_WS,
    MESSAGE_NEW,
    PROTOCOLS,
    READ_UPDATED,
    TRANSPORT_WS,
    SubscriptionCompleted,
    subscribe_messages,
    wait_active_subscriptions,
    wait_until,
    ws_connect,
)

RESUME = (
    "subscription($c: ID, $k: [SyncCursor!]) { messageNew(conversationId: $c, cursors: $k) "
    "{ conversationId seq message { seq senderId body } } }"
)


def _operation_tasks() -> int:
    """The websocket operations' tasks running in this process (both protocols)."""
    names = {"run_operation", "handle_async_results"}
    return sum(1 for task in asyncio.all_tasks() if getattr(task.get_coro(), "__name__", None) in names)


async def _accepted(server, query: str, variables: dict | None = None) -> None:
    """Have the server accept the document (the first subscriber of a text validates it: no parking yet)."""
    async with await ws_connect(server, 2) as ws:  # a member of the tests' conversations
        op = await ws.subscribe(query, variables)
        await wait_until(lambda: server.runtime.deps.dispatcher.active >= 1, 10, "the warm-up subscription")
        await op.stop()
    await wait_active_subscriptions(server, 0)


async def _subscribe_parked(server, ws, cid: str, idle: int):
    """A messageNew subscription of cid on ws, once it is registered and parked (no task of its own)."""
    op = await subscribe_messages(ws, cid)
    await wait_active_subscriptions(server, 1)
    await wait_until(lambda: _operation_tasks() == idle, 10, "the subscription to park")
    return op


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_idle_message_new_subscription_has_no_task_and_gets_every_event(server, api, protocol):
    cid = await api.create_group(1, [2])
    await _accepted(server, MESSAGE_NEW)
    idle = _operation_tasks()
    async with await ws_connect(server, 2, protocol) as ws:
        op = await _subscribe_parked(server, ws, cid, idle)
        for body in ("one", "two", "three"):
            seq = await api.send(1, cid, body)
            event = await op.next()
            assert event == {
                "messageNew": {
                    "conversationId": cid,
                    "seq": seq,
                    "message": {"seq": seq, "senderId": "1", "body": body},
                }
            }
            await wait_until(lambda: _operation_tasks() == idle, 10, "the subscription to park again")
        # Events that come together are delivered in order by one run.
        seqs = [await api.send(1, cid, f"burst {i}") for i in range(5)]
        got = await op.collect(5)
        assert [e["messageNew"]["seq"] for e in got] == seqs
        await op.stop()
        await wait_active_subscriptions(server, 0)
        if protocol == LEGACY_WS:  # stop is answered with complete, as for a running one
            with pytest.raises(SubscriptionCompleted):
                await op.next()
        else:  # nothing more for it; the socket still serves
            again = await subscribe_messages(ws, cid)
            await wait_active_subscriptions(server, 1)
            seq = await api.send(1, cid, "after")
            assert (await again.next())["messageNew"]["seq"] == seq
            assert ws.ws.close_code is None
    await wait_active_subscriptions(server, 0)
    await wait_until(lambda: _operation_tasks() == idle, 10, "no task left")


def _parked_in_process(operation_id: str) -> list[Parked]:
    """The open Parked of an operation id in this process (type(): gc also lists weak proxies)."""
    found = [o for o in gc.get_objects() if type(o) is Parked and not o.stopped]
    ids = [o.operation[0] if isinstance(o.operation, tuple) else o.operation.id for o in found]
    return [o for o, i in zip(found, ids, strict=True) if i == operation_id]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_parked_subscription_builds_its_executor_once_across_wake_ups(server, api, protocol):
    cid = await api.create_group(1, [2])
    await _accepted(server, MESSAGE_NEW)
    idle = _operation_tasks()
    async with await ws_connect(server, 2, protocol) as ws:
        op = await _subscribe_parked(server, ws, cid, idle)
        [parked] = _parked_in_process(op.id)
        assert parked.executor is None  # an idle subscription that never had an event holds none
        executors = []
        for body in ("one", "two", "three"):
            seq = await api.send(1, cid, body)
            assert (await op.next())["messageNew"]["seq"] == seq
            await wait_until(lambda: _operation_tasks() == idle, 10, "the subscription to park again")
            executors.append(parked.executor)
        assert executors[0] is not None
        assert all(executor is executors[0] for executor in executors)
        await op.stop()
        await wait_active_subscriptions(server, 0)
        assert parked.stopped and parked.executor is None  # let go with the operation
    await wait_until(lambda: _operation_tasks() == idle, 10, "no task left")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_parked_subscription_ends_with_not_found_when_its_member_is_removed(server, api, protocol):
    cid = await api.create_group(1, [2, 3])
    await _accepted(server, MESSAGE_NEW)
    idle = _operation_tasks()
    async with await ws_connect(server, 2, protocol) as ws:
        op = await _subscribe_parked(server, ws, cid, idle)
        await api.remove_member(1, cid, 2)
        error = await op.error()
        assert error.errors[0]["extensions"]["code"] == "NOT_FOUND"
        frame = await ws._next_frame(op.id)  # then complete, as an ordinary subscription ends
        assert frame == {"id": op.id, "type": "complete"}
        await wait_active_subscriptions(server, 0)
    await wait_until(lambda: _operation_tasks() == idle, 10, "no task left")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_socket_closed_under_parked_subscriptions_leaves_nothing_registered(server, api, protocol):
    cid = await api.create_group(1, [2])
    await _accepted(server, MESSAGE_NEW)
    idle = _operation_tasks()
    ws = await ws_connect(server, 2, protocol)
    await subscribe_messages(ws, cid)
    await subscribe_messages(ws)
    await wait_active_subscriptions(server, 2)
    await wait_until(lambda: _operation_tasks() == idle, 10, "the subscriptions to park")
    await ws.close()
    await wait_active_subscriptions(server, 0)
    assert _operation_tasks() == idle


async def test_parked_subscriptions_count_toward_the_limit_and_their_ids_stay_taken(server, api):
    cid = await api.create_group(1, [2])
    await _accepted(server, MESSAGE_NEW)
    limit = server.settings.max_subscriptions_per_connection
    async with await ws_connect(server, 2, TRANSPORT_WS) as ws:
        ops = [await subscribe_messages(ws, cid) for _ in range(limit)]
        await wait_active_subscriptions(server, limit)
        over = await subscribe_messages(ws, cid)
        error = await over.error()
        assert error.errors[0]["extensions"]["reason"] == "SUBSCRIPTIONS_PER_CONNECTION"
        again = {"id": ops[0].id, "type": "subscribe", "payload": {"query": MESSAGE_NEW, "variables": {"c": cid}}}
        await ws.ws.send(json.dumps(again))
        await asyncio.wait_for(ws.ws.wait_closed(), 10)
        assert ws.ws.close_code == 4409
    await wait_active_subscriptions(server, 0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("query", [RESUME, READ_UPDATED], ids=["resume", "readUpdated"])
async def test_a_subscription_that_cannot_park_keeps_its_task(server, api, protocol, query):
    cid = await api.create_group(1, [2])
    variables = {"c": cid, "k": [{"conversationId": cid, "afterSeq": 0}]} if query == RESUME else {"c": cid}
    await _accepted(server, query, variables)
    idle = _operation_tasks()
    async with await ws_connect(server, 2, protocol) as ws:
        op = await ws.subscribe(query, variables)
        await wait_active_subscriptions(server, 1)
        await wait_until(lambda: _operation_tasks() == idle + 1, 10, "its task")
        seq = await api.send(1, cid, "x")
        if query == RESUME:
            assert (await op.next())["messageNew"]["seq"] == seq
        else:
            await api.mark_read(2, cid, seq)  # (the sender has read its own already)
            assert (await op.next())["readUpdated"]["lastReadSeq"] == seq
        assert _operation_tasks() == idle + 1
        await op.stop()
        await wait_active_subscriptions(server, 0)
    await wait_until(lambda: _operation_tasks() == idle, 10, "no task left")


@pytest.mark.parametrize(
    ("document", "name", "expected"),
    [
        (MESSAGE_NEW, None, True),
        ("subscription { messageNew { seq } }", None, True),
        ("subscription A { messageNew { seq } } subscription B { readUpdated { lastReadSeq } }", "A", True),
        ("subscription A { messageNew { seq } } subscription B { readUpdated { lastReadSeq } }", "B", False),
        ("subscription A { messageNew { seq } } subscription B { messageNew { seq } }", None, False),
        (RESUME, None, False),
        (READ_UPDATED, None, False),
        ("subscription { m: messageNew { seq } }", None, True),  # an alias: the same resolver
        ("subscription($s: Boolean!) { messageNew @include(if: $s) { seq } }", None, False),
        ("subscription { ... on Subscription { messageNew { seq } } }", None, False),
        ("query { me { id } }", None, False),
    ],
)
def test_which_operations_park(document, name, expected):
    assert parkable(parse(document), name) is expected


async def test_a_legacy_start_again_with_a_parked_operations_id_completes_it_and_starts_anew(server, api):
    cid = await api.create_group(1, [2])
    await _accepted(server, MESSAGE_NEW)
    idle = _operation_tasks()
    async with await ws_connect(server, 2, LEGACY_WS) as ws:
        op = await _subscribe_parked(server, ws, cid, idle)
        again = {"id": op.id, "type": "start", "payload": {"query": MESSAGE_NEW, "variables": {"c": cid}}}
        await ws.ws.send(json.dumps(again))
        assert await ws._next_frame(op.id) == {"id": op.id, "type": "complete"}  # the parked one's end
        await wait_active_subscriptions(server, 1)  # the new one
        seq = await api.send(1, cid, "to the new one")
        frame = await asyncio.wait_for(ws._next_frame(op.id), 20)
        assert frame["type"] == "data" and frame["payload"]["data"]["messageNew"]["seq"] == seq
    await wait_active_subscriptions(server, 0)
