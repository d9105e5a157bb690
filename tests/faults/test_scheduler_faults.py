"""The scheduler under faults: scheduled messages and disappearing messages are neither lost nor doubled
when the process firing them is SIGKILLed at the due moment and PostgreSQL is restarted (-m immediate:
the WAL replayed) while they are due, with a second process (`chatgql relay`, which runs a scheduler
too) racing the API process for the same due rows all along.

Real processes on the fault suite's PostgreSQL and Kafka. The checks, from the database and the topic:
every scheduled message is sent exactly once (one message with its clientMsgId, SENT with that seq),
seqs and change seqs are gap-free, every message sent while the time to live was on (those scheduled
into that conversation too) is a tombstone with exactly one EXPIRED change, nothing is left due, and
every message and every erase reached Kafka (at least once: the relay's promise).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import text

from ..conftest import create_engine
from ..support.infra import OUT, ChatProcess, chat_env, create_topic, stable_port
from ..support.live import read_topic
from ..support.load import Api, Retryable, create_groups, token_settings
from .scenario import Infra, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.kafka, pytest.mark.timeout(600)]

SCHEDULE = """
mutation($c: ID!, $m: UUID!, $b: String!, $at: DateTime!) {
  scheduleMessage(conversationId: $c, clientMsgId: $m, body: $b, sendAt: $at) { scheduledMessage { id } } }
"""
SEND = """
mutation($c: ID!, $m: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { seq } } }
"""
TTL = "mutation($c: ID!, $s: Int!) { setMessageTtl(conversationId: $c, seconds: $s) { id } }"
TTL_SECONDS = 5
SCHEDULED = 40


async def call(api: Api, user: int, query: str, variables: dict, timeout: float = 120) -> dict:
    """A call retried (same variables) until answered, as a client retries."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await api.call(user, query, variables)
        except Retryable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def rows(engine, sql: str) -> list:
    async with engine.connect() as conn:
        return list((await conn.execute(text(sql))).mappings())


async def test_scheduled_and_disappearing_messages_through_sigkill_at_the_due_moment_and_a_postgresql_restart(
    infra: Infra,
) -> None:
    url = await infra.pg.create_database("faults_scheduler")
    engine = create_engine(url, pool_size=2, max_overflow=2)
    topic = f"faults.scheduler.{uuid.uuid4().hex[:8]}"
    await create_topic(infra.kafka.bootstrap, topic)
    log_dir = OUT / "scheduler"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = chat_env(url, infra.kafka.bootstrap, topic, "memory://")
    port = stable_port()
    api_process = ChatProcess("api", ["serve", "--port", str(port), "--log-level", "warning"], env, log_dir, port)
    rival = ChatProcess("relay", ["relay"], env, log_dir)  # its scheduler races the API's for every due row
    http = httpx.AsyncClient(timeout=httpx.Timeout(8.0, connect=3.0))
    try:
        api_process.start()
        rival.start()
        await api_process.wait_ready()
        api = Api(f"http://127.0.0.1:{port}/graphql", http, token_settings())
        groups = await create_groups(api, 1, [2, 3], 3)
        fading = groups[0]
        await call(api, 1, TTL, {"c": fading, "s": TTL_SECONDS})
        for i in range(10):  # expire TTL_SECONDS after they are sent: at the due moment below
            await call(api, 2, SEND, {"c": fading, "m": str(uuid.uuid4()), "b": f"fading {i}"})
        start = datetime.now(UTC) + timedelta(seconds=TTL_SECONDS)
        keys: dict[str, str] = {}
        for i in range(SCHEDULED):  # due from `start` over 6 s, across the three groups (some into the fading one)
            key = str(uuid.uuid4())
            keys[key] = groups[i % 3]
            at = (start + timedelta(seconds=6 * i / SCHEDULED)).isoformat()
            await call(api, 1 + i % 3, SCHEDULE, {"c": groups[i % 3], "m": key, "b": f"scheduled {i}", "at": at})

        await asyncio.sleep(max(0.0, (start - datetime.now(UTC)).total_seconds()) + 1)  # the due moment: firing
        api_process.kill()
        await asyncio.sleep(1)
        await asyncio.to_thread(infra.pg.stop, "immediate")  # the rival's scheduler loses its connection mid-work
        await asyncio.sleep(3)
        await asyncio.to_thread(infra.pg.start)
        api_process.start()
        await api_process.wait_ready()

        async def settled() -> bool:
            (left,) = await rows(
                engine,
                """
                SELECT (SELECT count(*) FROM scheduled_message WHERE state = 'PENDING') AS pending,
                       (SELECT count(*) FROM message_expiry) AS expiring,
                       (SELECT count(*) FROM outbox) AS outbox
                """,
            )
            return left["pending"] == 0 and left["expiring"] == 0 and left["outbox"] == 0

        assert await wait_for(settled, 180), f"scheduled work left undone (logs in {log_dir})"

        scheduled = await rows(engine, "SELECT conversation_id, client_msg_id, state, seq FROM scheduled_message")
        messages = await rows(
            engine, "SELECT conversation_id, seq, client_msg_id, deleted_at, body FROM message ORDER BY 1, 2"
        )
        by_key = Counter(str(m["client_msg_id"]) for m in messages)
        assert sorted(str(s["client_msg_id"]) for s in scheduled) == sorted(keys)
        for s in scheduled:
            key = str(s["client_msg_id"])
            assert s["state"] == "SENT", s
            assert by_key[key] == 1, f"{key} stored {by_key[key]} times"
            (message,) = [m for m in messages if str(m["client_msg_id"]) == key]
            assert (message["conversation_id"], message["seq"]) == (s["conversation_id"], s["seq"])
        for group in groups:
            seqs = [m["seq"] for m in messages if m["conversation_id"] == int(group)]
            assert seqs == list(range(1, len(seqs) + 1)), f"conversation {group}: seqs {seqs}"
        faded = [m for m in messages if m["conversation_id"] == int(fading)]
        assert len(faded) == 10 + SCHEDULED // 3 + 1  # every message sent there while the time to live was on
        assert all(m["deleted_at"] is not None and m["body"] == "" for m in faded)
        changes = await rows(
            engine, f"SELECT change_seq, seq, kind, reason FROM message_change WHERE conversation_id = {fading}"
        )
        assert sorted(c["change_seq"] for c in changes) == list(range(1, len(faded) + 1))  # gap-free, once each
        assert sorted(c["seq"] for c in changes) == [m["seq"] for m in faded]
        assert {(c["kind"], c["reason"]) for c in changes} == {("DELETED", "EXPIRED")}

        stored = {(str(m["conversation_id"]), m["seq"]) for m in messages}
        erased = {(str(m["conversation_id"]), m["seq"]) for m in faded}

        def seen(records: list, kind: str) -> set:
            return {(str(r.value["conversationId"]), r.value["seq"]) for r in records if r.value["type"] == kind}

        records = await read_topic(
            infra.kafka.bootstrap,
            topic,
            lambda rs: seen(rs, "message.new") >= stored and seen(rs, "message.deleted") >= erased,
            timeout=120,
        )
        new = Counter(
            (str(r.value["conversationId"]), r.value["seq"]) for r in records if r.value["type"] == "message.new"
        )
        print(f"kafka: {len(records)} records, {sum(n - 1 for n in new.values())} message.new published again")
    finally:
        for process in (api_process, rival):
            await asyncio.to_thread(process.stop)
        await http.aclose()
        await engine.dispose()
