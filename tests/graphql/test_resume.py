"""Resumable subscriptions: messageNew(cursors:) replays what came after the
client's cursors from the database, then goes live, with no gap and no
duplicate, even while other users send into the conversation as the
subscription starts; a client too far behind gets the resync error instead
of an unbounded replay.

Against the session's chatgql (in-process bus: outbox -> relay -> bus ->
dispatcher), except the replay-bound test, which needs a small
CHATGQL_SUBSCRIBER_BUFFER and runs its own relay-less server.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from ..conftest import RunningServer, make_settings
from ..support.live import (
    PROTOCOLS,
    ChatApi,
    SubscriptionError,
    wait_active_subscriptions,
    ws_connect,
)

RESUME = """
subscription($c: ID, $cursors: [SyncCursor!]) {
  messageNew(conversationId: $c, cursors: $cursors) { conversationId seq message { id seq senderId body } }
}
"""


def cursors(**after: int) -> list[dict]:
    return [{"conversationId": cid.lstrip("c"), "afterSeq": seq} for cid, seq in after.items()]


def seqs_of(events: list[dict], cid: str | None = None) -> list[int]:
    return [e["messageNew"]["seq"] for e in events if cid is None or e["messageNew"]["conversationId"] == cid]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_resumed_subscription_replays_what_came_after_the_cursor_then_goes_live(server, api, protocol):
    cid = await api.create_group(1, [2])
    for i in range(1, 6):
        await api.send(1, cid, f"m{i}")
    async with await ws_connect(server, 2, protocol) as ws:
        op = await ws.subscribe(RESUME, {"c": cid, "cursors": [{"conversationId": cid, "afterSeq": 2}]})
        replayed = await op.collect(3, timeout=20)
        assert [(e["messageNew"]["seq"], e["messageNew"]["message"]["body"]) for e in replayed] == [
            (3, "m3"),
            (4, "m4"),
            (5, "m5"),
        ]
        await wait_active_subscriptions(server, 1)
        assert await api.send(1, cid, "m6") == 6
        live = await op.next()
    assert live["messageNew"]["seq"] == 6 and live["messageNew"]["message"]["body"] == "m6"


async def test_a_cursor_at_or_beyond_the_last_message_replays_nothing_and_goes_live(server, api):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "old")
    async with await ws_connect(server, 2) as ws:
        at_end = await ws.subscribe(RESUME, {"c": cid, "cursors": [{"conversationId": cid, "afterSeq": 1}]})
        # The client says it holds up to 3 (it may have seen them elsewhere): 2 and 3 are not sent again.
        beyond = await ws.subscribe(RESUME, {"cursors": [{"conversationId": cid, "afterSeq": 3}]})
        await wait_active_subscriptions(server, 2)
        for i in (2, 3, 4):
            await api.send(1, cid, f"m{i}")
        assert seqs_of(await at_end.collect(3)) == [2, 3, 4]
        assert seqs_of(await beyond.collect(1)) == [4]


async def test_without_a_conversation_id_cursors_resume_several_conversations_and_others_stay_live(server, api):
    a = await api.create_group(1, [2], title="a")
    b = await api.create_group(1, [2], title="b")
    c = await api.create_group(1, [2], title="c")
    async with await ws_connect(server, 1) as probe_ws:
        # Once the probe has them all, these sends are dispatched: none can reach the
        # subscription below live (c has no cursor, so a late one would).
        probe = await probe_ws.subscribe(RESUME, {})
        await wait_active_subscriptions(server, 1)
        for cid, count in ((a, 3), (b, 2), (c, 2)):
            for i in range(count):
                await api.send(1, cid, f"{cid}:{i}")
        await probe.collect(7)
    await wait_active_subscriptions(server, 0)
    async with await ws_connect(server, 2) as ws:
        op = await ws.subscribe(
            RESUME, {"cursors": [{"conversationId": a, "afterSeq": 1}, {"conversationId": b, "afterSeq": 0}]}
        )
        replayed = await op.collect(4)
        assert [(e["messageNew"]["conversationId"], e["messageNew"]["seq"]) for e in replayed] == [
            (a, 2),
            (a, 3),
            (b, 1),
            (b, 2),
        ]
        await wait_active_subscriptions(server, 1)
        await api.send(1, c, "live in c")  # no cursor for c: live only, as without cursors
        await api.send(1, a, "live in a")
        live = await op.collect(2)
    # Two conversations: no order between them is promised (the relay's shards, Kafka's partitions).
    assert {(e["messageNew"]["conversationId"], e["messageNew"]["seq"]) for e in live} == {(c, 3), (a, 4)}


async def test_resume_while_20_users_send_concurrently_has_no_gap_and_no_duplicate(server, api):
    """Subscribers start at staggered moments during a burst of concurrent sends (once that many
    sends are acknowledged), each from the seq it holds at that moment; each must get exactly the
    seqs after it, in order, once, with no client-side dedupe."""
    senders = list(range(1, 21))
    per_sender = 15
    total = len(senders) * per_sender
    cid = await api.create_group(1, senders[1:])
    reader = 100
    await api.add_members(1, cid, [reader])
    sent: list[int] = []
    acknowledged = asyncio.Condition()

    async def sender(user: int) -> None:
        for i in range(per_sender):
            seq = await api.send(user, cid, f"{user}:{i}")
            async with acknowledged:
                sent.append(seq)
                acknowledged.notify_all()

    async def subscribe_after(sends: int) -> tuple[int, list[dict]]:
        async with acknowledged:
            await acknowledged.wait_for(lambda: len(sent) >= sends)
            # What a client that saw the acknowledged sends holds: the complete prefix 1..held
            # (acknowledgements come out of seq order).
            acked = set(sent)
        held = 0
        while held + 1 in acked:
            held += 1
        async with await ws_connect(server, reader) as ws:
            op = await ws.subscribe(RESUME, {"c": cid, "cursors": [{"conversationId": cid, "afterSeq": held}]})
            # Until the marker, sent once every sender is done: a duplicate would come before it.
            received = await op.collect_until(
                lambda got: bool(got) and got[-1]["messageNew"]["seq"] > total, timeout=90
            )
            return held, received

    starts = [0, 20, 50, 90, 140, 200, 260]

    async def marker() -> None:
        await asyncio.gather(*(sender(u) for u in senders))
        await wait_active_subscriptions(server, len(starts), timeout=60)  # every subscriber registered
        assert await api.send(1, cid, "marker") == total + 1

    results = await asyncio.wait_for(asyncio.gather(*(subscribe_after(n) for n in starts), marker()), 120)
    assert sorted(sent) == list(range(1, total + 1))
    helds = [held for held, _ in results[:-1]]
    assert len(set(helds)) > 2, f"the subscribers did not start during the burst: {helds}"
    for held, received in results[:-1]:
        assert seqs_of(received) == list(range(held + 1, total + 2)), held
        assert all(":" in e["messageNew"]["message"]["body"] for e in received[:-1])


async def test_sends_committed_around_the_replay_read_are_delivered_once_each(migrated_url, http, monkeypatch):
    """The interleavings, made deterministic: on a relay-less server events reach the
    dispatcher only when the test dispatches them. One message commits and is
    dispatched between the subscription's registration and its database read (so it
    is both read and buffered), another commits and is dispatched after the read
    (only buffered). Each must arrive once, in order: this fails if the read came
    before the registration (the second is lost) or without the dedupe (the first twice)."""
    from chatgql.graphql import subscriptions

    async with RunningServer(make_settings(migrated_url, run_relay=False)) as quiet:
        api = ChatApi.of(quiet, http)
        cid = await api.create_group(1, [2])
        await api.send(1, cid, "before")
        dispatcher = quiet.runtime.deps.dispatcher

        async def send_and_dispatch(body: str) -> None:
            data = await api.data(
                "mutation($c: ID!, $m: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $m, "
                "body: $b) { message { seq senderId clientMsgId body createdAt } } }",
                {"c": cid, "m": str(uuid.uuid4()), "b": body},
                user=1,
            )
            m = data["sendMessage"]["message"]
            await dispatcher.dispatch(
                {
                    "type": "message.new",
                    "conversationId": int(cid),
                    "seq": m["seq"],
                    "senderId": int(m["senderId"]),
                    "clientMsgId": m["clientMsgId"],
                    "body": m["body"],
                    "createdAt": m["createdAt"],
                }
            )

        real_read = subscriptions.read_replay

        async def racing_read(*args, **kwargs):
            await send_and_dispatch("between registration and read")
            replay = await real_read(*args, **kwargs)
            await send_and_dispatch("after the read")
            return replay

        monkeypatch.setattr(subscriptions, "read_replay", racing_read)
        async with await ws_connect(quiet, 2) as ws:
            op = await ws.subscribe(RESUME, {"c": cid, "cursors": [{"conversationId": cid, "afterSeq": 0}]})
            got = await op.collect(3)
            monkeypatch.undo()
            await send_and_dispatch("live")
            got.append(await op.next())
    assert [(e["messageNew"]["seq"], e["messageNew"]["message"]["body"]) for e in got] == [
        (1, "before"),
        (2, "between registration and read"),
        (3, "after the read"),
        (4, "live"),
    ]


async def test_a_duplicate_delivery_reaches_a_resumed_subscriber_once(server, api):
    cid = await api.create_group(1, [2])
    async with await ws_connect(server, 2) as ws:
        op = await ws.subscribe(RESUME, {"c": cid, "cursors": [{"conversationId": cid, "afterSeq": 0}]})
        await wait_active_subscriptions(server, 1)
        await api.send(1, cid, "once")
        first = await op.next()
        # At-least-once delivery may hand the same event to the dispatcher again.
        event = {
            "type": "message.new",
            "conversationId": int(cid),
            "seq": 1,
            "senderId": "1",
            "clientMsgId": "6f1c6a52-5a3e-4a43-9e0d-3b7d1f7c2a11",
            "body": "once",
            "createdAt": "2026-01-01T00:00:00+00:00",
        }
        await server.runtime.deps.dispatcher.dispatch(event)
        await api.send(1, cid, "twice")
        second = await op.next()
    assert seqs_of([first, second]) == [1, 2]


async def test_resume_refuses_foreign_cursors_and_bad_ones(server, api):
    mine = await api.create_group(1, [2])
    other = await api.create_group(1, [3])
    cases = [
        ({"cursors": [{"conversationId": other, "afterSeq": 0}]}, "NOT_FOUND"),
        ({"c": mine, "cursors": [{"conversationId": other, "afterSeq": 0}]}, "BAD_USER_INPUT"),
        (
            {"cursors": [{"conversationId": mine, "afterSeq": 0}, {"conversationId": mine, "afterSeq": 1}]},
            "BAD_USER_INPUT",
        ),
        ({"cursors": [{"conversationId": mine, "afterSeq": -1}]}, "BAD_USER_INPUT"),
        ({"cursors": [{"conversationId": "x", "afterSeq": 0}]}, "BAD_USER_INPUT"),
    ]
    async with await ws_connect(server, 2) as ws:
        for variables, code in cases:
            op = await ws.subscribe(RESUME, variables)
            with pytest.raises(SubscriptionError) as raised:
                await op.next()
            assert raised.value.code == code, (variables, raised.value.errors)
    await wait_active_subscriptions(server, 0)


async def test_a_client_too_far_behind_gets_the_resync_error_not_an_unbounded_replay(migrated_url, http):
    settings = make_settings(migrated_url, run_relay=False, subscriber_buffer=5)
    async with RunningServer(settings) as small:
        api = ChatApi.of(small, http)
        cid = await api.create_group(1, [2])
        for i in range(8):
            await api.send(1, cid, f"m{i}")
        async with await ws_connect(small, 2) as ws:
            fits = await ws.subscribe(RESUME, {"c": cid, "cursors": [{"conversationId": cid, "afterSeq": 3}]})
            assert seqs_of(await fits.collect(5)) == [4, 5, 6, 7, 8]
            behind = await ws.subscribe(RESUME, {"c": cid, "cursors": [{"conversationId": cid, "afterSeq": 2}]})
            error = await behind.error()
    assert error.skipped == []  # nothing replayed before the error
    assert error.code == "LIMIT_EXCEEDED"
    assert error.extensions["resync"] is True
    assert error.extensions["reason"] == "REPLAY_TOO_LONG"


async def test_a_replay_over_many_conversations_reads_the_database_in_two_statements(server, engine, client, api):
    from .test_query_count import counting_statements, create_groups, outbox_drained, send_to_each

    conversations = await create_groups(client, 1, [2], 20)
    await send_to_each(client, 1, conversations, rounds=3)
    await outbox_drained(engine)
    await asyncio.sleep(0.3)  # and dispatched: a late event's membership read would be counted below
    variables = {"cursors": [{"conversationId": c, "afterSeq": 0} for c in conversations]}
    with_seen = RESUME.replace("message { id seq senderId body }", "message { id seq seenByCount }")
    async with await ws_connect(server, 2) as ws:
        with counting_statements(server) as statements:
            op = await ws.subscribe(RESUME, variables)
            events = await op.collect(60)
            await asyncio.sleep(0.05)
        plain = list(statements)
        with counting_statements(server) as statements:
            op = await ws.subscribe(with_seen, variables)
            seen = await op.collect(60)
            await asyncio.sleep(0.05)
        loaded = list(statements)
    assert [(e["messageNew"]["conversationId"], e["messageNew"]["seq"]) for e in events] == [
        (c, s) for c in conversations for s in (1, 2, 3)
    ]
    assert len(plain) == 2, plain  # the conversations (membership, lastSeq), then every page at once
    assert all(e["messageNew"]["message"]["seenByCount"] == 0 for e in seen)
    # The replayed messages share one set of loaders: a roster per conversation, not per message.
    assert len(loaded) <= 2 + len(conversations), loaded
