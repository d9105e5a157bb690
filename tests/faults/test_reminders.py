"""Reminders through faults: every reminder fires exactly once (its row marked reminded once, the member's saved
version moved once for it, one reminder.due event on Kafka however often the relay published it) when the process
that runs the scheduler is SIGKILLed while reminders fall due, and when PostgreSQL restarts (-m immediate: no
checkpoint, the WAL replayed) while they do. A real `chatgql serve` on the suite's PostgreSQL and Kafka, its own
wall clock (the reminders are due seconds ahead); the test waits for conditions, never for time."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from ..support.live import read_topic
from ..support.load import create_groups
from .scenario import Infra, Scenario, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.kafka, pytest.mark.timeout(600)]

REMINDERS = 40
SEND = """
mutation($c: ID!, $k: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $k, body: $b) { message { seq } } }
"""
SAVE = (
    "mutation($c: ID!, $s: Long!, $r: DateTime) { saveMessage(conversationId: $c, seq: $s, remindAt: $r) { changed } }"
)


async def fired(s: Scenario) -> int:
    async with s.engine.connect() as conn:
        return (await conn.execute(text("SELECT count(*) FROM saved_message WHERE reminded_at IS NOT NULL"))).scalar()


async def retried(call, timeout: float = 60):
    """A call retried until answered (the process or the database may be down a while)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await call()
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def test_reminders_fire_once_through_a_sigkill_and_a_postgresql_restart(infra: Infra) -> None:
    async with Scenario("reminders", infra) as s:
        [cid] = await create_groups(s.client, 1, [1, 2], 1)
        for i in range(REMINDERS):
            await s.client.call(2, SEND, {"c": cid, "k": str(uuid.uuid4()), "b": f"m{i}"})
        # due one after another from a few seconds ahead (the server's wall clock), spread over ~8 s
        start = datetime.now(UTC) + timedelta(seconds=4)
        for i in range(REMINDERS):
            at = max(start + timedelta(seconds=0.2 * i), datetime.now(UTC) + timedelta(seconds=1))
            await s.client.call(1, SAVE, {"c": cid, "s": i + 1, "r": at.isoformat()})
        s.mark("reminders set")

        assert await wait_for(lambda: _at_least(s, 5), 60), "no reminder fired"
        await s.kill(s.api)  # the process running the scheduler, mid-stream
        await s.restart(s.api)
        assert await wait_for(lambda: _at_least(s, REMINDERS // 2), 60), "reminders stopped after the SIGKILL"
        s.mark("PostgreSQL stop -m immediate")
        await asyncio.to_thread(infra.pg.stop, "immediate")
        await asyncio.to_thread(infra.pg.start)
        s.mark("PostgreSQL started")
        assert await wait_for(lambda: _at_least(s, REMINDERS), 120), "not every reminder fired"

        async with s.engine.connect() as conn:
            rows = (await conn.execute(text("SELECT seq, remind_at, reminded_at, version FROM saved_message"))).all()
            version = (await conn.execute(text("SELECT version FROM saved_version WHERE user_id = '1'"))).scalar()
        assert len(rows) == REMINDERS and all(r.reminded_at is not None and r.reminded_at >= r.remind_at for r in rows)
        # each save and each firing moved the member's version once: a reminder fired twice would move it again
        assert version == 2 * REMINDERS
        # each row's last change is its firing, each at a version of its own (saves and firings interleave)
        assert len({r.version for r in rows}) == REMINDERS and max(r.version for r in rows) <= 2 * REMINDERS

        def done(records: list) -> bool:
            return len({r.value["seq"] for r in records if r.value.get("type") == "reminder.due"}) >= REMINDERS

        records = await read_topic(infra.kafka.bootstrap, s.topic, done, 120)
        versions: dict[int, set[int]] = defaultdict(set)
        for record in records:
            if record.value.get("type") == "reminder.due":
                versions[record.value["seq"]].add(record.value["version"])
        # one event per reminder (a relay republishing after the kill repeats the same event, same version)
        assert {seq: len(v) for seq, v in versions.items()} == {seq: 1 for seq in range(1, REMINDERS + 1)}
        assert {seq: v.pop() for seq, v in versions.items()} == {r.seq: r.version for r in rows}


async def _at_least(s: Scenario, count: int) -> bool:
    return await fired(s) >= count
