"""The scheduler (services/scheduler.py) over its first source, scheduled messages: a due row is fired
once, at its time by the scheduler's clock (a clock the test holds), in the claim's transaction; two
schedulers racing for the same due rows fire each once; a row due sooner than the poll is fired at
its time, woken by the NOTIFY of the write that scheduled it. Real PostgreSQL; the data set up
through the session's chatgql, whose own scheduler reads the wall clock (2026), never the tests'
(2031), so it fires none of these rows."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from chatgql import db
from chatgql.errors import Forbidden
from chatgql.services.messages import do_send_message
from chatgql.services.scheduled import SOURCE, do_edit_scheduled, do_schedule_message
from chatgql.services.scheduler import Scheduler, registered
from tests.graphql.test_before_send import Endpoint, hook_of
from tests.support.clock import Clock
from tests.support.live import ChatApi, wait_until
from tests.support.webhooks import new_secret

T0 = datetime(2031, 1, 1, tzinfo=UTC)


@pytest.fixture
async def database(migrated_url: str) -> AsyncIterator[db.Database]:
    database = await db.Database(migrated_url, max_size=4).open()
    yield database
    await database.close()


async def rows(engine, sql: str, **params) -> list:
    async with engine.connect() as conn:
        return list((await conn.execute(text(sql), params)).mappings())


def test_scheduled_messages_are_a_registered_source() -> None:
    assert SOURCE in registered()


async def test_a_scheduled_message_is_sent_once_at_its_time_by_the_clock(server, http, engine, database) -> None:
    api = ChatApi.of(server, http)
    group = int(await api.create_group(1, [2]))
    await api.send(2, str(group), "before")  # seq 1
    clock = Clock(T0)
    key = uuid.uuid4()
    made = await do_schedule_message(database, "1", group, key, "later", T0 + timedelta(minutes=5), now=clock())
    scheduler = Scheduler(database, [SOURCE], clock=clock)

    assert await scheduler.run_due() == 0  # not due yet
    clock.now = T0 + timedelta(minutes=5) - timedelta(microseconds=1)
    assert await scheduler.run_due() == 0
    clock.now = T0 + timedelta(minutes=5)
    assert await scheduler.run_due() == 1
    assert await scheduler.run_due() == 0  # done: never again

    (message,) = await rows(engine, "SELECT seq, sender_id, client_msg_id, body FROM message WHERE seq > 1")
    assert (message["seq"], message["sender_id"], message["client_msg_id"], message["body"]) == (2, "1", key, "later")
    (row,) = await rows(engine, "SELECT state, seq, done_at, failure FROM scheduled_message")
    assert (row["state"], row["seq"], row["done_at"], row["failure"]) == ("SENT", 2, clock.now, None)
    assert made.row["id"] is not None
    data = await api.data("query($c: ID!) { conversation(id: $c) { lastSeq unreadCount } }", {"c": str(group)}, user=2)
    assert data["conversation"] == {"lastSeq": 2, "unreadCount": 1}  # an ordinary message: unread for the others


async def test_two_schedulers_racing_for_the_same_due_rows_fire_each_once(
    server, http, engine, migrated_url: str
) -> None:
    api = ChatApi.of(server, http)
    groups = [int(await api.create_group(1, [2, 3])) for _ in range(3)]
    clock = Clock(T0)
    first = await db.Database(migrated_url, max_size=3).open()
    second = await db.Database(migrated_url, max_size=3).open()
    try:
        keys = []
        for i in range(30):
            key = uuid.uuid4()
            keys.append(key)
            at = T0 + timedelta(seconds=1 + i % 7)
            await do_schedule_message(first, str(1 + i % 3), groups[i % 3], key, f"m{i}", at, now=clock())
        clock.now = T0 + timedelta(minutes=1)
        a = Scheduler(first, [SOURCE], clock=clock)
        b = Scheduler(second, [SOURCE], clock=clock)
        counts = await asyncio.gather(a.run_due(), b.run_due(), a.run_due(), b.run_due())
    finally:
        await first.close()
        await second.close()

    assert sum(counts) == 30
    assert a.fired["scheduled_message"] > 0 or b.fired["scheduled_message"] > 0
    sent = await rows(engine, "SELECT conversation_id, seq, client_msg_id FROM message ORDER BY conversation_id, seq")
    assert sorted(r["client_msg_id"] for r in sent) == sorted(keys)  # each once
    for group in groups:
        seqs = [r["seq"] for r in sent if r["conversation_id"] == group]
        assert seqs == list(range(1, len(seqs) + 1))  # gap-free
    states = await rows(engine, "SELECT state, count(*) AS n FROM scheduled_message GROUP BY state")
    assert [(r["state"], r["n"]) for r in states] == [("SENT", 30)]


async def test_a_row_due_sooner_than_the_poll_is_fired_at_its_time_woken_by_the_write(
    server, http, engine, database
) -> None:
    """The scheduler polls every 60 s; a message scheduled 0.3 s ahead while it sleeps is sent long before."""
    api = ChatApi.of(server, http)
    group = int(await api.create_group(1, [2]))
    shift = T0 - datetime.now(UTC)

    def clock() -> datetime:  # the wall clock's pace, in 2031
        return datetime.now(UTC) + shift

    scheduler = Scheduler(database, [SOURCE], clock=clock, poll_seconds=60)
    task = asyncio.create_task(scheduler.run())
    try:
        await wait_until(
            lambda: _listening(engine), 10, "the scheduler's LISTEN connection", interval=0.05
        )  # asleep for its poll
        await do_schedule_message(
            database, "1", group, uuid.uuid4(), "soon", clock() + timedelta(seconds=0.3), now=clock()
        )
        await wait_until(lambda: scheduler.fired["scheduled_message"] == 1, 20, "the message sent at its time")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    (row,) = await rows(engine, "SELECT state, done_at, send_at FROM scheduled_message")
    assert row["state"] == "SENT" and row["done_at"] >= row["send_at"]


async def _listening(engine) -> bool:
    found = await rows(
        engine,
        "SELECT 1 FROM pg_stat_activity WHERE application_name = 'chatgql-scheduler' AND datname = current_database()",
    )
    return len(found) >= 2  # the session server's and this test's


async def test_the_before_send_hook_is_asked_when_a_message_is_scheduled_and_edited(server, http, engine, database):
    """Its rejection schedules nothing (a retry rejected the same way, the hook not asked again); its rewrite is
    what is scheduled and sent, and a retry with the body as written is the same scheduled message."""
    api = ChatApi.of(server, http)
    group = int(await api.create_group(1, [2]))
    verdicts = {"spam": {"action": "reject", "reason": "no spam"}, "darn": {"action": "rewrite", "body": "d**n"}}
    clock = Clock(T0)
    at = T0 + timedelta(minutes=1)
    async with Endpoint(new_secret()) as endpoint:
        endpoint.answer = lambda data: verdicts.get(data["body"], {"action": "accept"})
        async with hook_of(endpoint) as hook:
            spam = uuid.uuid4()
            for _ in range(2):
                with pytest.raises(Forbidden) as raised:
                    await do_schedule_message(database, "2", group, spam, "spam", at, now=clock(), hook=hook)
                assert raised.value.extensions["reason"] == "MESSAGE_REJECTED"
            darn = uuid.uuid4()
            made = await do_schedule_message(database, "2", group, darn, "darn", at, now=clock(), hook=hook)
            again = await do_schedule_message(database, "2", group, darn, "darn", at, now=clock(), hook=hook)
            assert (made.row["body"], again.duplicate, again.row["id"]) == ("d**n", True, made.row["id"])
            fine = await do_schedule_message(database, "2", group, uuid.uuid4(), "fine", at, now=clock(), hook=hook)
            with pytest.raises(Forbidden):
                await do_edit_scheduled(
                    database, "2", group, fine.row["id"], body="spam", send_at=None, now=clock(), hook=hook
                )
            edited = await do_edit_scheduled(
                database, "2", group, fine.row["id"], body="darn", send_at=None, now=clock(), hook=hook
            )
            assert edited["body"] == "d**n"
            assert [a["body"] for a in endpoint.asked] == ["spam", "darn", "fine", "spam", "darn"]
            clock.now = at
            assert await Scheduler(database, [SOURCE], clock=clock).run_due() == 2
            retried = await do_send_message(database, "2", group, darn, "darn", hook=hook)  # sendMessage's retry
            assert (retried.duplicate, retried.message["body"]) == (True, "d**n")
    bodies = await rows(engine, "SELECT body FROM message ORDER BY seq")
    assert [b["body"] for b in bodies] == ["d**n", "d**n"]
