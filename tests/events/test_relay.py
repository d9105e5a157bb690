"""The outbox relay: one leader per database, per-conversation order on the topic,
and a standby that takes over when the leader goes away."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict

from ..conftest import RunningServer
from ..support.live import ChatApi, metrics, outbox_empty, read_topic, wait_until
from .conftest import kafka_settings


def message_seqs(records, conversations) -> dict[str, list[int]]:
    """message.new seqs per conversation in topic order, after dedupe (first copy kept).

    Also checks that each conversation's events are keyed by its id and sit in one partition.
    """
    per_conversation: dict[str, list] = defaultdict(list)
    for record in records:
        if record.value["type"] == "message.new":
            cid = str(record.value["conversationId"])
            assert record.key == cid, (record.key, record.value)
            per_conversation[cid].append(record)
    seqs: dict[str, list[int]] = {}
    for cid in conversations:
        mine = sorted(per_conversation[cid], key=lambda r: r.offset)
        assert len({r.partition for r in mine}) <= 1, f"conversation {cid} spread over partitions"
        kept: list[int] = []
        for record in mine:
            if record.value["seq"] not in kept:
                kept.append(record.value["seq"])
        seqs[cid] = kept
    return seqs


def leaders(servers) -> list[RunningServer]:
    return [s for s in servers if s.runtime.relay.is_leader]


async def test_two_relays_keep_per_conversation_order_and_the_standby_takes_over(
    migrated_url, kafka, topic, http, engine
):
    # One shard: one relay leads the whole outbox and the other stands by (tests/events/
    # test_relay_shards.py has relay processes sharing several shards).
    servers = [
        RunningServer(kafka_settings(migrated_url, kafka, topic, run_relay=True, run_consumer=False, relay_shards=1))
        for _ in range(2)
    ]
    async with contextlib.AsyncExitStack() as stack:
        for server in servers:
            await stack.enter_async_context(server)
        await wait_until(lambda: len(leaders(servers)) == 1, 15, "one of the two relays to lead")
        leader = leaders(servers)[0]
        standby = next(s for s in servers if s is not leader)
        apis = [ChatApi.of(s, http) for s in servers]

        members = [1, 2, 3, 4]
        conversations = [await apis[i % 2].create_group(1, members[1:], f"c{i}") for i in range(4)]

        never_two = True

        async def watch_leaders() -> None:
            nonlocal never_two
            while True:
                never_two = never_two and len(leaders(servers)) <= 1
                await asyncio.sleep(0.01)

        watcher = asyncio.create_task(watch_leaders())
        later: asyncio.Task | None = None
        try:
            # Phase 1: every conversation gets messages through both processes at once.
            sent = 0

            async def sender(api: ChatApi, user: int, cid: str, count: int) -> None:
                nonlocal sent
                for i in range(count):
                    await api.send(user, cid, f"{user}:{i}")
                    sent += 1

            await asyncio.wait_for(
                asyncio.gather(*(sender(apis[k], members[k], cid, 10) for cid in conversations for k in range(2))), 60
            )
            assert leader.runtime.relay.is_leader and not standby.runtime.relay.is_leader
            assert (await metrics(http, leader))["chatgql_events_relayed_total"] > 0
            assert (await metrics(http, standby))["chatgql_events_relayed_total"] == 0

            # Phase 2: sends continue through the standby while the leader goes away, and after.
            standby_api = apis[servers.index(standby)]
            later = asyncio.create_task(
                asyncio.wait_for(
                    asyncio.gather(*(sender(standby_api, members[2], cid, 10) for cid in conversations)), 60
                )
            )
            await wait_until(lambda: sent >= 80 + 5, 30, "the standby to take some sends")
            assert not later.done(), "the leader must go away while sends are still coming"
            await leader.__aexit__(None, None, None)
            await wait_until(lambda: standby.runtime.relay.is_leader, 15, "the standby relay to take over")
            await later
            # The old leader relays until it has stopped (what it committed before may all be gone
            # by then); these come after, so only the new leader can relay them.
            await asyncio.wait_for(
                asyncio.gather(*(sender(standby_api, members[3], cid, 10) for cid in conversations)), 60
            )
            await wait_until(lambda: outbox_empty(engine), 30, "the outbox to drain")
            assert (await metrics(http, standby))["chatgql_events_relayed_total"] > 0
        finally:
            if later is not None and not later.done():
                later.cancel()
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        assert never_two, "both relays led at the same time"

    per_conversation = 40

    def complete(records) -> bool:
        got = message_seqs(records, conversations)
        return all(len(seqs) >= per_conversation for seqs in got.values())

    records = await read_topic(kafka.bootstrap, topic, complete, timeout=30)
    seqs = message_seqs(records, conversations)
    for cid in conversations:
        assert seqs[cid] == list(range(1, per_conversation + 1)), (cid, seqs[cid])
