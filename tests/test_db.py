"""db.upgrade's shortcut (a database at head is left alone without starting Alembic), and
db.database_unavailable."""

from __future__ import annotations

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import text

from chatgql import db
from chatgql.settings import DB_CONNECTIONS, Settings, default_pool_size


def test_the_head_read_from_the_migration_files_is_alembics_head():
    config = Config()
    config.set_main_option("script_location", str(db.ALEMBIC_DIR))
    assert db._script_head() == ScriptDirectory.from_config(config).get_current_head()


async def test_only_a_database_at_head_skips_alembic(engine, migrated_url):
    head = db._script_head()
    assert await db._at_head(migrated_url)
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = '0002'"))
    try:
        assert not await db._at_head(migrated_url)
    finally:
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": head})


async def test_database_unavailable_tells_an_outage_from_a_bug(migrated_url):
    """What the error layer answers UNAVAILABLE for: the server unreachable, a connection
    terminated under a query, a closed connection used; not a SQL error, nor an OSError
    that has nothing to do with PostgreSQL."""
    import asyncpg

    from .conftest import free_port

    with pytest.raises(OSError) as refused:
        await asyncpg.connect(host="127.0.0.1", port=free_port(), user="postgres", database="postgres")
    assert db.database_unavailable(refused.value)

    conn = await asyncpg.connect(db.dsn(migrated_url))
    other = await asyncpg.connect(db.dsn(migrated_url))
    try:
        with pytest.raises(asyncpg.PostgresError) as bad_sql:
            await conn.fetch("SELECT * FROM no_such_table")
        assert not db.database_unavailable(bad_sql.value)
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        await other.fetchval("SELECT pg_terminate_backend($1)", pid)
        # Its next uses: the FATAL PostgreSQL sent, "connection is closed", or asyncpg's protocol
        # left mid-operation (InternalClientError "cannot switch to state ...", as in the fault suite).
        for _ in range(2):
            with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError)) as used:
                await conn.fetch("SELECT 1")
            assert db.database_unavailable(used.value), repr(used.value)
    finally:
        await conn.close()
        await other.close()

    with pytest.raises(OSError) as missing:
        open("/nonexistent/chatgql")  # noqa: SIM115
    assert not db.database_unavailable(missing.value)
    try:
        raise RuntimeError("wrapped") from refused.value
    except RuntimeError as wrapped:
        assert db.database_unavailable(wrapped)  # what caused it counts


async def test_the_servers_pool_keeps_db_pool_size_connections_open_from_its_start(server) -> None:
    """CHATGQL_DB_POOL_SIZE connections are open before the first request, and stay; by default no
    overflow opens on demand. Opened on demand, the first burst of a load waited for new
    connections, up to 170 ms each on a busy machine: the live p99 at 500 msg/s was that wait."""
    pool = server.runtime.deps.database.pool
    settings = server.settings
    assert settings.db_max_overflow == 0
    assert pool.get_min_size() == pool.get_max_size() == settings.db_pool_size == default_pool_size(settings.workers)
    assert pool.get_size() == settings.db_pool_size


def test_the_default_pool_shares_its_connections_among_the_workers(monkeypatch) -> None:
    """Unset, CHATGQL_DB_POOL_SIZE is DB_CONNECTIONS over the workers (each serves its share of the
    traffic), at least 4 each: many workers do not open many times PostgreSQL's connections."""
    monkeypatch.delenv("CHATGQL_DB_POOL_SIZE", raising=False)
    assert [Settings(workers=n).db_pool_size for n in (1, 2, 3, 7, 16)] == [DB_CONNECTIONS, 10, 6, 4, 4]
    assert Settings(workers=2, db_pool_size=3).db_pool_size == 3  # told: as told
    monkeypatch.setenv("CHATGQL_DB_POOL_SIZE", "12")
    assert Settings(workers=7).db_pool_size == 12
