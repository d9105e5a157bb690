"""The relay's wake-up belongs to the services: a service called directly (no GraphQL) wakes the
relay once its transaction has committed events, once per commit, and never after a rollback.

The relay here polls once a minute: only the wake-up can explain an event reaching its
subscriber within seconds."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from sqlalchemy.engine import make_url

from chatgql import db
from chatgql.errors import NotFound
from chatgql.events import types as events
from chatgql.events.dispatch import Subscription
from chatgql.server.app import Runtime
from chatgql.services import conversations as conversation_service
from chatgql.services.messages import do_send_message
from chatgql.services.reads import do_mark_read
from chatgql.store import outbox

from ..conftest import GraphQLClient, RunningServer, drop_database, make_settings, scratch_database
from ..support.live import wait_until

POLL_SECONDS = 60.0  # the relay's poll: far longer than any wait below
PROMPT = 10.0  # an event woken for arrives well within this


@pytest.fixture(scope="module")
async def slow_poll_server(migrated_url: str) -> AsyncIterator[RunningServer]:
    """A whole chatgql (relay, memory bus, dispatcher, HTTP) on a database of its own."""
    name = f"{make_url(db.asyncpg_url(migrated_url)).database}_commit_wakeup"
    url = await scratch_database(migrated_url, name)
    try:
        settings = make_settings(url, relay_poll_seconds=POLL_SECONDS, mark_read_coalescing=True)
        async with RunningServer(settings) as server:
            relay = server.runtime.relay
            assert relay is not None
            await wait_until(lambda: relay.is_leader, 15, "the relay to lead every shard")
            await asyncio.sleep(0.5)  # past its first drain: from now on it waits (poll or wake-up)
            yield server
    finally:
        await drop_database(migrated_url, name)


@pytest.fixture
def slow_poll(slow_poll_server: RunningServer) -> Runtime:
    return slow_poll_server.runtime


class Commits:
    """Counts the event hooks' calls (the relay's wake-up is one of them)."""

    def __init__(self, database: db.Database) -> None:
        self.count = 0
        self._database = database

    def __call__(self) -> None:
        self.count += 1

    def __enter__(self) -> Commits:
        self._database.event_hooks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._database.event_hooks.remove(self)


async def next_event(subscription: Subscription, what: str, user_id: str | None = None) -> tuple[dict, float]:
    """The next event (of user_id, if given: others' read.updated are skipped) and how long it took."""
    started = time.monotonic()
    deadline = started + PROMPT
    while True:
        try:
            event = await asyncio.wait_for(anext(subscription), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise AssertionError(
                f"{what} did not reach its subscriber within {PROMPT} s (the relay was not woken)"
            ) from None
        if user_id is None or event["userId"] == user_id:
            return event, time.monotonic() - started


async def test_services_called_directly_wake_the_relay_once_per_commit_and_never_after_a_rollback(
    slow_poll: Runtime,
) -> None:
    database = slow_poll.deps.database
    dispatcher = slow_poll.deps.dispatcher
    coalescer = slow_poll.deps.read_coalescer
    assert coalescer is not None
    delays: dict[str, float] = {}
    with Commits(database) as commits:
        group = await conversation_service.do_create_group(database, "1", "wake", ["2", "3"], max_members=10)
        assert commits.count == 1  # member.added committed
        async with (
            dispatcher.subscribe("2", group, events.MESSAGE_NEW) as messages,
            dispatcher.subscribe("2", group, events.READ_UPDATED) as reads,
        ):
            # 1. A send, called directly.
            cmid = uuid.uuid4()
            result = await do_send_message(database, "1", group, cmid, "hello")
            assert commits.count == 2
            event, delays["send"] = await next_event(messages, "a send's message.new")
            new = events.parse(event)
            assert new == events.MessageNew(
                conversation_id=group,
                sender_id="1",
                client_msg_id=cmid,
                body="hello",
                seq=result.message.seq,
                created_at=result.message.created_at,
            )
            # A retry stores nothing and writes no event: no commit of events, no wake-up.
            assert (await do_send_message(database, "1", group, cmid, "hello")).duplicate
            assert commits.count == 2

            # 2. Group commit: sends racing to one conversation share transactions; each commit
            # wakes the relay once, and every message arrives promptly.
            batcher = slow_poll.deps.send_batcher
            assert batcher is not None
            before = commits.count
            sent = await asyncio.gather(
                *(
                    do_send_message(database, ("1", "3")[i % 2], group, uuid.uuid4(), f"m{i}", batcher=batcher)
                    for i in range(12)
                )
            )
            assert 1 <= commits.count - before <= 12
            seqs = sorted(r.message.seq for r in sent)
            got: list[int] = []
            for _ in seqs:
                event, delay = await next_event(messages, "a batched send's message.new")
                delays["batch"] = max(delays.get("batch", 0.0), delay)
                got.append(events.parse(event).seq)  # type: ignore[attr-defined]
            assert got == seqs
            # (the senders' own read.updated events, users 1 and 3, are skipped below)

            # 3. markRead, alone and through the coalescer: one commit each, prompt.
            for label, call in (
                ("markRead", lambda seq: do_mark_read(database, "2", group, seq)),
                ("coalesced markRead", lambda seq: do_mark_read(database, "2", group, seq, coalescer=coalescer)),
            ):
                before = commits.count
                target = seqs[0] if label == "markRead" else seqs[-1]
                moved = await call(target)
                assert moved.advanced and moved.last_read_seq == target
                assert commits.count == before + 1
                event, delays[label] = await next_event(reads, label, user_id="2")
                assert events.parse(event) == events.ReadUpdated(
                    conversation_id=group, user_id="2", last_read_seq=target
                )
                assert not (await call(target)).advanced  # nothing moved: no event, no wake-up
                assert commits.count == before + 1

            # 4. A rollback after events were written: no wake-up, and nothing to relay.
            before = commits.count
            with pytest.raises(_Abandoned):
                async with database.transaction() as conn:
                    row = events.MessageNew(
                        conversation_id=group, sender_id="1", client_msg_id=uuid.uuid4(), body="never"
                    ).outbox_row()
                    await outbox.append(conn, [row])
                    database.events_written(conn)
                    database.events_written(conn)  # twice in one transaction: still once at most
                    raise _Abandoned
            assert commits.count == before
            # A COMMIT that fails (a deferred constraint checked only then) is a rollback too.
            with pytest.raises(asyncpg.UniqueViolationError):
                async with database.transaction() as conn:
                    await conn.execute("CREATE TEMP TABLE once (x int UNIQUE DEFERRABLE INITIALLY DEFERRED)")
                    await conn.execute("INSERT INTO once VALUES (1), (1)")  # fine until COMMIT
                    database.events_written(conn)
            assert commits.count == before
            # ...and once per commit, however often a transaction says it wrote events
            async with database.transaction() as conn:
                database.events_written(conn)
                database.events_written(conn)
                assert commits.count == before  # not before the commit
            assert commits.count == before + 1

            # 5. A membership change, called directly: its event reaches the dispatcher promptly
            # (a removed member's subscriptions end).
            async with dispatcher.subscribe("3", group, events.MESSAGE_NEW) as leaving:
                await conversation_service.do_remove_member(database, "3", group, "3")
                assert commits.count == before + 2
                with pytest.raises(NotFound):
                    await next_event(leaving, "member.removed")
    print({what: f"{seconds * 1000:.0f} ms" for what, seconds in delays.items()})


class _Abandoned(Exception):
    pass


SEND = (
    "mutation($c: ID!, $m: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $m, body: $b) "
    "{ message { seq } } }"
)


async def test_a_graphql_mutation_wakes_the_relay_through_its_service(
    slow_poll_server: RunningServer, http: httpx.AsyncClient
) -> None:
    """The GraphQL layer no longer wakes the relay itself: a sendMessage over HTTP, by the ordinary
    path and by the prepared-document path (the same document again), still reaches its
    subscriber promptly."""
    runtime = slow_poll_server.runtime
    client = GraphQLClient(http, slow_poll_server.url, slow_poll_server.settings)
    group = await conversation_service.do_create_group(runtime.deps.database, "1", "http", ["2"], max_members=10)
    async with runtime.deps.dispatcher.subscribe("2", group, events.MESSAGE_NEW) as subscription:
        for body in ("first: parsed and validated", "second: a prepared document"):
            data = await client.data(SEND, {"c": str(group), "m": str(uuid.uuid4()), "b": body}, user=1)
            event, _ = await next_event(subscription, f"sendMessage ({body})")
            new = events.parse(event)
            assert isinstance(new, events.MessageNew)
            assert (new.body, new.seq) == (body, data["sendMessage"]["message"]["seq"])
