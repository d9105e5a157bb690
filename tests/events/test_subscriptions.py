"""Live subscriptions fed through the real path: HTTP send -> outbox -> relay ->
Kafka -> consumer (group fanout) -> broadcast bus -> Dispatcher -> websocket.

Every test runs on its own topic (the `topic` fixture behind `kafka_server`).
"""

from __future__ import annotations

import asyncio
from itertools import pairwise

import pytest
from pydantic import SecretStr

from ..support.live import (
    LEGACY_WS,
    PROTOCOLS,
    TRANSPORT_WS,
    ChatApi,
    ConnectionRefused,
    SubscriptionError,
    WsClient,
    base_url,
    bearer,
    dedupe,
    metrics,
    subscribe_messages,
    subscribe_reads,
    wait_active_subscriptions,
    wait_leader,
    wait_until,
    ws_connect,
)


@pytest.fixture
async def api(kafka_server, http) -> ChatApi:
    await wait_leader(kafka_server)
    return ChatApi.of(kafka_server, http)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_send_over_http_arrives_on_a_subscription_through_kafka(kafka_server, api, protocol):
    cid = await api.create_group(1, [2])
    async with await ws_connect(kafka_server, 2, protocol) as ws:
        op = await subscribe_messages(ws, cid)
        await wait_active_subscriptions(kafka_server, 1)
        seq = await api.send(1, cid, "through kafka")
        event = await op.next(timeout=30)
    assert event == {
        "messageNew": {
            "conversationId": cid,
            "seq": seq,
            "message": {"seq": seq, "senderId": "1", "body": "through kafka"},
        }
    }


async def test_per_conversation_order_from_20_concurrent_senders_is_kept_at_the_subscriber(kafka_server, api):
    senders = list(range(1, 21))
    per_sender = 10
    total = len(senders) * per_sender
    cid = await api.create_group(1, senders[1:])
    async with (
        await ws_connect(kafka_server, 1, TRANSPORT_WS) as ws_new,
        await ws_connect(kafka_server, 2, LEGACY_WS) as ws_legacy,
    ):
        ops = [await subscribe_messages(ws_new, cid), await subscribe_messages(ws_legacy)]
        await wait_active_subscriptions(kafka_server, 2)

        async def sender(user: int) -> None:
            for i in range(per_sender):
                await api.send(user, cid, f"{user}:{i}")

        await asyncio.wait_for(asyncio.gather(*(sender(u) for u in senders)), 60)

        for op in ops:
            received = await op.collect_until(
                lambda got: len(dedupe(e["messageNew"] for e in got)) >= total, timeout=60
            )
            events = dedupe(e["messageNew"] for e in received)
            seqs = [e["seq"] for e in events]
            assert all(e["conversationId"] == cid for e in events)
            assert all(a < b for a, b in pairwise(seqs)), f"out of order: {seqs}"
            assert seqs == list(range(1, total + 1))
            # Each sender's messages keep the order that sender sent them in.
            for user in senders:
                mine = [
                    int(e["message"]["body"].split(":")[1]) for e in events if e["message"]["senderId"] == str(user)
                ]
                assert mine == list(range(per_sender)), (user, mine)


async def test_mark_read_that_advances_gives_one_read_updated_and_one_that_does_not_gives_none(kafka_server, api):
    cid = await api.create_group(1, [2])
    async with await ws_connect(kafka_server, 1) as ws:
        reads = await subscribe_reads(ws, cid)
        messages = await subscribe_messages(ws, cid)
        await wait_active_subscriptions(kafka_server, 2)
        for i in range(3):
            await api.send(1, cid, f"m{i}")
        # Everything these sends produced has been dispatched once their messages arrive.
        await messages.collect(3, timeout=30)

        assert (await api.mark_read(2, cid, 2))["advanced"] is True
        assert (await api.mark_read(2, cid, 1))["advanced"] is False
        assert (await api.mark_read(2, cid, 2))["advanced"] is False
        # A later advancing markRead is the marker: nothing may arrive before it but the first.
        assert (await api.mark_read(2, cid, 3))["advanced"] is True
        got = await reads.collect(2, timeout=30)
    assert [e["readUpdated"] for e in got] == [
        {"conversationId": cid, "userId": "2", "lastReadSeq": 2},
        {"conversationId": cid, "userId": "2", "lastReadSeq": 3},
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_non_members_cannot_subscribe_to_a_conversation(kafka_server, api, protocol):
    cid = await api.create_group(1, [2])
    async with await ws_connect(kafka_server, 3, protocol) as ws:
        for subscribe in (subscribe_messages, subscribe_reads):
            op = await subscribe(ws, cid)
            with pytest.raises(SubscriptionError) as raised:
                await op.next(timeout=10)
            assert raised.value.code == "NOT_FOUND"
        # A conversation that does not exist answers the same way.
        op = await subscribe_messages(ws, "999999")
        with pytest.raises(SubscriptionError) as raised:
            await op.next(timeout=10)
        assert raised.value.code == "NOT_FOUND"
    assert kafka_server.runtime.deps.dispatcher.active == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("authorization", [None, "Bearer not-a-token", "Basic dXNlcjpwYXNz"])
async def test_a_connection_without_a_valid_token_is_refused(kafka_server, protocol, authorization):
    with pytest.raises(ConnectionRefused) as raised:
        await WsClient.connect(kafka_server.ws_url, authorization, protocol=protocol)
    refused = raised.value
    assert all(frame["type"] != "connection_ack" for frame in refused.frames)
    if protocol == TRANSPORT_WS:
        assert refused.close_code == 4403
    else:
        # The legacy protocol has no refusal close code: connection_error, then close.
        assert [frame["type"] for frame in refused.frames] == ["connection_error"]
        assert refused.frames[0]["payload"]["code"] == "UNAUTHENTICATED"
        assert refused.close_code is not None


async def test_a_token_for_another_secret_is_refused(kafka_server):
    other = kafka_server.settings.model_copy(update={"jwt_secret": SecretStr("another-secret-" + "x" * 32)})
    with pytest.raises(ConnectionRefused) as raised:
        await WsClient.connect(kafka_server.ws_url, bearer(other, 1))
    assert raised.value.close_code == 4403


async def test_all_conversations_subscription_gets_conversations_joined_later_and_not_others(kafka_server, api):
    joined = await api.create_group(1, [2])
    other = await api.create_group(1, [3])
    async with await ws_connect(kafka_server, 5) as ws5, await ws_connect(kafka_server, 1) as ws1:
        mine = await subscribe_messages(ws5)
        owner = await subscribe_messages(ws1)
        await wait_active_subscriptions(kafka_server, 2)

        # Before user 5 joins: not theirs (and the process now knows the members without 5).
        await api.send(2, joined, "before 5 joined")
        assert (await owner.next(timeout=30))["messageNew"]["message"]["body"] == "before 5 joined"
        await api.add_members(1, joined, [5])
        # A conversation user 5 is not in: once the owner has it, it was dispatched.
        await api.send(1, other, "not for 5")
        assert (await owner.next(timeout=30))["messageNew"]["conversationId"] == other

        seq = await api.send(2, joined, "for 5")
        event = (await mine.next(timeout=30))["messageNew"]
        assert (event["conversationId"], event["seq"], event["message"]["body"]) == (joined, seq, "for 5")
        # Still nothing from the other conversation, even after more traffic there.
        await api.send(1, other, "still not for 5")
        await api.send(2, joined, "again for 5")
        # The owner is in both conversations: it gets "for 5" too, and the two conversations'
        # events in no promised order (two partitions): taken as a set, not a list.
        wanted = {(joined, "for 5"), (other, "still not for 5"), (joined, "again for 5")}
        got = await owner.collect_until(lambda received: _bodies(received) >= wanted, timeout=30)
        assert _bodies(got) == wanted and len(got) == len(wanted), got
        # "still not for 5" was dispatched (the owner has it) before this one was sent, and one
        # conversation keeps its order: anything of the other conversation would come before it.
        await api.send(2, joined, "last for 5")
        received = await mine.collect_until(lambda r: (joined, "last for 5") in _bodies(r), timeout=30)
        assert [(e["messageNew"]["conversationId"], e["messageNew"]["message"]["body"]) for e in received] == [
            (joined, "again for 5"),
            (joined, "last for 5"),
        ]


def _bodies(events: list[dict]) -> set[tuple[str, str]]:
    return {(e["messageNew"]["conversationId"], e["messageNew"]["message"]["body"]) for e in events}


async def test_removed_members_stop_receiving_at_once(kafka_server, api):
    cid = await api.create_group(1, [2, 3])
    async with await ws_connect(kafka_server, 2) as ws2, await ws_connect(kafka_server, 3) as ws3:
        every = await subscribe_messages(ws2)
        one = await subscribe_messages(ws2, cid)
        control = await subscribe_messages(ws3, cid)
        await wait_active_subscriptions(kafka_server, 3)

        await api.send(1, cid, "before")
        for op in (every, one, control):
            assert (await op.next(timeout=30))["messageNew"]["seq"] == 1

        await api.remove_member(1, cid, 2)
        error = await one.error(timeout=30)
        assert error.code == "NOT_FOUND"
        assert error.skipped == []
        await wait_active_subscriptions(kafka_server, 2)

        for i in range(3):
            await api.send(1, cid, f"after {i}")
        assert [e["messageNew"]["seq"] for e in await control.collect(3, timeout=30)] == [2, 3, 4]

        # Marker: user 2 is added back, so the next message is theirs again. The
        # partition and the dispatcher keep order, so anything of seq 2..4 would come first.
        await api.add_members(1, cid, [2])
        await api.send(1, cid, "back again")
        assert (await every.next(timeout=30))["messageNew"]["seq"] == 5
        assert (await control.next(timeout=30))["messageNew"]["seq"] == 5


async def test_metrics_and_health_on_a_kafka_server(kafka_server, api, http):
    root = base_url(kafka_server)
    health = await http.get(f"{root}/healthz")
    assert health.status_code == 200
    ready = await http.get(f"{root}/readyz")
    assert ready.status_code == 200
    assert ready.json()["ready"] is True

    names = [
        "chatgql_outbox_rows",
        "chatgql_outbox_oldest_age_seconds",
        "chatgql_events_relayed_total",
        "chatgql_consumer_lag",
        "chatgql_subscriptions_active",
        "chatgql_subscribers_dropped_total",
    ]
    before = await metrics(http, kafka_server)
    for name in names:
        assert name in before, f"{name} missing from /metrics"
    assert before["chatgql_subscriptions_active"] == 0

    cid = await api.create_group(1, [2])
    async with await ws_connect(kafka_server, 2) as ws:
        op = await subscribe_messages(ws, cid)
        await wait_active_subscriptions(kafka_server, 1)
        during = await metrics(http, kafka_server)
        assert during["chatgql_subscriptions_active"] == 1
        await api.send(1, cid, "counted")
        await op.next(timeout=30)

        async def drained() -> bool:
            now = await metrics(http, kafka_server)
            return now["chatgql_outbox_rows"] == 0 and now["chatgql_consumer_lag"] == 0

        await wait_until(drained, 20, "outbox rows and consumer lag back to 0")
        after = await metrics(http, kafka_server)
        # The group's member.added event and the message.new event.
        assert after["chatgql_events_relayed_total"] >= before["chatgql_events_relayed_total"] + 2
        assert after["chatgql_outbox_oldest_age_seconds"] == 0
        assert after["chatgql_subscribers_dropped_total"] == before["chatgql_subscribers_dropped_total"]

    async def closed() -> bool:
        return (await metrics(http, kafka_server))["chatgql_subscriptions_active"] == 0

    await wait_until(closed, 10, "chatgql_subscriptions_active back to 0 after the socket closed")
