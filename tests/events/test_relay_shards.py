"""Sharded outbox relays: R shards by a fixed hash of the conversation, shared out among
`chatgql relay` processes; every event relayed in order per conversation; a relay killed
with SIGKILL has its shards taken over by the others."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from chatgql.db import Database
from chatgql.events.bus import Bus
from chatgql.events.publish import BusPublisher
from chatgql.events.relay import OutboxRelay, fair_share
from chatgql.events.wakeup import RelayWakeup
from chatgql.services import conversations as conversation_service
from chatgql.services import reads as read_service
from chatgql.services.messages import do_send_message
from chatgql.settings import load_settings
from chatgql.store import outbox

from ..support.infra import ChatProcess, chat_env
from ..support.live import ChatApi, metrics, read_topic, wait_until

SHARDS = 4
SLOTS_PER_SHARD = outbox.SLOTS // SHARDS


@pytest.fixture
async def database(migrated_url: str) -> AsyncIterator[Database]:
    database = await Database(migrated_url, max_size=12).open()
    try:
        yield database
    finally:
        await database.close()


async def shards_by_relay(database: Database) -> dict[str, set[int]]:
    """Which shards each relay process leads (it holds every slot lock of the shard)."""
    async with database.connection() as conn:
        rows = await outbox.slot_leaders(conn)
    led: dict[str, set[int]] = {}
    for row in rows:
        slots = set(row.slots)
        led[row.application_name] = {
            shard for shard in range(SHARDS) if set(outbox.shard_slots(shard, SHARDS)) <= slots
        }
        assert sum(len(outbox.shard_slots(s, SHARDS)) for s in led[row.application_name]) == len(slots), (
            "a relay holds part of a shard",
            row,
        )
    return led


async def leads(database: Database, expected: list[set[int]]) -> bool:
    return sorted(map(sorted, (await shards_by_relay(database)).values())) == sorted(map(sorted, expected))


async def outbox_rows(database: Database) -> int:
    async with database.connection() as conn:
        return sum(row.rows for row in await outbox.backlog(conn, SHARDS))


# --- the slot: a fixed hash ----------------------------------------------------------------


async def test_slots_are_a_fixed_hash_of_the_key_written_by_every_writer(database: Database) -> None:
    """The slot never depends on the shard count and must never change (pinned values): a
    conversation that moved slots could be relayed by two shards at once, out of order."""
    group = await conversation_service.do_create_group(database, "1", "g", ["2"], max_members=10)
    await do_send_message(database, "1", group, uuid.uuid4(), "hello")  # chat_send: message.new
    await do_send_message(database, "2", group, uuid.uuid4(), "hi")  # and read.updated
    await read_service.do_mark_read(database, "1", group, 2)  # the markRead statement
    await conversation_service.do_add_members(database, "1", group, ["3"], max_members=10)  # outbox.append
    async with database.connection() as conn:
        rows = await conn.fetch("SELECT msg_key, slot, payload->>'type' AS type FROM outbox ORDER BY id")
        pinned = await conn.fetch(
            "SELECT k::text AS key, (hashtextextended(k::text, 0) & 63) AS slot FROM generate_series(1, 4) k"
        )
    assert [row.type for row in rows] == [
        "member.added",
        "message.new",
        "message.new",
        "read.updated",
        "read.updated",
        "member.added",
    ]
    assert {(row.msg_key, row.slot) for row in rows} == {(str(group), rows[0].slot)}
    assert {row.key: row.slot for row in pinned} == {"1": 57, "2": 2, "3": 24, "4": 12}


async def test_a_shards_batch_is_its_slots_oldest_rows_in_id_order(database: Database) -> None:
    """Whatever one read returns is, for every slot, a prefix of that slot's rows by id."""
    async with database.connection() as conn:
        await outbox.append(conn, [(str(i % 37), {"n": i}) for i in range(2000)])
        slots = outbox.shard_slots(1, SHARDS)
        batch = await outbox.oldest(conn, slots, 50)
        mine = await conn.fetch("SELECT id, slot FROM outbox WHERE slot = ANY($1::smallint[]) ORDER BY id", slots)
    assert len(mine) > 50 and len(batch) == 50
    assert [row.id for row in batch] == [row.id for row in mine[:50]]


def test_shard_counts_must_divide_the_slots_and_shares_round_up() -> None:
    for shards in (1, 2, 4, 8, 16, 32, 64):
        assert load_settings(relay_shards=shards).relay_shards == shards
    for shards in (0, 3, 5, 48, 128):
        with pytest.raises(ValidationError):
            load_settings(relay_shards=shards)
    assert [fair_share(4, n) for n in (1, 2, 3, 4, 5)] == [4, 2, 2, 1, 1]


# --- in one process ------------------------------------------------------------------------


async def test_one_serve_process_leads_every_shard_and_reports_them(kafka_server, http) -> None:
    """The default (`chatgql serve` with its relay): one process leads all R shards; /metrics
    says so, and counts what each shard relayed."""
    relay = kafka_server.runtime.relay
    await wait_until(lambda: relay.is_leader, 60, "the relay to lead every shard")
    assert relay.shards_led == list(range(SHARDS))
    api = ChatApi.of(kafka_server, http)
    groups = [await api.create_group(1, [2], f"g{i}") for i in range(6)]
    for group in groups:
        await api.send(1, group, "hello")
    got = {}

    async def relayed_all() -> bool:
        got.clear()
        got.update(await metrics(http, kafka_server))
        pending = sum(v for k, v in got.items() if k.startswith("chatgql_outbox_shard_rows"))
        # member.added and message.new each, and the outbox empty (its gauge is read when scraped)
        return got.get("chatgql_events_relayed_total", 0) >= 12 and pending == 0

    await wait_until(relayed_all, 60, "the relay to publish every event")
    assert got["chatgql_relay_shards_led"] == SHARDS
    per_shard = {k: v for k, v in got.items() if k.startswith("chatgql_relay_shard_events_relayed_total")}
    assert sum(per_shard.values()) == got["chatgql_events_relayed_total"], got
    assert sum(v for k, v in got.items() if k.startswith("chatgql_outbox_shard_rows")) == 0, got


async def test_a_relay_stops_when_cancelled_however_often_it_is_woken(database: Database) -> None:
    """Shutting a process down cancels its relay while commits keep waking it; the relay must
    end every time (on Python 3.11 asyncio.wait_for swallowed such a cancellation, and a
    server's shutdown hung)."""
    bus = Bus("memory://")
    await bus.connect()
    try:
        for _ in range(20):
            await stop_while_woken(OutboxRelay(database, BusPublisher(bus), shards=SHARDS))
    finally:
        await bus.disconnect()


async def test_a_relay_that_publishes_to_its_own_process_only_says_so_when_another_shares_its_database(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """Two processes on one database with the memory bus and no Kafka split the shards, and each
    delivers live only what its own shards relay: a misconfiguration that loses no event (sync
    has them all) but looks like lost live events. The relay that publishes locally says so,
    once; one whose publisher reaches every process (Kafka, a Redis bus) does not."""
    bus = Bus("memory://")
    await bus.connect()
    local = OutboxRelay(database, BusPublisher(bus), shards=SHARDS, local=True)
    shared = OutboxRelay(database, BusPublisher(bus), shards=SHARDS)
    tasks = [asyncio.create_task(relay.run()) for relay in (local, shared)]
    caplog.set_level("WARNING", logger="chatgql.events.relay")

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if "publishes to its own process only" in r.getMessage()]

    try:
        await wait_until(lambda: bool(local.shards_led and shared.shards_led), 60, "both relays to lead shards")
        await wait_until(lambda: bool(warnings()), 30, "the local relay's warning")
        await asyncio.sleep(1.5)  # a few more rebalances (every 0.5 s): still once
        assert len(warnings()) == 1, warnings()
        assert "2 relay processes share this database" in warnings()[0]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await bus.disconnect()


async def stop_while_woken(relay: OutboxRelay) -> None:
    running = asyncio.create_task(relay.run())
    await wait_until(lambda: relay.is_leader, 10, "the relay to lead every shard")

    async def wake_constantly() -> None:
        while True:
            relay.wake()
            await asyncio.sleep(0)

    waking = asyncio.create_task(wake_constantly())
    await asyncio.sleep(0.02)
    running.cancel()
    done, _ = await asyncio.wait({running}, timeout=5)
    waking.cancel()
    assert done, "the relay ignored its cancellation"
    assert running.cancelled()


# --- relay processes -----------------------------------------------------------------------


async def test_two_relay_processes_share_the_shards_and_one_killed_is_taken_over(
    migrated_url, kafka, topic, database: Database, tmp_path: Path
) -> None:
    """Two `chatgql relay` processes, 4 shards: the second, started while events of 20
    conversations are written, gets two shards from the first, and each event is published
    exactly once, in seq order per conversation. Then, while 20 other
    conversations take a stream of sends, one relay is killed with SIGKILL: the other leads
    all four shards within seconds, and every event reaches the topic, in order after
    dedupe, any duplicate being a re-send of the same event."""
    groups = [
        await conversation_service.do_create_group(database, "1", f"g{i}", ["2", "3"], max_members=10)
        for i in range(40)
    ]
    steady, streamed = groups[:20], groups[20:]
    wakeup = RelayWakeup(database)  # what an API process does after a commit: pg_notify
    env = chat_env(migrated_url, kafka.bootstrap, topic, "memory://")
    env["CHATGQL_RELAY_SHARDS"] = str(SHARDS)
    relays = [ChatProcess(f"relay{i}", ["relay"], env, tmp_path) for i in (1, 2)]
    sent: dict[int, list[int]] = defaultdict(list)

    async def send(group: int, sender: str) -> None:
        result = await do_send_message(database, sender, group, uuid.uuid4(), f"{sender}")
        sent[group].append(result.message.seq)
        wakeup.wake()

    try:
        # Phase 1: the first relay leads every shard; the second starts while the steady
        # conversations are being written and gets two shards handed over between batches.
        # Nothing is lost or sent twice, and each conversation stays in order.
        relays[0].start()
        await wait_until(
            lambda: leads(database, [set(range(SHARDS))]),
            60,
            f"the first relay to lead every shard (logs in {tmp_path})",
        )

        handed_over = asyncio.Event()

        async def steady_sender(group: int) -> None:
            # Until the second relay has its shards, then a few more.
            for i in itertools.count():
                if handed_over.is_set() and i >= 20:
                    break
                await send(group, str(1 + i % 3))
                await asyncio.sleep(0.05)
            await read_service.do_mark_read(database, "2", group, len(sent[group]))
            wakeup.wake()

        writing = asyncio.gather(*(steady_sender(group) for group in steady))
        relays[1].start()
        led: dict[str, set[int]] = {}

        async def shared_out() -> bool:
            led.clear()
            led.update(await shards_by_relay(database))
            return len(led) == 2 and all(len(shards) == 2 for shards in led.values())

        try:
            await wait_until(shared_out, 60, "both relays to lead two shards each")
        finally:
            handed_over.set()
            await writing
        await wait_until(lambda: outbox_rows_zero(database), 30, "the outbox to drain")
        assert await shards_by_relay(database) == led, "the shards moved while both relays ran"

        # Phase 2: a stream of sends; one relay is killed in the middle of it.
        stop = asyncio.Event()

        async def stream(worker: int) -> None:
            for n in itertools.count():
                if stop.is_set():
                    return
                await send(streamed[(worker + n * 4) % len(streamed)], str(1 + n % 3))

        workers = [asyncio.create_task(stream(w)) for w in range(4)]
        try:
            await asyncio.sleep(2)
            killed_at = time.monotonic()
            relays[0].kill()
            takeover = None
            while time.monotonic() - killed_at < 20:
                now = await shards_by_relay(database)
                if len(now) == 1 and next(iter(now.values())) == set(range(SHARDS)):
                    takeover = time.monotonic() - killed_at
                    survivor = next(iter(now))
                    break
                await asyncio.sleep(0.01)
            assert takeover is not None, f"the surviving relay never led every shard (logs in {tmp_path})"
            print(f"relay takeover after SIGKILL: {takeover:.3f} s")
            assert takeover < 10, takeover  # a correctness bound; bench/relayshards.py measures it
            assert survivor in led
            await asyncio.sleep(2)  # the stream goes on through the survivor alone
        finally:
            stop.set()
            await asyncio.gather(*workers)
        await wait_until(lambda: outbox_rows_zero(database), 30, "the outbox to drain after the takeover")
    finally:
        await wakeup.close()
        for relay in relays:
            await asyncio.to_thread(relay.stop)

    expected = sum(len(seqs) for seqs in sent.values())
    assert sum(len(sent[g]) for g in streamed) > 100, "too few sends to cover the kill"

    def complete(records) -> bool:
        return len({(r.key, r.value.get("seq")) for r in records if r.value["type"] == "message.new"}) >= expected

    records = await read_topic(kafka.bootstrap, topic, complete, timeout=60)
    by_key: dict[str, list] = defaultdict(list)
    for record in records:
        assert record.key == str(record.value["conversationId"])
        by_key[record.key].append(record)
    for group in groups:
        mine = sorted(by_key[str(group)], key=lambda r: r.offset)
        assert len({r.partition for r in mine}) == 1, f"conversation {group} spread over partitions"
        first: dict[tuple, dict] = {}
        seqs: list[int] = []
        reads: list[int] = []
        for record in mine:
            value = record.value
            key = (value["type"], value.get("seq"), value.get("userId"), value.get("lastReadSeq"))
            if key in first:
                assert group in streamed, f"conversation {group} was relayed twice before any fault: {key}"
                assert first[key] == value, ("a duplicate is not a re-send of the same event", first[key], value)
                continue
            first[key] = value
            if value["type"] == "message.new":
                seqs.append(value["seq"])
            elif value["type"] == "read.updated" and value["userId"] == 2:
                reads.append(value["lastReadSeq"])
        assert seqs == sorted(sent[group]) == list(range(1, len(sent[group]) + 1)), (group, seqs)
        assert reads == sorted(reads), (group, reads)


async def outbox_rows_zero(database: Database) -> bool:
    return await outbox_rows(database) == 0
