"""/metrics: the collector's pauses and the event loop's lag are measured while the server runs (and
only then); the pool's waits and the relay's steps are timed."""

from __future__ import annotations

import asyncio
import gc
import time

from chatgql.db import Database, asyncpg_url

from .conftest import RunningServer, drop_database, make_settings, scratch_database
from .support.live import ChatApi, metrics, wait_until


async def test_gc_pauses_are_in_metrics_and_the_callback_goes_with_the_server(migrated_url, http):
    callbacks_before = len(gc.callbacks)
    async with RunningServer(make_settings(migrated_url, run_relay=False)) as server:
        assert len(gc.callbacks) == callbacks_before + 1
        before = await metrics(http, server)
        gc.collect()  # a full collection, timed by the server's callback (it runs in this process)
        after = await metrics(http, server)
        key = 'chatgql_gc_pause_seconds_count{generation="2"}'
        assert after[key] >= before.get(key, 0) + 1
        assert after['chatgql_gc_pause_seconds_sum{generation="2"}'] > 0
        assert after["chatgql_gc_pause_longest_seconds"] > 0
    assert len(gc.callbacks) == callbacks_before


async def test_the_event_loops_lag_is_sampled_while_the_server_runs(migrated_url, http):
    """A stall of the loop (here this test's own, 60 ms: the server runs in this loop) shows in
    chatgql_event_loop_lag_seconds: a timer due meanwhile ran late by most of it."""
    async with RunningServer(make_settings(migrated_url, run_relay=False)) as server:
        before = await metrics(http, server)
        time.sleep(0.06)  # noqa: ASYNC251 - the stall under test, not a wait
        after = await metrics(http, server)
        stalls = 'chatgql_event_loop_lag_seconds_bucket{le="0.025"}'
        count = "chatgql_event_loop_lag_seconds_count"
        assert after[count] > before[count]
        assert after[count] - after[stalls] >= before[count] - before[stalls] + 1, (before, after)
        assert after["chatgql_event_loop_lag_longest_seconds"] >= 0.03


async def test_pool_waits_are_timed_for_connections_and_transactions(migrated_url):
    """Database(on_wait=...) hears how long each taking of a pooled connection waited, by
    connection() and by transaction(), a wait for a busy pool included."""
    waits: list[float] = []
    database = await Database(asyncpg_url(migrated_url), max_size=1, on_wait=waits.append).open()
    try:
        async with database.connection() as conn:
            assert await conn.fetchval("SELECT 1") == 1
            waiting = asyncio.create_task(_in_transaction(database))
            await wait_until(lambda: len(database.pool._queue._getters) > 0, 10, "a second taker waiting")
        assert await waiting == 2
        assert len(waits) == 2 and all(wait >= 0 for wait in waits)
    finally:
        await database.close()


async def _in_transaction(database: Database) -> int:
    async with database.transaction() as conn:
        return await conn.fetchval("SELECT 2")


async def test_the_relays_steps_and_the_pools_waits_are_in_metrics(database_url, http):
    # A database of its own: its relay leads every shard (the suite's servers lead those of theirs).
    url = await scratch_database(database_url, "chatgql_metrics")
    try:
        await _relay_steps_in_metrics(url, http)
    finally:
        await drop_database(database_url, "chatgql_metrics")


async def _relay_steps_in_metrics(url: str, http) -> None:
    async with RunningServer(make_settings(url)) as server:
        api = ChatApi.of(server, http)
        conversation = await api.create_group(1, [2], "metrics")
        await api.send(1, conversation, "hello")

        async def relayed() -> bool:
            got = await metrics(http, server)
            return all(
                got.get(f'chatgql_relay_step_seconds_count{{step="{step}"}}', 0) >= 1 for step in ("read", "publish")
            )

        await wait_until(relayed, 30, "the relay's read and publish in /metrics")
        assert (await metrics(http, server))["chatgql_db_pool_wait_seconds_count"] >= 2
