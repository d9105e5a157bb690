"""The database: chatgql's asyncpg pool, the embedded PostgreSQL fallback, and migrations.

The running service talks to PostgreSQL through `Database` (an asyncpg pool):
store/ holds hand-written SQL, so a query builder in between only cost CPU
(about a fifth of a sendMessage request's: bench/results/micro.md).
SQLAlchemy stays for Alembic's migrations (and tests use it to inspect the
database).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import orjson

from ..runtime import tracing
from .embedded import EmbeddedPostgres, make_private_dir, reach_embedded_postgres, start_embedded_postgres

__all__ = [
    "Connection",
    "Database",
    "EmbeddedPostgres",
    "Row",
    "reach_embedded_postgres",
    "start_embedded_postgres",
    "asyncpg_url",
    "database_unavailable",
    "dsn",
    "make_private_dir",
    "upgrade",
]

log = logging.getLogger(__name__)

# alembic/ lives at the repository root (next to alembic.ini); chatgql runs from a checkout.
ALEMBIC_DIR = Path(__file__).resolve().parents[3] / "alembic"
# Each stored function's source: alembic/functions/NAME.sql is today's text, whose first line names the
# migration that installs it; an earlier text a migration installed is kept as NAME@REVISION.sql
# (docs/development/migrations.md).
FUNCTIONS_DIR = ALEMBIC_DIR / "functions"


def function_source(name: str, revision: str) -> str:
    """The text of stored function `name` that migration `revision` installs (CREATE OR REPLACE)."""
    current = FUNCTIONS_DIR / f"{name}.sql"
    text = current.read_text()
    if text.splitlines()[0] == f"-- revision: {revision}":
        return text
    frozen = FUNCTIONS_DIR / f"{name}@{revision}.sql"
    if not frozen.exists():
        raise FileNotFoundError(f"{current} is not migration {revision}'s, and {frozen.name} does not exist")
    return frozen.read_text()


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

    `on_commit(conn, callback)` runs a callback once conn's work has committed
    (never after a rollback); `events_written(conn)` is the one the services
    use: once per commit that wrote outbox rows, every `event_hooks` callback
    runs (events.wakeup.RelayWakeup adds the relay's wake-up there).

    on_wait, when given, hears how long each taking of a pooled connection
    waited, in seconds (the server's chatgql_db_pool_wait_seconds).
    """

    def __init__(
        self, url: str, *, max_size: int = 20, min_size: int = 1, on_wait: Callable[[float], None] | None = None
    ) -> None:
        self._dsn = dsn(url)
        self._on_wait = on_wait
        self._max_size = max_size
        self._min_size = min(min_size, max_size)
        self._pool: asyncpg.Pool | None = None
        self._on_commit: dict[asyncpg.Connection, list[Callable[[], None]]] = {}  # open transaction()s
        self.event_hooks: list[Callable[[], None]] = []

    async def open(self) -> Database:
        self._pool = await asyncpg.create_pool(
            self._dsn,
            min_size=self._min_size,
            max_size=self._max_size,
            max_inactive_connection_lifetime=300,
            init=_setup_connection,
            reset=_keep_session,
            **_connection_options(),
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
        acquire = self._acquire()
        if tracing.ON:
            return tracing.unit(acquire)
        return acquire

    def _acquire(self) -> Any:
        acquire = self.pool.acquire()
        return acquire if self._on_wait is None else _TimedAcquire(acquire, self._on_wait)

    def transaction(self) -> AbstractAsyncContextManager[asyncpg.Connection]:
        """A pooled connection inside one transaction, committed on a clean exit; then the
        callbacks on_commit() registered for it run (not when it rolled back)."""
        if tracing.ON:
            return tracing.unit(self._transaction())
        return self._transaction()

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[asyncpg.Connection]:
        callbacks: list[Callable[[], None]] = []
        async with self._acquire() as conn:
            self._on_commit[conn] = callbacks
            try:
                async with conn.transaction():
                    yield conn
            finally:
                del self._on_commit[conn]
        _run(callbacks)

    def on_commit(self, conn: asyncpg.Connection, callback: Callable[[], None]) -> None:
        """Run callback once conn's work has committed: after the transaction() conn belongs to
        commits (once, however often it is registered in it; never if it rolls back), or now
        when conn is in autocommit (the statement that did the work has committed)."""
        pending = self._on_commit.get(conn)
        if pending is not None:
            if callback not in pending:
                pending.append(callback)
        elif conn.is_in_transaction():
            raise RuntimeError("on_commit() needs a transaction opened by Database.transaction()")
        else:
            _run([callback])

    def events_written(self, conn: asyncpg.Connection) -> None:
        """conn wrote outbox rows: run the event hooks once it has committed."""
        self.on_commit(conn, self._events_committed)

    def _events_committed(self) -> None:
        _run(self.event_hooks)

    async def dedicated(self, application_name: str | None = None) -> asyncpg.Connection:
        """A connection of its own, outside the pool (session state: locks, LISTEN). Close it when done.

        application_name: how pg_stat_activity names it (relays find each other by it)."""
        settings = {"application_name": application_name} if application_name else None
        conn = await asyncpg.connect(self._dsn, server_settings=settings, **_connection_options())
        await _setup_connection(conn)
        return conn


class _TimedAcquire:
    """asyncpg's pool.acquire() context, telling on_wait how long taking the connection waited."""

    __slots__ = ("_acquire", "_on_wait")

    def __init__(self, acquire: Any, on_wait: Callable[[float], None]) -> None:
        self._acquire = acquire
        self._on_wait = on_wait

    async def __aenter__(self) -> asyncpg.Connection:
        started = time.perf_counter()
        conn = await self._acquire.__aenter__()
        self._on_wait(time.perf_counter() - started)
        return conn

    def __aexit__(self, *exc_info: Any) -> Any:
        return self._acquire.__aexit__(*exc_info)


def _connection_options() -> dict[str, Any]:
    """How every connection of chatgql's is made.

    - Rows as Row.
    - Prepared statements cached with no lifetime, only the cache's size (asyncpg's LRU of 100 per
      connection) bounds them. With a lifetime (asyncpg's default: 300 s) each cached statement
      holds a timer whose callback holds the statement's entry, and the entry the timer: once the
      timer fired, that pair is a reference cycle. A process that froze it while it lived
      (runtime/collector.py) never freed it: every statement's entry, its state and the context
      of the request that prepared it, every five minutes, on every connection.
    - asyncpg's connection class while tracing is on: each statement a span (runtime/tracing.py).
    """
    options: dict[str, Any] = {"record_class": Row, "max_cached_statement_lifetime": 0}
    if tracing.ON:
        options["connection_class"] = tracing.TracedConnection
    return options


def _run(callbacks: list[Callable[[], None]]) -> None:
    """After a commit: a failing callback is logged, never the caller's error (the work is durable)."""
    for callback in list(callbacks):
        try:
            callback()
        except Exception:
            log.exception("an after-commit callback failed")


# PostgreSQL going away: shutting down (57P01 admin, 57P02 crash), starting up or in recovery
# (57P03), the connection lost (class 08); asyncpg's protocol left mid-operation by a
# connection that died under it ("cannot switch to state 12; another operation (2) is in
# progress", seen when the embedded postmaster was SIGKILLed under load).
_UNAVAILABLE = (
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.CannotConnectNowError,
    asyncpg.PostgresConnectionError,
    asyncpg.InternalClientError,
)
# asyncpg's words for a connection or pool it cannot use any more (InterfaceError has no subclasses for them).
_GONE = ("connection is closed", "pool is closed", "pool is closing")


def database_unavailable(error: BaseException) -> bool:
    """error (or what caused it) says PostgreSQL cannot be reached right now, not that the
    request or the code is wrong: the server is down, restarting or unreachable, a
    connection to it was lost. Retrying later can succeed."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, _UNAVAILABLE):
            return True
        if isinstance(current, asyncpg.InterfaceError) and any(words in str(current) for words in _GONE):
            return True
        if isinstance(current, OSError) and _raised_in_asyncpg(current):
            return True  # refused, reset, no socket file, unreachable: while connecting or talking
        current = current.__cause__ or current.__context__
    return False


def _raised_in_asyncpg(error: BaseException) -> bool:
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_globals.get("__name__", "").startswith("asyncpg"):
            return True
        traceback = traceback.tb_next
    return False


def dsn(url: str) -> str:
    """The libpq-style URL asyncpg takes (postgresql://...), from any accepted spelling."""
    return "postgresql://" + asyncpg_url(url)[len("postgresql+asyncpg://") :]


def _upgrade_sync(url: str, revision: str = "head") -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(ALEMBIC_DIR))
    cfg.attributes["database_url"] = asyncpg_url(url)
    command.upgrade(cfg, revision)


async def upgrade(url: str, revision: str = "head") -> None:
    """Apply Alembic migrations up to revision (Alembic's env runs its own loop).

    A database already at head is left alone without starting Alembic: importing it
    and SQLAlchemy's engine is a large part of a restart's time to serving.
    """
    if revision == "head" and await _at_head(url):
        return
    await asyncio.to_thread(_upgrade_sync, url, revision)


_REVISION = re.compile(r"""^(down_revision|revision)\s*(?::[^=]*)?=\s*(None|"[^"]*"|'[^']*')\s*(?:#.*)?$""", re.M)


def _script_head() -> str | None:
    """The one head revision of alembic/versions, read from the files; None when that is
    not plain (a merge, a branch, an unusual file): then Alembic decides."""
    revisions: dict[str, str | None] = {}
    for path in (ALEMBIC_DIR / "versions").glob("*.py"):
        found = {match[1]: match[2] for match in _REVISION.finditer(path.read_text())}
        if set(found) != {"revision", "down_revision"} or found["revision"] == "None":
            return None
        down = None if found["down_revision"] == "None" else found["down_revision"][1:-1]
        revisions[found["revision"][1:-1]] = down
    heads = set(revisions) - set(revisions.values())
    return heads.pop() if len(heads) == 1 else None


async def _at_head(url: str) -> bool:
    head = _script_head()
    if head is None:
        return False
    try:
        conn = await asyncpg.connect(dsn(url))
    except (OSError, asyncpg.PostgresError):
        return False  # Alembic reports it
    try:
        rows = await conn.fetch("SELECT version_num FROM alembic_version")
    except asyncpg.UndefinedTableError:
        return False
    finally:
        await conn.close()
    return [row["version_num"] for row in rows] == [head]
