"""Big groups (docs/design/scale/biggroups.md), against real PostgreSQL and a real server.

The expensive proof runs once: a 100,000-member group built with addMembers
batches, and inside it every check that needs that size: the last batch's
cost, memberCount and members paging, seen / seenByCount / seenBy, the
index-only count, the SQL of one markRead and of one event (statements and
the conversation_member rows they touch, counted with EXPLAIN ANALYZE of the
very statements the server ran), the read.updated routing and its coalescing,
and a removed member's subscriptions. The threshold itself is tested on a
server whose threshold is 3, where one added member crosses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import make_url, text

from chatgql import db
from chatgql.store.conversations import SEEN_STATE_SQL

from ..conftest import RunningServer, create_engine, drop_database, make_settings, scratch_database
from ..graphql.test_query_count import logging_statements, outbox_drained
from ..support.live import ChatApi, Operation, wait_active_subscriptions, ws_connect

BIG = 100_000
BATCH = 1_000
OWNER = 1
# Touching more conversation_member rows than this for one call or one event would mean O(members).
FEW_ROWS = 2_000

READS = "subscription($c: ID) { readUpdated(conversationId: $c) { conversationId userId lastReadSeq coalesced moves } }"
READS_WITH_MEMBER = (
    "subscription($c: ID) { readUpdated(conversationId: $c) { userId lastReadSeq coalesced moves"
    " member { role joinedAt } } }"
)
MESSAGES = (
    "subscription($c: ID) { messageNew(conversationId: $c) { seq message { seq seen seenByCount seenBy(first: 5) } } }"
)


def _member_rows(plan: dict) -> int:
    """conversation_member rows (index entries or tuples) a plan node and its children read."""
    rows = 0
    if plan.get("Relation Name") == "conversation_member":
        loops = plan.get("Actual Loops", 1)
        rows += (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * loops
    for child in plan.get("Plans", ()):
        rows += _member_rows(child)
    return rows


async def rows_touched(server: RunningServer, statements: list[tuple[str, tuple]]) -> dict[str, int]:
    """Re-run each data statement under EXPLAIN ANALYZE in a transaction that is rolled back:
    statement -> conversation_member rows its plan read (assert on sum(...values()))."""
    total: dict[str, int] = {}
    async with server.runtime.deps.database.connection() as conn:
        for query, args in statements:
            if not query.lstrip().upper().startswith(("SELECT", "WITH", "INSERT", "UPDATE", "DELETE")):
                continue
            tr = conn.transaction()
            await tr.start()
            try:
                found = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", *args)
            finally:
                await tr.rollback()
            plan = (json.loads(found) if isinstance(found, str) else found)[0]["Plan"]
            total[" ".join(query.split())[:300]] = int(_member_rows(plan))
    return total


def touches_members(statements: list[tuple[str, tuple]]) -> list[str]:
    return [q for q, _ in statements if "conversation_member" in q]


async def received_within(op: Operation, seconds: float) -> list[tuple[float, dict]]:
    """Every event op gets in the next `seconds`, with its arrival time."""
    got: list[tuple[float, dict]] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            data = await op.next(timeout=left)
        except TimeoutError:
            break
        got.append((time.monotonic(), data))
    return got


@contextlib.asynccontextmanager
async def own_database_server(
    migrated_url: str, purpose: str, **settings: Any
) -> AsyncIterator[tuple[RunningServer, Any]]:
    """A server (relay included) on a database of its own: no other server's relay takes its events."""
    name = f"{make_url(db.asyncpg_url(migrated_url)).database}_{purpose}"
    url = await scratch_database(migrated_url, name)
    engine = create_engine(url, pool_size=4, max_overflow=4)
    try:
        async with RunningServer(make_settings(url, **settings)) as running:
            yield running, engine
    finally:
        await engine.dispose()
        await drop_database(migrated_url, name)


async def explain(server: RunningServer, query: str, *args: Any) -> str:
    async with server.runtime.deps.database.connection() as conn:
        return "\n".join(row[0] for row in await conn.fetch("EXPLAIN " + query, *args))


@pytest.mark.slow
async def test_a_100000_member_group_costs_o1_per_call_and_per_event(migrated_url, http):
    async with own_database_server(migrated_url, "biggroups", max_group_members=BIG) as (server, engine):
        await _big_group(server, engine, http)


async def _big_group(server: RunningServer, engine: Any, http: Any) -> None:
    api = ChatApi.of(server, http)
    assert server.settings.big_group_threshold == 200 and server.settings.big_group_read_interval_seconds == 1.0

    # ---- built with addMembers batches (four adders at once: the stored count holds under races)
    cid = await api.create_group(OWNER, range(2, BATCH + 1), title="everyone")
    batches = [list(range(start, start + BATCH)) for start in range(BATCH + 1, BIG - BATCH + 1, BATCH)]
    gate = asyncio.Semaphore(4)

    async def add(i: int, batch: list[int]) -> None:
        async with gate:
            await api.add_members(1 + i % 4, cid, batch)  # members 1..4 add

    await asyncio.gather(*(add(i, b) for i, b in enumerate(batches)))
    # the last batch into 99,000 members: a few statements, touching O(batch) rows, not O(members)
    last = list(range(BIG - BATCH + 1, BIG + 1))
    with logging_statements(server) as statements:
        await api.add_members(OWNER, cid, last)
        await asyncio.sleep(0.05)
    add_statements = list(statements)
    assert len(touches_members(add_statements)) <= 3, add_statements
    add_rows = await rows_touched(server, add_statements)
    assert sum(add_rows.values()) <= 3 * BATCH, add_rows
    too_many = await api.error(
        "mutation($c: ID!, $u: [ID!]!) { addMembers(conversationId: $c, userIds: $u) { id } }",
        {"c": cid, "u": [str(BIG + 1)]},
        user=OWNER,
    )
    assert too_many["extensions"]["code"] == "LIMIT_EXCEEDED"
    async with engine.begin() as conn:
        assert (
            await conn.execute(text(f"SELECT count(*) FROM conversation_member WHERE conversation_id = {cid}"))
        ).scalar() == BIG
        await conn.execute(text("ANALYZE conversation_member"))
    async with engine.connect() as conn:  # VACUUM: the visibility map, for index-only scans
        await (await conn.execution_options(isolation_level="AUTOCOMMIT")).execute(text("VACUUM conversation_member"))

    # ---- memberCount, and members paged: never 100,000 rows by surprise
    data = await api.data(
        "query($c: ID!) { conversation(id: $c) { memberCount members { userId } "
        'big: members(first: 5000) { userId } tail: members(first: 5, after: "99997") { userId role } } }',
        {"c": cid},
        user=7,
    )
    conv = data["conversation"]
    assert conv["memberCount"] == BIG
    everyone = sorted(str(u) for u in range(1, BIG + 1))  # members are in text order: "10" before "9"
    assert [m["userId"] for m in conv["members"]] == everyone[:1000]
    assert len(conv["big"]) == 1000  # first is capped
    assert conv["tail"] == [{"userId": u, "role": "MEMBER"} for u in everyone if u > "99997"]
    assert [m["userId"] for m in conv["tail"]] == ["99998", "99999"]  # "100000" < "99997" as text

    # ---- subscribers: own devices, other members, a member to be removed
    clients = {
        name: await ws_connect(server, user)
        for name, user in [("r5a", 5), ("r5b", 5), ("r6", 6), ("r9", 9), ("m7", 7), ("m8", 8), ("m10", 10), ("r10", 10)]
    }
    try:
        ops = {
            "r5a": await clients["r5a"].subscribe(READS, {"c": cid}),
            "r5b": await clients["r5b"].subscribe(READS, {}),  # all of 5's conversations
            "r6": await clients["r6"].subscribe(READS, {"c": cid}),
            "r9": await clients["r9"].subscribe(READS_WITH_MEMBER, {"c": cid}),
            "m7": await clients["m7"].subscribe(MESSAGES, {"c": cid}),
            "m8": await clients["m8"].subscribe(MESSAGES, {}),
            "m10": await clients["m10"].subscribe(MESSAGES, {}),
            "r10": await clients["r10"].subscribe(READS, {"c": cid}),
        }
        await wait_active_subscriptions(server, len(ops))

        # ---- one message: every subscribed member gets it; the event's SQL is O(1)
        await outbox_drained(engine)
        with logging_statements(server) as statements:
            seq = await api.send(OWNER, cid, "hello everyone")
            got = {name: await ops[name].next(timeout=30) for name in ("m7", "m8", "m10")}
            await asyncio.sleep(0.05)
        event_statements = list(statements)
        assert seq == 1
        assert {g["messageNew"]["seq"] for g in got.values()} == {1}
        assert got["m7"]["messageNew"]["message"] == {"seq": 1, "seen": False, "seenByCount": 0, "seenBy": []}
        # the send, the membership of this process's subscribers, the event's seen reads
        assert len(event_statements) <= 8, event_statements
        event_rows = await rows_touched(server, event_statements)
        assert sum(event_rows.values()) <= FEW_ROWS, event_rows

        # ---- read.updated above the threshold: the reader's own devices at once, the others coalesced
        await outbox_drained(engine)
        with logging_statements(server) as statements:
            moved = await api.mark_read(5, cid, 1)
            own_a, own_b = await ops["r5a"].next(timeout=10), await ops["r5b"].next(timeout=10)
            first_coalesced = await ops["r6"].next(timeout=10)
            with_member = await ops["r9"].next(timeout=10)
            await asyncio.sleep(0.05)
        read_statements = list(statements)
        assert moved["advanced"] is True
        mine = {"conversationId": cid, "userId": "5", "lastReadSeq": 1, "coalesced": False, "moves": 1}
        assert own_a["readUpdated"] == mine and own_b["readUpdated"] == mine
        assert first_coalesced["readUpdated"] == dict(mine, coalesced=True)
        assert with_member["readUpdated"]["member"]["role"] == "MEMBER"
        assert len(read_statements) <= 4, read_statements
        read_rows = await rows_touched(server, read_statements)
        assert sum(read_rows.values()) <= 10, read_rows  # the reader's row, the member row of r9's selection

        # a burst of 30 other members' reads: r6 gets at most one event a second, the newest move
        # last, every move counted once; 5's devices get none of them one by one
        readers = list(range(11, 41))
        listening = asyncio.create_task(received_within(ops["r6"], 6.0))  # reads as events arrive
        started = time.monotonic()
        for user in readers:
            await api.mark_read(user, cid, 1)
        burst_seconds = time.monotonic() - started
        assert burst_seconds < 3.5, burst_seconds  # else the window below is too short to see them all
        events = await listening
        coalesced = [e["readUpdated"] for _, e in events]
        assert coalesced and all(e["coalesced"] for e in coalesced), coalesced
        assert sum(e["moves"] for e in coalesced) == len(readers), coalesced
        assert coalesced[-1]["userId"] == str(readers[-1])
        times = [at for at, _ in events]
        assert all(b - a >= 0.9 for a, b in zip(times, times[1:], strict=False)), times
        assert len(events) <= 2 + burst_seconds, (len(events), burst_seconds)
        own = await received_within(ops["r5a"], 0.2)
        assert all(e["readUpdated"]["coalesced"] for _, e in own), own

        # ---- seen, seenByCount and seenBy: 31 readers of seq 1 (5 and 11..40), the sender not one
        data = await api.data(
            "query($c: ID!) { messages(conversationId: $c, last: 1) { nodes { seq seen seenByCount "
            'p1: seenBy(first: 20) p2: seenBy(first: 20, after: "34") all: seenBy(first: 100000) } } }',
            {"c": cid},
            user=OWNER,
        )
        node = data["messages"]["nodes"][0]
        expected = sorted(str(u) for u in [5, *readers])  # in text order: "11".."40", then "5"
        assert node["seenByCount"] == len(expected) and node["seen"] is False
        assert node["p1"] == expected[:20]
        assert node["p2"] == [u for u in expected if u > "34"]
        assert node["all"] == expected
        plan = await explain(server, SEEN_STATE_SQL, [int(cid)], [1], [1], [int(cid)], [str(OWNER)])
        assert "Index Only Scan using conversation_member_read_idx" in plan, plan
        assert "Seq Scan on conversation_member" not in plan, plan

        # ---- a removed member stops receiving at once
        await api.remove_member(OWNER, cid, 10)
        removed = await ops["r10"].error(timeout=10)
        assert removed.code == "NOT_FOUND"
        await api.send(OWNER, cid, "after 10 left")
        assert (await ops["m8"].next(timeout=10))["messageNew"]["seq"] == 2
        assert (await ops["m7"].next(timeout=10))["messageNew"]["seq"] == 2
        assert await received_within(ops["m10"], 0.5) == []
    finally:
        await asyncio.gather(*(c.close() for c in clients.values()), return_exceptions=True)


async def test_at_the_threshold_reads_go_to_everyone_and_above_it_only_to_the_readers_own_devices(migrated_url, http):
    async with own_database_server(migrated_url, "bigthreshold", big_group_threshold=3) as (server, engine):
        api = ChatApi.of(server, http)
        cid = await api.create_group(1, [2, 3])  # 3 members: not above the threshold
        direct = (await api.data('mutation { createDirectConversation(userId: "2") { id } }', user=1))[
            "createDirectConversation"
        ]["id"]
        for body in ("a", "b", "c"):
            await api.send(2, cid, body)
        await api.send(2, direct, "d")
        clients = [await ws_connect(server, user) for user in (2, 3, 99, 1)]
        try:
            r2 = await clients[0].subscribe(READS, {"c": cid})
            r3 = await clients[1].subscribe(READS, {})  # all of 3's conversations
            m99 = await clients[2].subscribe(MESSAGES, {})  # a member of nothing here
            r1 = await clients[3].subscribe(READS, {"c": cid})
            await wait_active_subscriptions(server, 4)

            # small: every move reaches every subscribed member, one by one, as before
            for seq in (1, 2, 3):
                await api.mark_read(1, cid, seq)
            await api.mark_read(1, direct, 1)
            one_by_one = [{"userId": "1", "lastReadSeq": s, "coalesced": False, "moves": 1} for s in (1, 2, 3)]
            for op in (r2, r3):
                got = [e["readUpdated"] for e in await op.collect(3, timeout=10)]
                assert [{k: e[k] for k in one_by_one[0]} for e in got] == one_by_one
            assert [e["readUpdated"]["lastReadSeq"] for e in await r1.collect(3, timeout=10)] == [1, 2, 3]
            direct_read = await clients[0].subscribe(READS, {"c": direct})
            await wait_active_subscriptions(server, 5)
            await api.send(2, direct, "e")
            await api.mark_read(1, direct, 2)
            assert (await direct_read.next(timeout=10))["readUpdated"]["coalesced"] is False

            # one more member: above the threshold
            await api.add_members(1, cid, [4, 6])
            seq = await api.send(4, cid, "now big")
            listening = asyncio.create_task(received_within(r2, 2.5))
            started = time.monotonic()
            for user in (1, 3, 6):  # (4 sent it: 4 has read it)
                await api.mark_read(user, cid, seq)
            burst_seconds = time.monotonic() - started
            got = [e["readUpdated"] for _, e in await listening]
            assert got and all(e["coalesced"] for e in got), got
            assert sum(e["moves"] for e in got) == 3 and got[-1]["userId"] == "6", got
            # at most one at once and one an interval later: three moves, so some were folded
            assert len(got) <= 2 + int(burst_seconds), (got, burst_seconds)
            # 1's own device got 1's move at once, not coalesced; 3's all-conversations one got 3's own
            own = [e["readUpdated"] for _, e in await received_within(r1, 2.0)]
            assert {"userId": "1", "lastReadSeq": seq, "coalesced": False} in [
                {k: e[k] for k in ("userId", "lastReadSeq", "coalesced")} for e in own
            ], own
            assert all(e["coalesced"] for e in own if e["userId"] != "1"), own
            mine3 = [e["readUpdated"] for _, e in await received_within(r3, 1.0)]
            assert {"userId": "3", "lastReadSeq": seq, "coalesced": False} in [
                {k: e[k] for k in ("userId", "lastReadSeq", "coalesced")} for e in mine3
            ], mine3

            # a member added later and subscribed later is asked about and served; a non-member never
            await api.add_members(1, cid, [5])
            late = await ws_connect(server, 5)
            clients.append(late)
            m5 = await late.subscribe(MESSAGES, {})
            await wait_active_subscriptions(server, 6)
            seq = await api.send(1, cid, "hello 5")
            assert (await m5.next(timeout=10))["messageNew"]["seq"] == seq
            assert await received_within(m99, 0.3) == []
        finally:
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
