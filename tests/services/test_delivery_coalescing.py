"""Coalesced markDelivered (services/delivery_coalescing.py) against real PostgreSQL.

- one flush merges the calls of many users and devices per (conversation, user), the largest
  seq, clamped: one write statement and one delivery.updated per key that moved, not per call;
- a call naming a conversation the viewer is not in gets NOT_FOUND alone, nothing of it written;
- a storm of devices (two per user) racing markDelivered and markRead, both coalesced, while
  messages arrive: delivered (GREATEST(delivered, read)) never moves back, never exceeds lastSeq,
  ends at the largest of both asks (clamped), and its events per key strictly increase.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import AsyncIterator
from itertools import pairwise

import pytest
from sqlalchemy.engine import make_url

from chatgql import db
from chatgql.errors import NotFound
from chatgql.services.delivery import do_mark_delivered
from chatgql.services.delivery_coalescing import DeliveryCoalescer
from chatgql.services.read_coalescing import ReadCoalescer
from chatgql.services.reads import do_mark_read
from chatgql.store import conversations

from ..conftest import drop_database, scratch_database

WHOLE = 100  # big-group threshold for these tests


@pytest.fixture(scope="module")
async def scratch(migrated_url: str) -> AsyncIterator[str]:
    name = f"{make_url(db.asyncpg_url(migrated_url)).database}_delivery_coalescer"
    url = await scratch_database(migrated_url, name)
    try:
        yield url
    finally:
        await drop_database(migrated_url, name)


@pytest.fixture
async def database(scratch: str) -> AsyncIterator[db.Database]:
    database = await db.Database(scratch, max_size=6).open()
    async with database.connection() as conn:
        await conn.execute("TRUNCATE outbox, direct_pair, message, conversation_member, conversation RESTART IDENTITY")
    try:
        yield database
    finally:
        await database.close()


async def group(database: db.Database, members: list[str], last_seq: int) -> int:
    async with database.transaction() as conn:
        cid = (await conversations.insert_conversation(conn, "GROUP", "g")).id
        await conversations.insert_members(conn, cid, [(m, "MEMBER") for m in members])
        await conn.execute("UPDATE conversation SET last_seq = $2 WHERE id = $1", cid, last_seq)
    return cid


class Statements:
    """Counts the statements the database's pooled connections run (asyncpg's query logger)."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def __call__(self, record) -> None:
        self.queries.append(record.query)

    async def attach(self, database: db.Database) -> None:
        pool = database.pool
        held = [await pool.acquire() for _ in range(pool.get_max_size())]
        for conn in held:
            conn.add_query_logger(self)
        for conn in held:
            await pool.release(conn)

    def writes(self) -> int:
        return sum("UPDATE conversation_member" in q for q in self.queries)


def mark(database, coalescer, user: str, items: list[tuple[int, int]]):
    return do_mark_delivered(database, user, items, whole_up_to=WHOLE, max_items=500, coalescer=coalescer)


async def delivery_events(database: db.Database) -> dict[tuple[int, str], list[int]]:
    async with database.connection() as conn:
        rows = await conn.fetch("SELECT payload FROM outbox WHERE payload->>'type' = 'delivery.updated' ORDER BY id")
    found: dict[tuple[int, str], list[int]] = defaultdict(list)
    for row in rows:
        found[(row["payload"]["conversationId"], row["payload"]["userId"])].append(row["payload"]["deliveredSeq"])
    return found


async def test_one_flush_merges_every_call_per_conversation_and_user(database) -> None:
    flushed: list[tuple[int, int]] = []
    coalescer = DeliveryCoalescer(database, whole_up_to=WHOLE, on_flush=lambda k, c: flushed.append((k, c)))
    users = [str(u) for u in range(1, 9)]
    cids = [await group(database, users, last_seq=40) for _ in range(5)]
    foreign = await group(database, ["99"], last_seq=3)
    statements = Statements()
    await statements.attach(database)
    coalescer.start()
    try:
        calls = []
        asked: dict[tuple[int, int], int] = defaultdict(int)
        rng = random.Random(7)
        for user in users:
            for _device in range(2):  # two devices of each user, after a sync: every conversation at once
                items = [(cid, rng.randint(1, 50)) for cid in cids]
                for cid, seq in items:
                    asked[(cid, user)] = max(asked[(cid, user)], seq)
                calls.append(mark(database, coalescer, user, items))
        refused = mark(database, coalescer, "1", [(cids[0], 45), (foreign, 1)])  # not in foreign: all refused
        results = await asyncio.gather(*calls, refused, return_exceptions=True)
    finally:
        await coalescer.close()

    assert isinstance(results[-1], NotFound)
    assert flushed == [(len(cids) * len(users), 2 * len(users))], "all in one flush"
    assert statements.writes() == 1, statements.queries
    events = await delivery_events(database)
    assert sorted(events) == sorted(asked)
    for key, top in asked.items():
        assert events[key] == [min(top, 40)], key  # one event per key, the merged value
    callers = [user for user in users for _device in range(2)]
    for user, results_of_call in zip(callers, results[:-1], strict=True):
        for r in results_of_call:  # every caller gets the flush's merged, durable value
            assert r.delivered_seq == min(asked[(r.conversation_id, user)], 40), (user, r)
            assert r.advanced  # each ask is above the watermark the flush found (0)
    # The refused call wrote nothing: user 1's watermark in cids[0] is the others' merged value.
    assert events[(cids[0], "1")] == [min(asked[(cids[0], "1")], 40)]


async def test_delivered_and_read_racing_from_two_devices_per_user(database) -> None:
    delivered_flushes: list[tuple[int, int]] = []
    deliver = DeliveryCoalescer(database, whole_up_to=WHOLE, on_flush=lambda k, c: delivered_flushes.append((k, c)))
    read = ReadCoalescer(database)
    users = [str(u) for u in range(1, 7)]
    cids = [await group(database, users, last_seq=5) for _ in range(4)]
    top = dict.fromkeys(cids, 5)
    asked_delivered: dict[tuple[int, int], int] = defaultdict(int)
    asked_read: dict[tuple[int, int], int] = defaultdict(int)
    deliver.start()
    read.start()
    stop = asyncio.Event()
    samples: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)

    async def sample() -> None:
        while not stop.is_set():
            async with database.connection() as conn:
                rows = await conn.fetch(
                    "SELECT m.conversation_id, m.user_id, GREATEST(m.delivered_seq, m.last_read_seq) AS d, c.last_seq"
                    " FROM conversation_member m JOIN conversation c ON c.id = m.conversation_id"
                )
            for row in rows:
                samples[(row["conversation_id"], row["user_id"])].append((row["d"], row["last_seq"]))
            await asyncio.sleep(0)

    async def sender() -> None:
        for _ in range(30):
            cid = random.choice(cids)
            async with database.connection() as conn:
                top[cid] = await conn.fetchval(
                    "UPDATE conversation SET last_seq = last_seq + 1 WHERE id = $1 RETURNING last_seq", cid
                )
            await asyncio.sleep(0)

    calls = 0

    async def device(user: str, number: int) -> None:
        nonlocal calls
        rng = random.Random(int(user) * 10 + number)
        floor: dict[int, int] = {}
        for _ in range(25):
            if rng.random() < 0.7:
                items = [(cid, max(0, top[cid] + rng.randint(-4, 3))) for cid in rng.sample(cids, rng.randint(1, 4))]
                for cid, seq in items:
                    asked_delivered[(cid, user)] = max(asked_delivered[(cid, user)], seq)
                calls += 1
                for r in await mark(database, deliver, user, items):
                    assert r.delivered_seq >= floor.get(r.conversation_id, 0), "a device saw delivered go back"
                    floor[r.conversation_id] = r.delivered_seq
            else:
                cid = rng.choice(cids)
                seq = max(0, top[cid] + rng.randint(-4, 3))
                asked_read[(cid, user)] = max(asked_read[(cid, user)], seq)
                await do_mark_read(database, user, cid, seq, coalescer=read)
            await asyncio.sleep(0)

    sampler = asyncio.create_task(sample())
    try:
        await asyncio.gather(sender(), *(device(u, d) for u in users for d in range(2)))
    finally:
        stop.set()
        await sampler
        await deliver.close()
        await read.close()

    async with database.connection() as conn:
        rows = await conn.fetch(
            "SELECT m.conversation_id, m.user_id, m.delivered_seq, m.last_read_seq, c.last_seq"
            " FROM conversation_member m JOIN conversation c ON c.id = m.conversation_id"
        )
    events = await delivery_events(database)
    for row in rows:
        key = (row["conversation_id"], row["user_id"])
        delivered = max(row["delivered_seq"], row["last_read_seq"])
        assert delivered <= row["last_seq"]
        assert row["last_read_seq"] == 0 or delivered >= row["last_read_seq"]  # read implies delivered
        # Each watermark ends at most at its largest ask, and at least where the last ask could reach.
        assert row["delivered_seq"] <= asked_delivered[key]
        assert row["last_read_seq"] <= asked_read[key]
        values = [d for d, _ in samples[key]]
        assert all(a <= b for a, b in pairwise(values)), (key, values)
        assert all(d <= last for d, last in samples[key])
        assert all(a < b for a, b in pairwise(events[key])), (key, events[key])  # no duplicate, never back
        if events[key]:
            assert events[key][-1] == row["delivered_seq"]  # the final delivered_seq has its event
        elif row["delivered_seq"]:
            pytest.fail(f"{key}: delivered_seq {row['delivered_seq']} with no delivery.updated")
    assert len(delivered_flushes) < calls, (len(delivered_flushes), calls)
