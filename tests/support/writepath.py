"""Write-path test support shared by test_messages and test_reads: a burst server with a
long timeout, a relay-less "quiet" server on a database of its own (its outbox keeps its
rows), fresh client pools per wave, and a gate that releases concurrent calls together."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from chatgql import db
from chatgql.settings import Settings
from tests.conftest import (
    TABLES,
    GraphQLClient,
    RunningServer,
    create_engine,
    drop_database,
    make_settings,
    scratch_database,
)

TIMEOUT = 120
DB_POOL = 25  # database connections of each server made here


def server_settings(database_url: str) -> Any:
    # gated() holds each call at a lock inside PostgreSQL, one connection per call: markRead
    # calls here run uncoalesced (coalesced calls reach PostgreSQL as one statement per flush;
    # tests/services/test_read_coalescing.py races those).
    # send_group_commit off: the gate below races concurrent chat_send transactions inside
    # PostgreSQL (as sends from several API processes race); with group commit one process
    # queues the sends to a conversation itself and hands them over as one batch
    # (tests/services/test_group_commit.py races those, from three processes).
    return make_settings(
        database_url,
        run_relay=False,
        request_timeout_seconds=TIMEOUT,
        db_pool_size=DB_POOL,
        db_max_overflow=0,
        mark_read_coalescing=False,
        send_group_commit=False,
    )


@contextlib.asynccontextmanager
async def wave(server: RunningServer) -> AsyncIterator[GraphQLClient]:
    async with httpx.AsyncClient(timeout=TIMEOUT, limits=httpx.Limits(max_connections=300)) as http:
        yield GraphQLClient(http, server.url, server.settings)


@pytest.fixture(scope="module")
async def burst_server(migrated_url: str) -> AsyncIterator[RunningServer]:
    async with RunningServer(server_settings(migrated_url)) as running:
        yield running


async def gated(engine: AsyncEngine, table: str, calls: list[Awaitable[Any]]) -> list[Any]:
    """Run calls at once while `table` is locked against writes, and release it only when
    as many of them as the server's pool lets in wait on a lock inside PostgreSQL.

    Calls through one event loop otherwise reach the database a few ms apart, one by one;
    held at the gate, they all race for the same rows when it opens.
    """
    waiters = min(len(calls), DB_POOL)
    async with engine.connect() as conn, conn.begin():
        await conn.execute(text(f"LOCK TABLE {table} IN SHARE MODE"))
        task = asyncio.ensure_future(asyncio.gather(*calls))
        waiting = 0
        for _ in range(1500):
            if task.done():
                break  # a call failed before reaching the gate: its error is raised below
            async with engine.connect() as probe:
                waiting = (
                    await probe.execute(
                        text(
                            "SELECT count(*) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                        )
                    )
                ).scalar_one()
            if waiting >= waiters:
                break
            await asyncio.sleep(0.02)
    results = await task
    assert waiting >= waiters, f"only {waiting} of {waiters} calls reached the gate"
    return results


@dataclass
class Quiet:
    """A relay-less chatgql on a database of its own: outbox rows stay there to be inspected."""

    server: RunningServer
    engine: AsyncEngine
    client: GraphQLClient | None = None


@contextlib.asynccontextmanager
async def open_quiet_server(
    migrated_url: str, purpose: str, settings: Callable[[str], Settings] = server_settings
) -> AsyncIterator[Quiet]:
    """A Quiet server on a database named after purpose, dropped afterwards."""
    name = f"{make_url(db.asyncpg_url(migrated_url)).database}_{purpose}_norelay"
    quiet_url = await scratch_database(migrated_url, name)
    engine = create_engine(quiet_url, pool_size=5, max_overflow=5)
    try:
        async with RunningServer(settings(quiet_url)) as running:
            assert running.runtime.relay is None
            yield Quiet(running, engine)
    finally:
        await engine.dispose()
        await drop_database(migrated_url, name)


@pytest.fixture
async def quiet(quiet_server: Quiet) -> AsyncIterator[Quiet]:
    """The quiet server, emptied, with a client of this test's own."""
    async with quiet_server.engine.begin() as conn:
        await conn.execute(text(f"TRUNCATE {TABLES} RESTART IDENTITY"))
    async with wave(quiet_server.server) as client:
        yield Quiet(quiet_server.server, quiet_server.engine, client)
