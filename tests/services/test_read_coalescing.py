"""Read-storm coalescing (services/read_coalescing.py) against real PostgreSQL.

One storm over HTTP, every invariant checked inside it: several users x several devices x
several conversations marking read while messages keep arriving, then a final round of every
device's largest seq. It proves:
- the final watermark of every (conversation, user) = LEAST(largest seq asked, lastSeq);
- no watermark moves back: sampled in the database during the storm, and in the answers (an
  answer received before another call was sent is never above that call's answer);
- every answer is at least what its caller asked, clamped to the lastSeq it had seen, and never
  above the largest seq asked for its key;
- read.updated rows per key strictly increase, and their values are exactly the watermarks
  that advanced=true answers reported (an event exists exactly when the watermark moved);
- the final round's calls go to PostgreSQL as one transaction a flush (counted on the server's
  connections), well below one a call.

The service-level tests use the coalescer directly on a scratch database: callers of one flush
that are not members get NOT_FOUND alone, a bad seq never reaches a flush, and a flush that
fails fails all its callers with the error the uncoalesced markRead gives, writing nothing.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from chatgql import db
from chatgql.edge.auth import issue_token
from chatgql.errors import BadUserInput, NotFound
from chatgql.events import types as events
from chatgql.services.read_coalescing import ReadCoalescer, answer
from chatgql.services.reads import do_mark_read
from chatgql.store import conversations, reads

from ..conftest import create_engine, database_name, drop_database, make_settings, scratch_database
from ..support.writepath import TIMEOUT, Quiet, open_quiet_server, wave

MARK_READ = (
    "mutation($c: ID!, $s: Long!) "
    "{ markRead(conversationId: $c, seq: $s) { conversationId lastReadSeq advanced unreadCount } }"
)
SEND = (
    "mutation($c: ID!, $k: UUID!, $b: String!) "
    "{ sendMessage(conversationId: $c, clientMsgId: $k, body: $b) { message { seq } } }"
)
CREATE_GROUP = "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }"

SENDER = 1  # sends, never marks read (a send raises the sender's own watermark, with no read.updated)
READERS = [str(u) for u in range(101, 109)]
DEVICES = 3
CONVERSATIONS = 3
CALLS_PER_DEVICE = 14
SENDS_PER_CONVERSATION = 20


def coalescing_settings(database_url: str) -> Any:
    # A window (50 ms: this one process also runs the clients), and a bound of 16 keys a flush,
    # so that the storm both merges and splits flushes.
    return make_settings(
        database_url,
        run_relay=False,
        request_timeout_seconds=TIMEOUT,
        db_pool_size=10,
        mark_read_coalescing=True,
        mark_read_window_ms=50,
        mark_read_max_batch=16,
    )


@pytest.fixture(scope="module")
async def storm_server(migrated_url: str) -> AsyncIterator[Quiet]:
    async with open_quiet_server(migrated_url, "coalescing", settings=coalescing_settings) as running:
        assert running.server.runtime.deps.read_coalescer is not None
        async with wave(running.server) as client:
            yield Quiet(running.server, running.engine, client)


@dataclass
class Answer:
    key: tuple[int, int]  # (conversation, user)
    asked: int
    seen_last_seq: int  # the highest seq acknowledged to the sender before the call went out
    sent_at: float
    received_at: float
    last_read_seq: int
    advanced: bool
    unread: int


class PoolTransactions:
    """The transactions the server runs on its pool's connections, counted by asyncpg's query
    loggers (asyncpg's own hook: every statement a connection runs): a statement outside
    BEGIN .. COMMIT is a transaction of its own, and so is each BEGIN .. COMMIT or ROLLBACK.

    Counted at the client, not with pg_stat_database.xact_commit: that counts the database's
    every transaction, autovacuum's included (a CI run counted 40 for these 3 flushes, when
    autovacuum got to the storm's tables), and lags by a commit or two either way."""

    def __init__(self) -> None:
        self.count = 0
        self.statements: list[str] = []  # each transaction: BEGIN, or its one statement (shortened)
        self._loggers: list[tuple[Any, Any]] = []  # (connection, its logger)

    async def attach(self, pool: Any) -> None:
        """A logger on every connection of the pool, filled to its largest size first, so that
        no connection opens uncounted (checked by detach)."""
        held = [await pool.acquire() for _ in range(pool.get_max_size())]
        try:
            for proxy in held:
                conn = proxy._con  # the connection itself: the proxy is handed back on release
                logged = self._logger()
                conn.add_query_logger(logged)
                self._loggers.append((conn, logged))
        finally:
            for proxy in held:
                await pool.release(proxy)

    def _logger(self) -> Any:
        """A query logger for one connection: each has its own BEGIN .. COMMIT state."""
        in_transaction = False

        def logged(query: Any) -> None:
            nonlocal in_transaction
            statement = query.query.lstrip().upper()
            if statement.startswith(("BEGIN", "START TRANSACTION")):
                in_transaction = True
                self.statements.append("BEGIN")
            elif statement.startswith(("COMMIT", "ROLLBACK", "END")):
                in_transaction = False
                self.count += 1
            elif in_transaction:
                pass
            else:
                self.statements.append(" ".join(statement.split())[:120])
                self.count += 1

        return logged

    def detach(self, pool: Any) -> None:
        for conn, logged in self._loggers:
            conn.remove_query_logger(logged)
        live = {id(holder._con) for holder in pool._holders if holder._con is not None}
        assert live == {id(conn) for conn, _ in self._loggers}, "a connection of the pool opened or closed uncounted"


@pytest.mark.slow
async def test_read_storm_coalesced_keeps_every_watermark_invariant_and_commits_well_below_once_per_call(
    storm_server: Quiet,
) -> None:
    server, engine, client = storm_server.server, storm_server.engine, storm_server.client
    assert client is not None
    async with engine.begin() as conn:
        await conn.execute(text("TRUNCATE outbox, direct_pair, message, conversation_member, conversation"))
    cids = [
        int(
            (await client.data(CREATE_GROUP, {"t": f"storm {i}", "m": [str(u) for u in READERS]}, user=SENDER))[
                "createGroup"
            ]["id"]
        )
        for i in range(CONVERSATIONS)
    ]
    top = dict.fromkeys(cids, 0)  # highest seq acknowledged to the sender

    async def send(cid: int) -> None:
        data = await client.data(SEND, {"c": str(cid), "k": str(uuid.uuid4()), "b": "m"}, user=SENDER)
        top[cid] = max(top[cid], data["sendMessage"]["message"]["seq"])

    for cid in cids:
        for _ in range(5):
            await send(cid)

    tokens = {
        (user, device): f"Bearer {issue_token(server.settings, str(user), ttl_seconds=3600 * (device + 1))}"
        for user in READERS
        for device in range(DEVICES)
    }
    answers: list[Answer] = []
    asked_max: dict[tuple[int, int], int] = defaultdict(int)

    async def mark(user: int, device: int, cid: int, seq: int) -> Answer:
        seen = top[cid]
        asked_max[(cid, user)] = max(asked_max[(cid, user)], seq)
        sent_at = time.monotonic()
        body = await client.execute(
            MARK_READ, {"c": str(cid), "s": seq}, headers={"authorization": tokens[(user, device)]}
        )
        assert "errors" not in body, body["errors"]
        result = body["data"]["markRead"]
        assert result["conversationId"] == str(cid)
        answer = Answer(
            (cid, user),
            seq,
            seen,
            sent_at,
            time.monotonic(),
            result["lastReadSeq"],
            result["advanced"],
            result["unreadCount"],
        )
        answers.append(answer)
        return answer

    async def device(user: str, number: int) -> None:
        rng = random.Random(int(user) * 10 + number)
        previous: dict[int, int] = {}
        for _ in range(CALLS_PER_DEVICE):
            cid = rng.choice(cids)
            now = top[cid]
            # Stale (a late device), current, or past the end (clamped by the server).
            seq = max(0, rng.choice([now - rng.randint(1, 6), now, now + rng.randint(1, 4)]))
            answer = await mark(user, number, cid, seq)
            assert answer.last_read_seq >= previous.get(cid, 0), "one device saw its watermark go back"
            previous[cid] = answer.last_read_seq
            await asyncio.sleep(rng.uniform(0, 0.004))

    async def sender(cid: int) -> None:
        for _ in range(SENDS_PER_CONVERSATION):
            await send(cid)

    samples: dict[tuple[int, int], list[int]] = defaultdict(list)
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            async with engine.connect() as conn:
                rows = await conn.execute(
                    text("SELECT conversation_id, user_id, last_read_seq FROM conversation_member")
                )
                for cid, user, value in rows:
                    samples[(cid, user)].append(value)
            await asyncio.sleep(0.02)

    sampler = asyncio.create_task(sample())
    await asyncio.gather(*(sender(cid) for cid in cids), *(device(user, d) for user in READERS for d in range(DEVICES)))

    stop.set()
    await sampler

    # The final round (no more sends): every device repeats its largest seq of every conversation,
    # all of them queued at the coalescer at once. How many calls one flush window catches depends
    # on the CPU the process gets (38 commits for 72 calls seen beside another test worker), so
    # the round is gated: a first call's flush is held at a lock inside PostgreSQL while the 72
    # calls queue behind it, then they go in as few flushes as the bound of keys a flush allows.
    coalescer = server.runtime.deps.read_coalescer
    flushes = server.runtime.metrics.mark_read_flushes
    flushes_before = flushes._value.get()
    pool = server.runtime.deps.database.pool
    transactions = PoolTransactions()
    await transactions.attach(pool)
    first_key = (cids[0], READERS[0])
    final_calls = [
        mark(user, d, cid, asked_max[(cid, user)]) for user in READERS for d in range(DEVICES) for cid in cids
    ]
    async with engine.connect() as gate:
        locked = await gate.begin()
        try:
            await gate.execute(text("LOCK TABLE conversation_member IN SHARE MODE"))  # no UPDATE gets by
            first = asyncio.ensure_future(mark(READERS[0], 0, cids[0], asked_max[first_key]))
            await until(lambda: waiting_on_a_lock(engine), "the first flush waits at the gate", first)
            rest = asyncio.ensure_future(asyncio.gather(*final_calls))
            await until(lambda: queued_calls(coalescer) == len(final_calls), "every call is queued", rest)
        finally:
            await locked.rollback()  # the gate opens: the first flush goes, then the queued calls
    await first
    await rest
    transactions.detach(pool)
    commits = transactions.count
    flush_count = flushes._value.get() - flushes_before

    async with engine.connect() as conn:
        last_seq = dict((await conn.execute(text("SELECT id, last_seq FROM conversation"))).all())
        final = {
            (cid, user): value
            for cid, user, value in (
                await conn.execute(text("SELECT conversation_id, user_id, last_read_seq FROM conversation_member"))
            ).all()
        }
        outbox = (
            await conn.execute(text("SELECT payload FROM outbox WHERE payload->>'type' = 'read.updated' ORDER BY id"))
        ).scalars()
        event_values: dict[tuple[int, int], list[int]] = defaultdict(list)
        for payload in outbox:
            event_values[(payload["conversationId"], payload["userId"])].append(payload["lastReadSeq"])

    assert all(last_seq[cid] == 5 + SENDS_PER_CONVERSATION for cid in cids)
    keys = [(cid, user) for cid in cids for user in READERS]
    for key in keys:
        cid, _ = key
        # The final watermark: LEAST(largest seq asked, lastSeq).
        assert final[key] == min(asked_max[key], last_seq[cid]), key
        # Never back, in the database.
        assert all(a <= b for a, b in pairwise(samples[key])), (key, samples[key])
        # read.updated: strictly increasing, and exactly the values advanced=true answers reported.
        values = event_values[key]
        assert all(a < b for a, b in pairwise(values)), (key, values)
        mine = [a for a in answers if a.key == key]
        assert set(values) == {a.last_read_seq for a in mine if a.advanced}, (key, values)
        if final[key] > 0:
            assert values[-1] == final[key]
        # Every answer: at least the clamped ask, at most the largest ask, its unread count right.
        for a in mine:
            assert min(a.asked, a.seen_last_seq) <= a.last_read_seq <= min(asked_max[key], last_seq[cid]), a
            assert a.unread >= 0 and a.last_read_seq + a.unread <= last_seq[cid], a
            if a.advanced:
                assert a.last_read_seq >= min(a.asked, a.seen_last_seq) and a.last_read_seq > 0, a
        # Never back, in the answers: an answer received before a call was sent is not above its answer.
        by_sent = sorted(mine, key=lambda a: a.sent_at)
        by_received = sorted(mine, key=lambda a: a.received_at)
        floor, i = 0, 0
        for a in by_sent:
            while i < len(by_received) and by_received[i].received_at < a.sent_at:
                floor = max(floor, by_received[i].last_read_seq)
                i += 1
            assert a.last_read_seq >= floor, (key, a, floor)
    assert sum(len(v) for v in event_values.values()) > len(keys)  # the storm moved watermarks often

    calls = len(final_calls)
    print(f"\nfinal round: {calls} markRead calls, {flush_count} flushes, {commits} PostgreSQL transactions")
    # The gate's flush, then the 72 calls' 24 keys in flushes of at most mark_read_max_batch keys.
    assert flush_count == 1 + -(-len(keys) // server.settings.mark_read_max_batch)
    # And what PostgreSQL was sent: one statement (one transaction) a flush, nothing else.
    assert commits == flush_count, (
        f"{commits} transactions for {calls} markRead calls in {flush_count} flushes: {transactions.statements}"
    )


async def waiting_on_a_lock(engine: Any) -> bool:
    async with engine.connect() as probe:
        waiting = await probe.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
        return waiting.scalar_one() > 0


def queued_calls(coalescer: ReadCoalescer) -> int:
    """markRead calls waiting in the coalescer for a flush (not the one in flight)."""
    return sum(len(calls) for calls in coalescer._pending.values())


async def until(condition: Any, what: str, calls: asyncio.Future) -> None:
    """Poll `condition` (its value, or what it returns awaited) until true; fails if `calls` end first."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            met = condition()
            if asyncio.iscoroutine(met):
                met = await met
            if met:
                return
            if calls.done():
                calls.result()  # a call failed: its error
                raise AssertionError(f"the calls ended before {what}")
            await asyncio.sleep(0.01)


# ------------------------------------------------------------------ the coalescer itself


@pytest.fixture(scope="module")
async def scratch(migrated_url: str) -> AsyncIterator[str]:
    name = f"{make_url(db.asyncpg_url(migrated_url)).database}_coalescer"
    url = await scratch_database(migrated_url, name)
    # A flush that waits on a row lock fails after 300 ms instead of waiting (the failure test).
    admin = create_engine(url, pool_size=1, max_overflow=0)
    async with admin.connect() as conn:
        await conn.execute(text(f"ALTER DATABASE \"{database_name(url)}\" SET lock_timeout = '300ms'"))
        await conn.commit()
    await admin.dispose()
    try:
        yield url
    finally:
        await drop_database(migrated_url, name)


@pytest.fixture
async def database(scratch: str) -> AsyncIterator[db.Database]:
    database = await db.Database(scratch, max_size=4).open()
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


@pytest.fixture
async def coalescer(database: db.Database) -> AsyncIterator[tuple[ReadCoalescer, list[tuple[int, int]]]]:
    flushed: list[tuple[int, int]] = []
    coalescer = ReadCoalescer(database, on_flush=lambda keys, calls: flushed.append((keys, calls)))
    coalescer.start()
    try:
        yield coalescer, flushed
    finally:
        await coalescer.close()


async def test_one_flush_answers_members_and_gives_not_found_to_the_non_member_alone(database, coalescer) -> None:
    coalescer, flushed = coalescer
    cid = await group(database, ["1", "2"], last_seq=50)
    other = await group(database, ["3"], last_seq=5)

    with pytest.raises(BadUserInput):  # a bad seq never reaches a flush
        await do_mark_read(database, "1", cid, -1, coalescer=coalescer)
    results = await asyncio.gather(
        do_mark_read(database, "1", cid, 40, coalescer=coalescer),
        do_mark_read(database, "1", cid, 30, coalescer=coalescer),  # same key, lower: merged, the watermark goes to 40
        do_mark_read(database, "2", cid, 99, coalescer=coalescer),  # clamped to 50
        do_mark_read(database, "9", cid, 10, coalescer=coalescer),  # not a member
        do_mark_read(database, "1", other, 1, coalescer=coalescer),  # not a member of that one
        do_mark_read(database, "3", 424242, 1, coalescer=coalescer),  # no such conversation
        do_mark_read(database, "3", other, 5, coalescer=coalescer),
        return_exceptions=True,
    )

    assert flushed == [(6, 7)], "all of them went in one flush"
    first, lower, clamped, stranger, wrong_group, missing, third = results
    assert (first.last_read_seq, first.last_seq, first.advanced) == (40, 50, True)
    # 30 is above the watermark the flush found (0): it would have moved it too.
    assert (lower.last_read_seq, lower.advanced) == (40, True)
    assert (clamped.last_read_seq, clamped.last_seq, clamped.advanced) == (50, 50, True)
    assert (third.last_read_seq, third.advanced) == (5, True)
    for error in (stranger, wrong_group, missing):
        assert isinstance(error, NotFound)
    assert stranger.extensions == {"conversationId": str(cid)}

    # A second flush: 35 is below the watermark (40) it found: not advanced; 45 moves it.
    again = await asyncio.gather(
        do_mark_read(database, "1", cid, 35, coalescer=coalescer),
        do_mark_read(database, "1", cid, 45, coalescer=coalescer),
    )
    assert [(r.last_read_seq, r.advanced) for r in again] == [(45, False), (45, True)]
    nothing = await do_mark_read(database, "1", cid, 45, coalescer=coalescer)
    assert (nothing.last_read_seq, nothing.advanced) == (45, False)
    async with database.connection() as conn:
        rows = await conn.fetch("SELECT msg_key, payload FROM outbox ORDER BY id")
    assert [(r["msg_key"], r["payload"]["userId"], r["payload"]["lastReadSeq"]) for r in rows] == [
        (str(cid), "1", 40),
        (str(cid), "2", 50),
        (str(other), "3", 5),
        (str(cid), "1", 45),
    ]
    assert all(r["payload"]["type"] == events.READ_UPDATED for r in rows)


async def test_a_failed_flush_fails_every_caller_as_an_uncoalesced_mark_read_fails_and_writes_nothing(
    database, coalescer, scratch
) -> None:
    coalescer, flushed = coalescer
    cid = await group(database, ["1", "2"], last_seq=50)
    # Another transaction holds user 1's member row: a flush that must move it waits on the lock
    # until the database's lock_timeout (300 ms) cancels it.
    holder = await asyncpg.connect(db.dsn(scratch))
    try:
        await holder.execute("BEGIN")
        await holder.execute(
            "SELECT 1 FROM conversation_member WHERE conversation_id = $1 AND user_id = '1' FOR UPDATE", cid
        )
        with pytest.raises(asyncpg.LockNotAvailableError):
            await do_mark_read(database, "1", cid, 10)  # uncoalesced: today's failure
        results = await asyncio.gather(
            do_mark_read(database, "1", cid, 10, coalescer=coalescer),
            do_mark_read(database, "1", cid, 20, coalescer=coalescer),
            do_mark_read(database, "2", cid, 30, coalescer=coalescer),  # not locked, but in the same statement
            return_exceptions=True,
        )
        assert [type(r) for r in results] == [asyncpg.LockNotAvailableError] * 3
        assert flushed == []
    finally:
        await holder.execute("ROLLBACK")
        await holder.close()
    async with database.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM outbox") == 0
        assert tuple(await reads.watermark(conn, cid, "2")) == (
            0,
            50,
            0,
            0,
        )  # last_read_seq, last_seq, own_read, deleted
    # The lock is gone: the retries succeed.
    retried = await asyncio.gather(
        do_mark_read(database, "1", cid, 20, coalescer=coalescer),
        do_mark_read(database, "2", cid, 30, coalescer=coalescer),
    )
    assert [(r.last_read_seq, r.advanced) for r in retried] == [(20, True), (30, True)]


async def test_a_key_raised_by_another_process_while_the_flush_waits_for_its_lock_answers_the_raised_watermark(
    database,
) -> None:
    """Two processes' flushes of one key: the other one raises the watermark to 30 after this
    flush's snapshot (which saw 0) and before its lock. This one, asking 20, does not move it
    and answers 30 as the viewer's own read position too, not the snapshot's 0 (the fault
    suite's read storm on two workers saw a markRead answer 0 for a seq it had read)."""
    cid = await group(database, ["1"], last_seq=50)
    event = events.ReadUpdated(conversation_id=cid, user_id="1").payload()
    async with database.pool.acquire() as other, database.pool.acquire() as flush_conn:
        raising = other.transaction()
        await raising.start()
        await other.execute("UPDATE conversation_member SET last_read_seq = 30 WHERE conversation_id = $1", cid)
        await flush_conn.execute("SET lock_timeout = 0")  # the scratch database's 300 ms would end the wait
        try:
            flush = asyncio.create_task(
                reads.advance_watermarks(flush_conn, [cid], ["1"], [20], [event], events.READ_KEYS)
            )
            async with database.connection() as watch:
                while not await watch.fetchval(
                    "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1",
                    flush_conn.get_server_pid(),
                ):
                    assert not flush.done(), "the flush did not wait for the other process's lock"
                    await asyncio.sleep(0.01)
            await raising.commit()
            [row] = await flush
        finally:
            await flush_conn.execute("RESET lock_timeout")
    result = answer(row, 20)
    assert (row.moved, result.last_read_seq, result.advanced) == (False, 30, False)
    assert result.own_read == 30, "the own read position of the snapshot (0), below the watermark answered"
