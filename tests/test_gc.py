"""Connections and events leave no reference cycles on the server side.

`chatgql serve` freezes long-lived objects out of the collector's passes
(collector.py); a frozen object is then freed by reference counting only, so
whatever a closed websocket or a delivered event leaves must not be a cycle,
or it would stay for the life of the process. These tests count, by type,
what only the collector could free (gc.DEBUG_SAVEALL), with automatic
collections off in between so that none of it is freed unseen. Client-side
objects (websockets' client, httpx) are left out by module.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import logging
import uuid

import pytest
import uvicorn
from graphql import parse

from chatgql import db
from chatgql.edge.auth import issue_token
from chatgql.engine.acyclic import unlink_tokens
from chatgql.runtime import collector
from chatgql.server.httpprotocol import uvicorn_options
from chatgql.server.websocket import LeanWebSocketProtocol

from .conftest import GraphQLClient, RunningServer, drop_database, make_settings, scratch_database
from .support.live import MESSAGE_NEW, PROTOCOLS, READ_UPDATED, TRANSPORT_WS, WsClient, wait_active_subscriptions

SERVER_SIDE = ("chatgql.", "strawberry.", "graphql.", "starlette.", "uvicorn.", "websockets.server")
SEND = (
    'mutation($c: ID!, $m: UUID!) { sendMessage(conversationId: $c, clientMsgId: $m, body: "x") { message { seq } } }'
)
READ = "mutation($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { advanced } }"
INBOX = "{ inbox(first: 5) { nodes { id title memberCount unreadCount lastMessage { seq body } } } }"


class LeanServer(RunningServer):
    """RunningServer with the protocols `chatgql serve` uses."""

    def __init__(self, settings) -> None:
        super().__init__(settings)
        self.server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                host="127.0.0.1",
                port=self.port,
                log_level="warning",
                lifespan="on",
                **uvicorn_options(settings),  # LeanWebSocketProtocol
            )
        )


@contextlib.contextmanager
def no_automatic_collection():
    """Collect what is garbage now, then keep the collector from running until the block ends."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def server_side_cyclic_garbage() -> collections.Counter:
    """Collect; what only the collector could free, server-side types only, by type."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = collections.Counter(
            f"{type(o).__module__}.{type(o).__qualname__}"
            for o in gc.garbage
            if (type(o).__module__ + ".").startswith(SERVER_SIDE)
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.collect()  # what was counted is garbage again: free it, so that a second count starts afresh
    return found


async def _subscribed(server, settings, users: list[int], protocol: str = TRANSPORT_WS) -> tuple[list[WsClient], list]:
    sockets, operations = [], []
    for user in users:
        ws = await WsClient.connect(server.ws_url, f"Bearer {issue_token(settings, str(user))}", protocol=protocol)
        operations.append(await ws.subscribe(MESSAGE_NEW))
        operations.append(await ws.subscribe(READ_UPDATED))
        sockets.append(ws)
    await wait_active_subscriptions(server, 2 * len(users))
    return sockets, operations


async def test_closed_websockets_leave_no_cycles_on_the_server(migrated_url):
    n = 20
    settings = make_settings(migrated_url, run_relay=False)
    async with LeanServer(settings) as server:
        sockets, _ = await _subscribed(server, settings, [9_100_000 + u for u in range(1, n + 1)])
        with no_automatic_collection():
            await asyncio.gather(*(ws.close() for ws in sockets))
            await wait_active_subscriptions(server, 0)
            await asyncio.sleep(0.2)  # the server's side of each close handshake
            found = server_side_cyclic_garbage()
    # Before: ~80 objects per closed websocket (its protocol, parser, handler, context and each
    # subscription's executor), all in cycles.
    assert sum(found.values()) < n, found.most_common(20)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_subscriptions_ended_with_the_resync_error_leave_no_cycles_on_the_server(migrated_url, protocol):
    """Under overload subscriptions end with the resync error (DELIVERY_DELAYED, SUBSCRIBER_TOO_SLOW,
    STREAM_INTERRUPTED) by the hundred, and their clients often go at once. Before (issue 13's soak):
    the error raised from Subscription.__anext__ held its frame, the frame the subscription, the
    subscription the error: every ended subscription, its executor and its result stream stayed in
    a cycle; frozen, for the life of the process. (And a parked subscription's run, engine/parked.py:
    its task's context held its Parked, the Parked its operation, the operation the task.)"""
    n = 20
    settings = make_settings(migrated_url, run_relay=False)
    async with LeanServer(settings) as server:
        users = [(9_150_000 if protocol == TRANSPORT_WS else 9_155_000) + u for u in range(1, n + 1)]
        sockets, operations = await _subscribed(server, settings, users, protocol)
        with no_automatic_collection():
            server.runtime.deps.dispatcher.interrupt_all()
            errors = await asyncio.gather(*(op.error() for op in operations))
            assert {e.extensions.get("reason") for e in errors} == {"STREAM_INTERRUPTED"}, errors[:2]
            await wait_active_subscriptions(server, 0)
            await asyncio.gather(*(ws.close() for ws in sockets))
            await asyncio.sleep(0.2)  # the server's side of each close handshake
            found = server_side_cyclic_garbage()
    assert sum(found.values()) < n, found.most_common(20)


async def test_subscriptions_writing_to_sockets_just_closed_leave_no_cycles_and_no_errors(migrated_url, caplog):
    """Each subscription writes (its resync error) after its client's connection was lost and before the
    handler's read loop saw it go: the race of the soak's 51 ERROR tracebacks, made certain here. The
    connection-lost callbacks are queued first (the server side aborted), then the subscriptions' wake-ups,
    then what the read loops do: every write finds its socket gone. Before: each operation's task kept
    its exception (task -> exception -> traceback -> frame -> operation -> task), holding the whole
    connection in a cycle, and logged "Exception in worker task" at ERROR with a traceback."""
    n = 20
    settings = make_settings(migrated_url, run_relay=False)
    async with LeanServer(settings) as server:
        sockets, _ = await _subscribed(server, settings, [9_160_000 + u for u in range(1, n + 1)])
        with no_automatic_collection():
            protocols = [c for c in server.server.server_state.connections if isinstance(c, LeanWebSocketProtocol)]
            assert len(protocols) == n
            for protocol in protocols:
                protocol.transport.abort()
            server.runtime.deps.dispatcher.interrupt_all()
            await wait_active_subscriptions(server, 0)
            await asyncio.sleep(0.2)
            found = server_side_cyclic_garbage()
        for ws in sockets:
            ws.ws.transport.abort()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors[:5]]
    assert sum(found.values()) < n, found.most_common(20)


@contextlib.asynccontextmanager
async def _own_database(admin_url: str, name: str):
    """A database of its own: its server's relay is the only one (the session's server relays the
    shared test database's outbox to its own bus, so a second server there hears nothing)."""
    url = await scratch_database(admin_url, name)
    try:
        yield url
    finally:
        await drop_database(admin_url, name)


async def test_delivered_events_leave_no_cycles_on_the_server(migrated_url, http):
    n, rounds = 10, 20
    async with _own_database(migrated_url, "chatgql_test_gc") as url:
        await _deliver_and_count(url, http, n, rounds)


async def _deliver_and_count(url: str, http, n: int, rounds: int) -> None:
    settings = make_settings(url)
    async with LeanServer(settings) as server:
        client = GraphQLClient(http, server.url, settings)
        users = [9_200_000 + u for u in range(1, n + 1)]
        group = await client.data(
            'mutation($m: [ID!]!) { createGroup(title: "gc", memberIds: $m) { id } }',
            {"m": [str(u) for u in users[1:]]},
            user=users[0],
        )
        cid = group["createGroup"]["id"]
        sockets, operations = await _subscribed(server, settings, users)

        async def send_and_read(i: int) -> None:
            sent = await client.data(SEND, {"c": cid, "m": str(uuid.uuid4())}, user=users[i % n])
            await client.data(READ, {"c": cid, "s": sent["sendMessage"]["message"]["seq"]}, user=users[(i + 1) % n])
            await client.data(INBOX, user=users[(i + 2) % n])  # its fields go through the request's loaders

        # Rounds before counting: the documents are accepted (validated once, their plans built for
        # the variables' shapes they meet) and the process's one-time caches are filled.
        for i in range(rounds):
            await send_and_read(i)
        await asyncio.gather(*(op.collect(rounds) for op in operations))
        with no_automatic_collection():
            for i in range(rounds, 2 * rounds):
                await send_and_read(i)
            await asyncio.gather(*(op.collect(rounds) for op in operations))
            found = server_side_cyclic_garbage()
        await asyncio.gather(*(ws.close() for ws in sockets))
    # 60 HTTP operations, 400 event deliveries. Before: every execution's executor and what hangs
    # off it (~25 objects each) was a cycle.
    assert sum(found.values()) < rounds, found.most_common(20)


def test_a_parsed_document_with_unlinked_tokens_is_freed_without_the_collector():
    query = "query Q($c: ID!) { conversation(id: $c) { id title members { userId role } } viewer { id } }"
    with no_automatic_collection():
        parse(query)  # as parsed: its tokens are a doubly linked list
        control = server_side_cyclic_garbage()
        document = parse(query)
        unlink_tokens(document)
        del document
        found = server_side_cyclic_garbage()
    assert control["graphql.language.ast.Token"] > 20  # the test can tell
    assert not found, found.most_common(10)


def test_a_freeze_after_a_validation_collects_first(monkeypatch):
    calls = []
    monkeypatch.setattr(collector.gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(collector.gc, "collect", lambda generation=2: calls.append(f"collect {generation}"))
    monkeypatch.setattr(collector, "_cyclic_work_since_freeze", False)
    monkeypatch.setattr(collector, "_last_collecting_freeze", float("-inf"))
    collector.freeze()
    assert calls == ["freeze"]
    calls.clear()
    collector.cyclic_work_done()
    collector.freeze()  # the validation's garbage may have left the young generation: collected first
    collector.freeze()
    collector.cyclic_work_done()
    collector.freeze()  # within a second of the last collecting freeze: it waits
    assert calls == ["collect 2", "freeze", "freeze"]


async def test_freezes_run_between_validations(monkeypatch):
    from chatgql.engine import validation

    order = []
    started = asyncio.Event()
    release = __import__("threading").Event()
    loop = asyncio.get_running_loop()

    def slow_validation(schema, document, rules):
        loop.call_soon_threadsafe(started.set)
        release.wait(5)
        order.append("validation")
        return []

    monkeypatch.setattr(validation, "validate_document", slow_validation)
    monkeypatch.setattr(validation, "check_document", lambda document, limits: None)
    running = asyncio.ensure_future(validation.validate(None, parse("{ a }"), None, ()))
    await started.wait()
    validation.between_validations(lambda: order.append("freeze"))
    assert order == []  # not while the validation runs
    release.set()
    await running
    await asyncio.sleep(0.1)
    assert order == ["validation", "freeze"]


async def test_copies_of_a_document_being_validated_are_not_validated_again(monkeypatch):
    from chatgql.engine import validation

    calls = []
    release = asyncio.Event()

    async def slow_validate(schema, document, limits, rules):
        calls.append(document)
        await release.wait()
        return [] if document.loc.source.body.startswith("{ ok") else ["refused"]

    monkeypatch.setattr(validation, "validate", slow_validate)
    ok = [asyncio.ensure_future(validation.validate_once("{ ok }", None, parse("{ ok }"), None, ())) for _ in range(5)]
    bad = [asyncio.ensure_future(validation.validate_once("{ no }", None, parse("{ no }"), None, ())) for _ in range(3)]
    await asyncio.sleep(0.05)
    assert len(calls) == 2  # one of each text while it is under way
    release.set()
    assert await asyncio.gather(*ok) == [[]] * 5
    assert await asyncio.gather(*bad) == [["refused"]] * 3  # refusals are not shared: each copy on its own
    assert len(calls) == 4 and not validation._validating


async def test_cached_statements_hold_no_timers_that_would_make_cycles(migrated_url):
    """asyncpg gives each cached prepared statement a lifetime by default (300 s): a timer whose
    callback holds the cache entry, which holds the timer. Once the timer fired the pair was a
    cycle; in `chatgql serve`, frozen while it lived, it stayed for good, with the statement's
    state and the context of the request that prepared it (found as CPU meters in this file's
    counts, five minutes into a test run). chatgql's connections cache statements without a
    lifetime: no such timer exists, on the pool's connections or a dedicated one."""
    loop = asyncio.get_running_loop()

    def expiring() -> int:  # the loop's timers (asyncio's own heap) that expire a cached statement
        return sum("_on_entry_expired" in getattr(h._callback, "__qualname__", "") for h in loop._scheduled)

    before = expiring()  # other connections of the test process (asyncpg's defaults) may hold some
    database = await db.Database(migrated_url, max_size=2).open()
    try:
        async with database.connection() as conn:
            for n in range(5):
                await conn.fetchval(f"SELECT {n}::int + $1::int", n)  # five statements prepared and cached
        dedicated = await database.dedicated()
        try:
            await dedicated.fetchval("SELECT $1::int", 1)
            assert expiring() == before, f"{expiring() - before} statement-cache timers scheduled"
        finally:
            await dedicated.close()
    finally:
        await database.close()
