"""Group commit of hot conversations (services/groupcommit.py, chat_send_batch in migration 0006).

- chat_send_batch gives, item for item, what chat_send gives when the same
  sends run one after the other: outcomes, seqs, watermarks, outbox events;
- 300 sends to one conversation, racing from three `chatgql serve` processes
  (with retries of the same clientMsgId and conflicting reuse of it), store
  seqs 1..300 once each, as acknowledged, with the outbox in seq order, and
  they went in batches;
- a batch whose database backend is killed while its transaction is open
  stores nothing, fails every caller in it, and their retries store once.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from itertools import pairwise

import asyncpg
import httpx
import pytest
from sqlalchemy import text

from chatgql.db import Database
from chatgql.edge.auth import issue_token
from chatgql.events import types as events
from chatgql.services.groupcommit import MESSAGE_KEYS, READ_KEYS, SendBatcher, SendItem
from chatgql.services.messages import SendResult, do_send_message
from chatgql.settings import load_settings
from chatgql.store import messages, reads

from ..conftest import REPO, create_engine, drop_database, free_port, scratch_database

SEND = (
    "mutation($c: ID!, $m: UUID!, $b: String!) "
    "{ sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { duplicate message { seq senderId body } } }"
)
CREATE_GROUP = "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }"
TOKENS = load_settings()

KEYS = {"message_keys": MESSAGE_KEYS, "read_keys": READ_KEYS}  # the keys chat_send fills in


def authorization(user: int) -> dict[str, str]:
    return {"authorization": f"Bearer {issue_token(TOKENS, str(user))}"}


async def post(http: httpx.AsyncClient, url: str, user: int, query: str, variables: dict) -> dict:
    response = await http.post(url, json={"query": query, "variables": variables}, headers=authorization(user))
    assert response.status_code == 200, response.text
    return response.json()


async def post_until_answered(
    http: httpx.AsyncClient, url: str, user: int, query: str, variables: dict
) -> tuple[dict, int]:
    """As a client does: the same request again after a lost connection (keep-alive races
    under load); (the GraphQL answer, attempts it took)."""
    for attempt in range(5):
        try:
            return await post(http, url, user, query, variables), attempt + 1
        except httpx.TransportError:
            if attempt == 4:
                raise
            await asyncio.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def code(body: dict) -> str | None:
    errors = body.get("errors")
    return (errors[0].get("extensions") or {}).get("code") if errors else None


async def fetch(engine, sql: str, **params) -> list:
    async with engine.connect() as conn:
        return list(await conn.execute(text(sql), params))


def item(conversation_id: int, sender: str, cmid: uuid.UUID, body: str) -> SendItem:
    new = events.MessageNew(conversation_id=conversation_id, sender_id=sender, client_msg_id=cmid, body=body).payload()
    read = events.ReadUpdated(conversation_id=conversation_id, user_id=sender).payload()
    return SendItem(sender, cmid, body, new, read)


# ---------------------------------------------------------------- the batch function


async def test_a_batch_answers_and_writes_what_the_same_sends_one_by_one_would(migrated_url, engine):
    """Every rule of chat_send, item by item: a clientMsgId stored before or taken by an
    earlier item of the batch is a duplicate (same sender and body) or a conflict
    (nothing written); a non-member is not_found and claims nothing; seqs are
    contiguous in item order; watermarks and read.updated events as chat_send's."""
    async with engine.begin() as conn:
        one, batched = (
            await conn.execute(text("INSERT INTO conversation (type) VALUES ('GROUP'), ('GROUP') RETURNING id"))
        ).scalars()
        await conn.execute(
            text(
                "INSERT INTO conversation_member (conversation_id, user_id) "
                "SELECT c, u FROM unnest(CAST(:c AS bigint[])) c, generate_series(1, 3) u"
            ),
            {"c": [one, batched]},
        )
    a, b, c, d = (uuid.uuid4() for _ in range(4))
    before = [("1", a, "first"), ("2", b, "second")]  # stored before the batch
    batch = [
        ("3", c, "third"),
        ("1", a, "first"),  # duplicate of a stored message
        ("2", a, "not first"),  # conflict with a stored message
        ("3", c, "third"),  # duplicate of an earlier item
        ("1", c, "third"),  # conflict with an earlier item (other sender)
        ("3", c, "3rd"),  # conflict with an earlier item (other body)
        ("9", d, "stranger"),  # not a member: claims nothing...
        ("2", d, "fourth"),  # ...so this one stores d
        ("2", uuid.uuid4(), "fifth"),
        ("1", uuid.uuid4(), "sixth"),
        ("3", uuid.uuid4(), "seventh"),
        ("3", uuid.uuid4(), "eighth"),
    ]
    # One transaction, read before it ends: the session server's relay drains committed outbox rows.
    database = await Database(migrated_url, max_size=1).open()
    try:
        async with database.transaction() as conn:
            for cid in (one, batched):
                for sender, cmid, body in before:
                    await messages.send(conn, conversation_id=cid, **item(cid, sender, cmid, body)._asdict(), **KEYS)
            alone = [
                await messages.send(conn, conversation_id=one, **item(one, *send)._asdict(), **KEYS) for send in batch
            ]
            together = await messages.send_batch(
                conn, batched, [item(batched, *send) for send in batch], MESSAGE_KEYS, READ_KEYS
            )
            state = {
                cid: (
                    await conn.fetch(
                        "SELECT seq, sender_id, client_msg_id, body FROM message WHERE conversation_id = $1 "
                        "ORDER BY seq",
                        cid,
                    ),
                    await conn.fetch(
                        "SELECT user_id, last_read_seq FROM conversation_member WHERE conversation_id = $1 "
                        "ORDER BY user_id",
                        cid,
                    ),
                    await conn.fetchval("SELECT last_seq FROM conversation WHERE id = $1", cid),
                    [
                        {k: v for k, v in r.payload.items() if k not in ("conversationId", "createdAt")}
                        for r in await conn.fetch("SELECT payload FROM outbox WHERE msg_key = $1 ORDER BY id", str(cid))
                    ],
                )
                for cid in (one, batched)
            }
            created = await conn.fetch(
                "SELECT seq, created_at FROM message WHERE conversation_id = $1 ORDER BY seq", batched
            )
    finally:
        await database.close()

    assert [r.i for r in together] == list(range(1, len(batch) + 1))
    fields = ("outcome", "seq", "sender_id", "body")
    assert [tuple(r[f] for f in fields) for r in together] == [tuple(r[f] for f in fields) for r in alone]
    assert [r.outcome for r in together] == [
        *("stored", "duplicate", "conflict", "duplicate", "conflict", "conflict", "not_found"),
        *("stored",) * 5,
    ]
    assert [r.seq for r in together if r.outcome == "stored"] == [3, 4, 5, 6, 7, 8]
    assert [r.created_at for r in together if r.outcome == "stored"] == [created[-1].created_at] * 6
    assert state[one] == state[batched]
    messages_, watermarks, last_seq, outbox = state[batched]
    assert last_seq == 8 and [m.seq for m in messages_] == list(range(1, 9))
    assert [tuple(w) for w in watermarks] == [("1", 6), ("2", 5), ("3", 8)]
    kinds = [(e["type"], e.get("seq", e.get("lastReadSeq"))) for e in outbox]
    assert [s for t, s in kinds if t == events.MESSAGE_NEW] == list(range(1, 9))
    # read.updated right after a send that also read others' messages (chat_send's rule)
    assert ("read.updated", 3) in kinds and kinds.index(("read.updated", 3)) == kinds.index(("message.new", 3)) + 1
    assert all(x.created_at <= y.created_at for x, y in pairwise(created))


async def test_queued_sends_go_in_arrival_order_in_batches_of_at_most_the_bound(migrated_url, engine):
    """While a lone send waits for the conversation's lock, 20 more queue; two of their callers
    give up (cancelled) before their batch starts. The 18 others go in batches of at most 4, in
    the order they arrived, and the two that gave up are not stored."""
    async with engine.begin() as conn:
        cid = (await conn.execute(text("INSERT INTO conversation (type) VALUES ('GROUP') RETURNING id"))).scalar_one()
        await conn.execute(
            text(
                "INSERT INTO conversation_member (conversation_id, user_id) SELECT :c, u FROM generate_series(1, 3) u"
            ),
            {"c": cid},
        )
    database = await Database(migrated_url, max_size=4).open()
    sizes: list[int] = []
    batcher = SendBatcher(database, max_batch=4, on_batch=sizes.append)
    try:
        async with engine.connect() as blocker:
            await blocker.execute(text("SELECT 1 FROM conversation WHERE id = :c FOR UPDATE"), {"c": cid})
            first = asyncio.create_task(do_send_message(database, "1", cid, uuid.uuid4(), "first", batcher=batcher))
            await until(lambda: backends(engine, "chat_send"))
            sends = [(str(1 + k % 3), uuid.uuid4(), f"m{k}") for k in range(20)]
            tasks = [
                asyncio.create_task(do_send_message(database, sender, cid, cmid, body, batcher=batcher))
                for sender, cmid, body in sends
            ]
            await until(lambda: asyncio.sleep(0, batcher.waiting(cid) == 20))
            for gave_up in (5, 17):
                tasks[gave_up].cancel()
            await blocker.rollback()
        results = await asyncio.gather(first, *tasks, return_exceptions=True)
    finally:
        await batcher.close()
        await database.close()

    assert sizes == [1, 4, 4, 4, 4, 2]
    assert isinstance(results[0], SendResult) and results[0].message.seq == 1
    kept = [r for k, r in enumerate(results[1:]) if k not in (5, 17)]
    assert all(isinstance(r, SendResult) and not r.duplicate for r in kept), kept
    assert [r.message.seq for r in kept] == list(range(2, 20))  # arrival order
    assert all(isinstance(results[1 + k], asyncio.CancelledError) for k in (5, 17))
    stored = {r.client_msg_id for r in await fetch(engine, "SELECT client_msg_id FROM message")}
    assert stored == {r.message.client_msg_id for r in [results[0], *kept]}


async def test_fifty_racing_retries_queued_into_one_batch_store_one_message(server, client, engine):
    """The guarantee's "50 racing retries -> one row" with group commit: the first waits for the
    conversation's lock, the 49 others queue behind it and go as one batch (49 duplicates of
    the first, all under the lock)."""
    created = await client.data(CREATE_GROUP, {"t": "retries", "m": ["2"]}, user=1)
    cid = created["createGroup"]["id"]
    batcher = server.runtime.deps.send_batcher
    cmid = str(uuid.uuid4())
    async with engine.connect() as blocker:
        await blocker.execute(text("SELECT 1 FROM conversation WHERE id = :c FOR UPDATE"), {"c": int(cid)})
        calls = [
            asyncio.create_task(post(client.http, client.url, 1, SEND, {"c": cid, "m": cmid, "b": "same"}))
            for _ in range(50)
        ]
        await until(lambda: asyncio.sleep(0, batcher.waiting(int(cid)) == 49))
        await blocker.rollback()
    answers = [a["data"]["sendMessage"] for a in await asyncio.gather(*calls)]
    assert {a["message"]["seq"] for a in answers} == {1}
    assert sum(not a["duplicate"] for a in answers) == 1
    stored = await fetch(engine, "SELECT seq, body FROM message WHERE conversation_id = :c", c=int(cid))
    assert [tuple(r) for r in stored] == [(1, "same")]


# ---------------------------------------------------------------- three API processes, one conversation

PROCESSES = 3
MESSAGES = 300
MEMBERS = [str(u) for u in range(1, 31)]


@pytest.fixture
async def three_servers(database_url: str) -> AsyncIterator[tuple[str, list[str]]]:
    """Three `chatgql serve` processes (no relay: the outbox stays to be read) on a database of their own."""
    name = "chatgql_group_commit"
    url = await scratch_database(database_url, name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGQL_")}
    env.update(
        CHATGQL_DATABASE_URL=url,
        CHATGQL_MIGRATE_ON_START="false",
        CHATGQL_RATE_SEND_PER_SECOND="0",
        CHATGQL_RATE_GROUP_PER_SECOND="0",
        CHATGQL_ACCESS_LOG="false",
        CHATGQL_SEND_BATCH_MAX="16",
        CHATGQL_WORKERS="1",  # three processes, each its own batcher
    )
    ports = [free_port() for _ in range(PROCESSES)]
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "chatgql.server.cli", "serve", "--port", str(port), "--no-relay", "--no-consumer"]
            + ["--log-level", "warning"],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for port in ports
    ]
    try:
        async with httpx.AsyncClient() as http:
            deadline = time.monotonic() + 60
            for process, port in zip(processes, ports, strict=True):
                while True:
                    assert process.poll() is None, process.communicate()[1].decode()[-2000:]
                    try:
                        if (await http.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    assert time.monotonic() < deadline, f"chatgql serve on {port} did not start"
                    await asyncio.sleep(0.1)
        yield url, [f"http://127.0.0.1:{port}" for port in ports]
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        await drop_database(database_url, name)


def batch_sizes(metrics: str) -> tuple[float, float]:
    """(transactions, sends) from chatgql_send_batch_size in a /metrics page."""
    found = {}
    for line in metrics.splitlines():
        for suffix in ("_count", "_sum"):
            if line.startswith(f"chatgql_send_batch_size{suffix} "):
                found[suffix] = float(line.split()[1])
    return found["_count"], found["_sum"]


@pytest.mark.slow
async def test_300_racing_sends_from_three_processes_store_seq_1_to_300_once_each_in_batches(three_servers):
    """One conversation, 30 senders, 300 messages sent through three API processes at once,
    plus 60 retries of a message (same clientMsgId, sender and body; half to the same process,
    where they may share a batch with their original) and 30 conflicting reuses of a
    clientMsgId (another body or another sender), all in flight together."""
    url, servers = three_servers
    rng = random.Random(12)
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=500)) as http:
        created, _ = await post_until_answered(
            http, servers[0] + "/graphql", 1, CREATE_GROUP, {"t": "hot", "m": MEMBERS[1:]}
        )
        cid = created["data"]["createGroup"]["id"]

        # (server, sender, clientMsgId, body)
        originals = [(k % PROCESSES, MEMBERS[k % len(MEMBERS)], str(uuid.uuid4()), f"m{k}") for k in range(MESSAGES)]
        retries = [
            ((server + (k % 2)) % PROCESSES, sender, cmid, body)
            for k, (server, sender, cmid, body) in enumerate(originals[:60])
        ]
        conflicting = [
            (
                (server + 1) % PROCESSES,
                sender if k % 2 else MEMBERS[(MEMBERS.index(sender) + 1) % len(MEMBERS)],
                cmid,
                f"other {body}" if k % 2 else body,
            )
            for k, (server, sender, cmid, body) in enumerate(originals[60:90])
        ]
        requests = originals + retries + conflicting
        rng.shuffle(requests)

        async def send(server: int, sender: int, cmid: str, body: str) -> tuple[dict, int]:
            return await post_until_answered(
                http, servers[server] + "/graphql", sender, SEND, {"c": cid, "m": cmid, "b": body}
            )

        answered = await asyncio.gather(*(send(*r) for r in requests))
        answers = [answer for answer, _ in answered]
        # a lost answer's retry may find its first attempt stored (then both are "duplicate")
        resent = {r[2] for r, (_, attempts) in zip(requests, answered, strict=True) if attempts > 1}
    async with httpx.AsyncClient(timeout=60) as http:  # fresh connections: no keep-alive race
        sizes = [batch_sizes((await http.get(server + "/metrics")).text) for server in servers]

    engine = create_engine(url, pool_size=1, max_overflow=0)
    try:
        stored = await fetch(
            engine,
            "SELECT seq, sender_id, client_msg_id, body, created_at FROM message WHERE conversation_id = :c ORDER BY seq",
            c=int(cid),
        )
        last_seq = (await fetch(engine, "SELECT last_seq FROM conversation WHERE id = :c", c=int(cid)))[0].last_seq
        outbox = [r.payload for r in await fetch(engine, "SELECT payload FROM outbox ORDER BY id")]
        watermarks = dict(
            tuple(r)
            for r in await fetch(
                engine,
                "SELECT user_id, last_read_seq FROM conversation_member WHERE conversation_id = :c",
                c=int(cid),
            )
        )
    finally:
        await engine.dispose()

    # Gap-free, one row per clientMsgId, nothing a conflicting reuse carried.
    assert [m.seq for m in stored] == list(range(1, MESSAGES + 1)) and last_seq == MESSAGES
    by_cmid = {str(m.client_msg_id): m for m in stored}
    assert len(by_cmid) == MESSAGES == len({r[2] for r in requests})
    assert all(x.created_at <= y.created_at for x, y in pairwise(stored))

    # Every answer is the stored row; exactly one answer per clientMsgId stored it.
    firsts: dict[str, int] = defaultdict(int)
    for (_, sender, cmid, body), answer in zip(requests, answers, strict=True):
        row = by_cmid[cmid]
        if code(answer) == "CONFLICT":
            assert (row.sender_id, row.body) != (sender, body), answer
            continue
        assert "errors" not in answer, answer
        sent = answer["data"]["sendMessage"]
        assert (sent["message"]["seq"], sent["message"]["senderId"], sent["message"]["body"]) == (
            row.seq,
            row.sender_id,
            row.body,
        )
        assert (row.sender_id, row.body) == (sender, body)
        firsts[cmid] += not sent["duplicate"]
    assert all(firsts[cmid] == 1 for cmid in by_cmid if cmid not in resent), firsts
    assert all(firsts[cmid] <= 1 for cmid in resent), firsts
    conflicts = sum(code(a) == "CONFLICT" for a in answers)
    assert conflicts == len(conflicting), conflicts

    # The outbox: message.new in seq order, each as stored; read.updated as chat_send writes them.
    new = [e for e in outbox if e["type"] == events.MESSAGE_NEW]
    assert [e["seq"] for e in new] == list(range(1, MESSAGES + 1))
    assert [(e["clientMsgId"], e["senderId"], e["body"]) for e in new] == [
        (str(m.client_msg_id), m.sender_id, m.body) for m in stored
    ]
    expected, read = [], defaultdict(int)
    for m in stored:
        expected.append((events.MESSAGE_NEW, m.seq))
        if read[m.sender_id] < m.seq - 1:
            expected.append((events.READ_UPDATED, m.seq))
        read[m.sender_id] = m.seq
    sends = [e for e in outbox if e["type"] != events.MEMBERS_ADDED]  # createGroup's comes first
    assert [(e["type"], e.get("seq", e.get("lastReadSeq"))) for e in sends] == expected
    assert {u: s for u, s in watermarks.items() if u in read} == dict(read)

    # They went in batches: fewer transactions than sends, in every process.
    processed, extra = sum(s for _, s in sizes), sum(attempts - 1 for _, attempts in answered)
    assert len(requests) <= processed <= len(requests) + extra, (processed, extra)  # a lost request never arrived
    assert all(transactions < sends for transactions, sends in sizes), sizes


# ---------------------------------------------------------------- a batch killed mid-transaction


async def backends(engine, function: str) -> list:
    """The backends running function() that wait for a lock (not those still being handed the call)."""
    return await fetch(
        engine,
        "SELECT pid, wait_event_type, backend_xid IS NOT NULL AS has_xid FROM pg_stat_activity "
        "WHERE datname = current_database() AND state = 'active' AND query LIKE :q AND pid <> pg_backend_pid() "
        "AND wait_event_type = 'Lock'",
        q=f"%{function}(%",
    )


async def until(predicate, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while not (found := await predicate()):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)
    return found


async def test_a_batch_whose_backend_is_killed_stores_nothing_and_every_caller_retries_once(server, client, engine):
    """A test transaction holds the sender 1's membership row: the lone first send locks the
    conversation and waits there; nine sends queue behind it. Its backend is killed (its caller
    fails), the nine go as one batch that locks the conversation and waits there too, and its
    backend is killed while that transaction is open. Nothing of either is stored, every caller
    got the error a lone send gets, and the retries store each message once."""
    created = await client.data(CREATE_GROUP, {"t": "hot", "m": ["2", "3"]}, user=1)
    cid = created["createGroup"]["id"]
    batcher = server.runtime.deps.send_batcher
    sends = [(1 + k % 3, str(uuid.uuid4()), f"m{k}") for k in range(10)]
    sends[0] = (1, *sends[0][1:])

    async def send(sender: int, cmid: str, body: str) -> dict:
        return await post(client.http, client.url, sender, SEND, {"c": cid, "m": cmid, "b": body})

    async with engine.connect() as blocker:
        await blocker.execute(
            text("SELECT 1 FROM conversation_member WHERE conversation_id = :c AND user_id = '1' FOR UPDATE"),
            {"c": int(cid)},
        )
        first = asyncio.create_task(send(*sends[0]))
        (alone,) = await until(lambda: backends(engine, "chat_send"))
        rest = [asyncio.create_task(send(*s)) for s in sends[1:]]
        await until(lambda: asyncio.sleep(0, batcher.waiting(int(cid)) == 9))
        await fetch(engine, "SELECT pg_terminate_backend(:p)", p=alone.pid)
        lone_error = code(await first)
        assert lone_error == "UNAVAILABLE"  # its connection was terminated: retryable

        (batch,) = await until(lambda: backends(engine, "chat_send_batch"))
        assert batch.has_xid  # mid-transaction (it holds a lock), waiting for sender 1's row
        async with engine.connect() as other:  # the batch holds the conversation's lock
            with pytest.raises(Exception, match="could not obtain lock"):
                await other.execute(
                    text("SELECT 1 FROM conversation WHERE id = :c FOR NO KEY UPDATE NOWAIT"), {"c": int(cid)}
                )
        await fetch(engine, "SELECT pg_terminate_backend(:p)", p=batch.pid)
        assert [code(a) for a in await asyncio.gather(*rest)] == [lone_error] * 9
        await blocker.rollback()

    assert (await fetch(engine, "SELECT count(*) AS n FROM message"))[0].n == 0
    assert (await fetch(engine, "SELECT last_seq FROM conversation WHERE id = :c", c=int(cid)))[0].last_seq == 0

    retried = await asyncio.gather(*(send(*s) for s in sends))
    assert [a["data"]["sendMessage"]["duplicate"] for a in retried] == [False] * 10
    assert sorted(a["data"]["sendMessage"]["message"]["seq"] for a in retried) == list(range(1, 11))
    again = await asyncio.gather(*(send(*s) for s in sends))
    assert [a["data"]["sendMessage"] for a in again] == [
        {**a["data"]["sendMessage"], "duplicate": True} for a in retried
    ]
    stored = await fetch(engine, "SELECT seq, client_msg_id FROM message WHERE conversation_id = :c", c=int(cid))
    assert sorted(s.seq for s in stored) == list(range(1, 11)) and len({s.client_msg_id for s in stored}) == 10


async def test_send_batches_and_markread_flushes_racing_on_the_same_members_never_deadlock(migrated_url, engine):
    """chat_send_batch moves its senders' watermarks while a markRead flush
    (store.reads.advance_watermarks) locks member rows in (conversation, user) order: the batch
    locks its senders' rows in user order too (migration 0009), so the two never wait for each
    other in a cycle. Before, PostgreSQL found deadlocks under the soak (a markRead answered
    INTERNAL_SERVER_ERROR); here, batches with their senders in shuffled order race flushes."""
    members = 40
    async with engine.begin() as conn:
        cid = (await conn.execute(text("INSERT INTO conversation (type) VALUES ('GROUP') RETURNING id"))).scalar_one()
        await conn.execute(
            text(
                "INSERT INTO conversation_member (conversation_id, user_id) SELECT :c, u FROM generate_series(1, :n) u"
            ),
            {"c": cid, "n": members},
        )
    database = await Database(migrated_url, max_size=12).open()
    rng = random.Random(7)
    deadlocks: list[str] = []
    stored = 0

    async def send_batches() -> None:
        nonlocal stored
        for _ in range(12):
            senders = [str(u) for u in rng.sample(range(1, members + 1), members)]
            items = [item(cid, sender, uuid.uuid4(), "b") for sender in senders]
            try:
                async with database.connection() as conn:
                    rows = await messages.send_batch(conn, cid, items, MESSAGE_KEYS, READ_KEYS)
                stored += sum(row["outcome"] == "stored" for row in rows)
            except asyncpg.DeadlockDetectedError as error:
                deadlocks.append(f"send batch: {error}")

    async def flush_reads() -> None:
        for _ in range(30):
            users = sorted(str(u) for u in rng.sample(range(1, members + 1), members // 2))
            event = events.ReadUpdated(conversation_id=cid, user_id="0").payload()
            try:
                async with database.connection() as conn:
                    await reads.advance_watermarks(
                        conn, [cid] * len(users), users, [10**9] * len(users), [event] * len(users), READ_KEYS
                    )
            except asyncpg.DeadlockDetectedError as error:
                deadlocks.append(f"markRead flush: {error}")

    try:
        await asyncio.gather(*(send_batches() for _ in range(5)), *(flush_reads() for _ in range(5)))
    finally:
        await database.close()
    assert deadlocks == []
    assert stored == 5 * 12 * members
    [(last_seq, highest)] = await fetch(
        engine,
        "SELECT c.last_seq, max(m.last_read_seq) FROM conversation c JOIN conversation_member m "
        "ON m.conversation_id = c.id WHERE c.id = :c GROUP BY c.last_seq",
        c=cid,
    )
    assert (last_seq, highest) == (stored, stored)
