"""create_app(settings) -> Starlette, and the one lifespan that owns every resource.

Opened in order, closed in reverse: database (embedded or configured) and
migrations, connection pool, broadcast bus, dispatcher feed, Kafka producer, relay,
Kafka consumer. Background loops are tasks of the lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import io
import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Match, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send

from .. import db
from ..db import Database
from ..db.embedded import EmbeddedWatch
from ..edge.bans import keep_ban_list
from ..edge.demo import demo_routes
from ..edge.jwks import KeySet
from ..engine import validation
from ..events.bus import Bus, feed_dispatcher
from ..events.consumer import BusSink, DispatchSink, FanoutConsumer, Sink
from ..events.dispatch import Dispatcher, MembershipCache
from ..events.ephemeral import EphemeralPublisher
from ..events.hub import HubStore
from ..events.presence import Presence, presence_for
from ..events.publish import BusPublisher, DispatchPublisher, KafkaPublisher, Publisher, ensure_topic
from ..events.relay import OutboxRelay
from ..events.wakeup import RelayWakeup
from ..events.webhooks import Deliverer, check_resolved, parse_kinds, parse_secret
from ..graphql.context import Deps
from ..graphql.graphiql import ASSETS_PATH
from ..graphql.operator import PATH as OPERATOR_PATH
from ..graphql.operator import OperatorGraphQL
from ..graphql.schema import ChatGraphQL
from ..runtime import collector, tracing
from ..services.beforesend import BeforeSendHook
from ..services.delivery_coalescing import DeliveryCoalescer
from ..services.disappearing import SOURCE as _MESSAGE_EXPIRY  # noqa: F401 (each source registers at import)
from ..services.erase import retention_loop
from ..services.groupcommit import SendBatcher
from ..services.presence import PresenceTracker
from ..services.read_coalescing import ReadCoalescer
from ..services.saved import SOURCE as _REMINDERS  # noqa: F401
from ..services.scheduled import SOURCE as _SCHEDULED_MESSAGES  # noqa: F401
from ..services.scheduler import Scheduler, registered
from ..settings import Settings
from ..store import conversations, health, outbox, webhooks
from . import logs
from .heap import HeapTrimmer
from .metrics import Metrics

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Everything one chatgql process runs; filled in by `running()`."""

    settings: Settings
    deps: Deps
    metrics: Metrics = field(default_factory=Metrics)
    database_url: str | None = None
    relay: OutboxRelay | None = None
    scheduler: Scheduler | None = None  # where the relay runs: fires due work (services/scheduler.py)
    consumer: FanoutConsumer | None = None
    webhooks: Deliverer | None = None
    presence: Presence | None = None
    bus_ready: asyncio.Event = field(default_factory=asyncio.Event)
    bus: Bus | None = None
    embedded: EmbeddedWatch | None = None  # the embedded PostgreSQL's, when this process runs one
    hub: HubStore | None = None  # a worker's line to its supervisor (events/hub.py), when it has one


async def _database_url(settings: Settings, runtime: Runtime, stack: contextlib.AsyncExitStack) -> str:
    """The configured database's URL, or the embedded server's, started and watched:
    when it dies it is started again (EmbeddedWatch)."""
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()
    server, url = await asyncio.to_thread(db.start_embedded_postgres, settings.data_dir)
    stack.push_async_callback(asyncio.to_thread, server.cleanup)
    runtime.embedded = EmbeddedWatch(server)
    await _task(stack, runtime.embedded.run(), "embedded-postgres-watch")  # stopped before the server
    return url


async def _open(database: Database, *, patient: bool) -> None:
    """Open the pool. A worker of `chatgql serve` (patient) waits for a database that does not
    answer yet, as one (re)started while its supervisor's PostgreSQL is down must: uvicorn stops
    the whole server when a worker fails to start. Alone, a process fails at once instead."""
    waited = False
    while True:
        try:
            await database.open()
            break
        except (OSError, TimeoutError, asyncpg.CannotConnectNowError, asyncpg.ConnectionDoesNotExistError) as error:
            if not patient:
                raise
            if not waited:
                log.warning("the database does not answer (%r); waiting for it before serving", error)
                waited = True
            await asyncio.sleep(0.5)
    if waited:
        log.warning("the database answers; serving")


# How long a background task has to end once cancelled (its own bounded clean-up included: the
# consumer's final commit and stop take at most 20 s) before it is taken to have lost the
# cancellation, logged with where it is, and cancelled again.
TASK_STOP_SECONDS = 30.0


async def _task(stack: contextlib.AsyncExitStack, coro, name: str) -> None:
    task = asyncio.create_task(coro, name=name)

    async def stop() -> None:
        task.cancel()
        # A dependency that swallows a cancellation (Python 3.11's wait_for, redis-py now and
        # then) would otherwise leave the task running and this shutdown waiting for it forever.
        while not (await asyncio.wait({task}, timeout=TASK_STOP_SECONDS))[0]:
            where = io.StringIO()
            task.print_stack(limit=40, file=where)
            log.warning(
                "%s did not end within %s s of its cancellation; cancelling it again\n%s",
                name,
                TASK_STOP_SECONDS,
                where.getvalue(),
            )
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    stack.push_async_callback(stop)


@contextlib.asynccontextmanager
async def running(
    settings: Settings, deps: Deps | None = None, *, api: bool = True, announce: bool = True
) -> AsyncIterator[Runtime]:
    """Open everything this process needs (api: serve subscriptions too).

    deps, when given, is filled in as resources open (the GraphQL view holds it). announce: log
    the start-up line (the supervisor of several workers says one line for all, cli.py).
    """
    deps = deps or Deps(settings=settings, database=None)  # type: ignore[arg-type]
    runtime = Runtime(settings=settings, deps=deps)
    metrics = runtime.metrics
    async with contextlib.AsyncExitStack() as stack:
        tracing.start(settings.tracing, "chatgql", settings.tracing_protocol, settings.tracing_frames_per_event)
        stack.callback(tracing.stop)  # last: what the others' closing traced is exported
        stack.callback(metrics.watch_gc())
        stack.callback(metrics.watch_loop())
        stack.callback(
            collector.freeze_survivors(
                settings.gc_young_threshold, settings.gc_freeze_every_young, run=validation.between_validations
            )
        )
        url = runtime.database_url = await _database_url(settings, runtime, stack)
        if settings.migrate_on_start:
            await db.upgrade(url)
        database = Database(
            url,
            max_size=settings.db_pool_size + settings.db_max_overflow,
            min_size=settings.db_pool_size,
            on_wait=metrics.pool_wait.observe,
        )
        await _open(database, patient=settings.supervisor_hub is not None)
        stack.push_async_callback(database.close)
        runtime.deps.database = database
        wakeup = runtime.deps.wakeup = RelayWakeup(database)
        stack.push_async_callback(wakeup.close)
        if settings.mark_read_coalescing:
            coalescer = ReadCoalescer(
                database,
                window_seconds=settings.mark_read_window_ms / 1000,
                max_keys=settings.mark_read_max_batch,
                on_flush=metrics.mark_read_flushed,
            )
            coalescer.start()
            stack.push_async_callback(coalescer.close)  # drained before the pool closes
            runtime.deps.read_coalescer = coalescer
        if settings.mark_delivered_coalescing:
            delivered = DeliveryCoalescer(
                database,
                whole_up_to=settings.big_group_threshold,
                window_seconds=settings.mark_read_window_ms / 1000,
                max_keys=settings.mark_read_max_batch,
            )
            delivered.start()
            stack.push_async_callback(delivered.close)
            runtime.deps.delivery_coalescer = delivered
        if settings.send_group_commit:
            batcher = runtime.deps.send_batcher = SendBatcher(
                database, max_batch=settings.send_batch_max, on_batch=metrics.send_batch_size.observe
            )
            stack.push_async_callback(batcher.close)

        if settings.before_send_url is not None and settings.before_send_secret is not None:
            await check_resolved(settings.before_send_url, settings.webhook_allow_private)
            runtime.deps.before_send = await stack.enter_async_context(
                BeforeSendHook(
                    settings.before_send_url,
                    parse_secret(settings.before_send_secret.get_secret_value()),
                    timeout_seconds=settings.before_send_timeout_seconds,
                    fail_open=settings.before_send_fail_open,
                    max_body_chars=settings.max_body_chars,
                )
            )
        if deps.rate_limit_store is not None:
            await deps.rate_limit_store.start()
            stack.push_async_callback(deps.rate_limit_store.close)
        if api and settings.supervisor_hub is not None:  # a worker of `chatgql serve`
            hub = deps.rate_limit_store if isinstance(deps.rate_limit_store, HubStore) else None
            if hub is None:
                hub = HubStore(settings.supervisor_hub, settings.shared_rate_limit_timeout_seconds)
                await hub.start()
                stack.push_async_callback(hub.close)
            runtime.hub = hub
            if not settings.run_relay:
                wakeup.remote = hub.wake  # its supervisor runs the relay
        bus = runtime.bus = Bus(settings.broadcast_url, settings.bus_buckets)
        await bus.connect()
        stack.push_async_callback(bus.disconnect)
        metrics.track(metrics.bus_published, lambda: sum(bus.events_published.values()))
        metrics.track(metrics.bus_received, lambda: sum(bus.events_received.values()))

        if settings.webhook_url is not None or api:  # who is online: presence, and the webhooks' recipients
            presence = runtime.presence = presence_for(settings.broadcast_url, settings.presence_heartbeat_seconds)
            if api:
                runtime.deps.presence = presence
                await _task(stack, presence.run(), "presence")
            else:  # it only asks (the deliverer of `chatgql webhooks`)
                stack.push_async_callback(presence.close)

        live: Dispatcher | None = None  # this process's, when it serves subscriptions
        if api:
            big = settings.big_group_threshold

            async def load_members(
                conversation_id: int, subscribed: list[str]
            ) -> tuple[int, list[str], dict[str, int]] | None:
                async with database.connection() as conn:
                    row = await conversations.live_members(conn, conversation_id, big, subscribed)
                if row is None:
                    return None
                return row["member_count"], row["user_ids"], dict(zip(row["late_ids"], row["late_from"], strict=True))

            dispatcher = Dispatcher(
                MembershipCache(load_members, whole_up_to=big),
                settings.subscriber_buffer,
                on_drop=metrics.subscribers_dropped.inc,
                interest=bus if bus.sharded else None,  # a cluster bus listens only to the buckets needed
                read_interval=settings.big_group_read_interval_seconds,
                max_delay=settings.max_delivery_delay_seconds,
            )
            runtime.deps.dispatcher = live = dispatcher
            dispatcher.on_ban = runtime.deps.bans.learn
            metrics.track(metrics.subscriptions_active, lambda: dispatcher.active)
            metrics.track(metrics.subscribers_delayed, lambda: dispatcher.delayed)
            metrics.track(metrics.events_shed, lambda: dispatcher.shed)
            await _task(
                stack,
                feed_dispatcher(bus, dispatcher, runtime.bus_ready, heartbeat_seconds=settings.bus_heartbeat_seconds),
                "bus-feed",
            )
            async with asyncio.timeout(10):
                await runtime.bus_ready.wait()
            # Mass disconnects leave glibc holding what the connections used (see heap.py).
            await _task(stack, HeapTrimmer().run(), "heap-trim")
            await _task(stack, keep_ban_list(database, runtime.deps.bans, settings.ban_refresh_seconds), "ban-list")
            if settings.oidc_issuer is not None:
                runtime.deps.keys = await stack.enter_async_context(
                    KeySet(
                        settings.oidc_issuer,
                        settings.oidc_jwks_url,
                        refresh_seconds=settings.oidc_jwks_refresh_seconds,
                        min_refetch_seconds=settings.oidc_jwks_min_refetch_seconds,
                        timeout_seconds=settings.oidc_jwks_timeout_seconds,
                    )
                )
                keys = runtime.deps.keys
                metrics.track(metrics.oidc_keys, lambda: len(keys.keys))
                metrics.track(metrics.oidc_key_fetches, lambda: keys.fetches)
                metrics.track(metrics.oidc_key_fetch_failures, lambda: keys.failures)

        kafka = settings.kafka_bootstrap_servers
        # One process (memory://) hands events decoded straight to its Dispatcher: no JSON, no bus.
        direct = live if live is not None and urlsplit(settings.broadcast_url).scheme == "memory" else None
        if live is not None:  # typing: the bus only, never PostgreSQL or the outbox
            ephemeral = runtime.deps.typing = EphemeralPublisher(bus, direct)
            if runtime.deps.presence is not None:  # presence changes too, and last seen (services/presence.py)
                deps = runtime.deps
                tracker = PresenceTracker(
                    database,
                    runtime.deps.presence.online,
                    runtime.deps.presence.settled,
                    ephemeral.publish,
                    lambda: deps.clock(),
                )
                runtime.deps.presence.on_change = tracker.changed
                stack.push_async_callback(tracker.close)
        own_producer: KafkaPublisher | None = None
        if settings.run_relay:
            publisher: Publisher
            if kafka:
                if settings.kafka_create_topic:
                    await ensure_topic(
                        kafka, settings.kafka_topic, settings.kafka_topic_partitions, settings.kafka_topic_replication
                    )
                producer = KafkaPublisher(kafka, settings.kafka_topic)
                await producer.start()
                stack.push_async_callback(producer.stop)
                publisher = own_producer = producer
            elif direct is not None:
                publisher = DispatchPublisher(direct)
            else:
                publisher = BusPublisher(bus)

            def relayed(shard: int, count: int) -> None:
                metrics.events_relayed.inc(count)
                metrics.relay_shard_events.labels(str(shard)).inc(count)

            relay = runtime.relay = OutboxRelay(
                database,
                publisher,
                shards=settings.relay_shards,
                poll_seconds=settings.relay_poll_seconds,
                standby_seconds=settings.relay_standby_seconds,
                on_relayed=relayed,
                on_step=lambda step, seconds: metrics.relay_step.labels(step).observe(seconds),
                local=isinstance(publisher, DispatchPublisher),
                webhook_kinds=parse_kinds(settings.webhook_events) if settings.webhook_url else (),
            )
            metrics.track(metrics.relay_shards_led, lambda: len(relay.shards_led))
            wakeup.local = runtime.relay
            await _task(stack, runtime.relay.run(), "outbox-relay")
            scheduler = runtime.scheduler = Scheduler(
                database,
                registered(),
                clock=lambda: deps.clock(),  # read at each use: a test may replace Deps.clock
                poll_seconds=settings.scheduler_poll_seconds,
            )
            await _task(stack, scheduler.run(), "scheduler")
            if settings.retention_days is not None:
                retention = retention_loop(
                    database,
                    settings.retention_days,
                    interval_seconds=settings.retention_interval_seconds,
                    batch_size=settings.erase_batch_size,
                )
                await _task(stack, retention, "retention")

        if kafka and settings.run_consumer:
            sink: Sink = DispatchSink(direct) if direct is not None else BusSink(bus)
            consumer = runtime.consumer = FanoutConsumer(
                kafka,
                settings.kafka_topic,
                settings.kafka_group,
                sink,
                offset_reset=settings.kafka_offset_reset,
                session_timeout_ms=settings.kafka_session_timeout_ms,
                heartbeat_interval_ms=settings.kafka_heartbeat_interval_ms,
            )
            metrics.track(metrics.consumer_lag, lambda: consumer.lag)
            metrics.track(metrics.consumer_own_records, lambda: consumer.own_records)
            if own_producer is not None and runtime.relay is not None and direct is not None:
                # One process (memory://): its relay hands its acknowledged records on itself while it is
                # the only relay. With a Redis bus the group's partitions are shared between processes'
                # consumers: everything goes the fetch's way there.
                led_here = runtime.relay
                consumer.sole = lambda: led_here.is_leader
                own_producer.on_acked = consumer.deliver_own
                led_here.on_hand_back = consumer.release
            await _task(stack, consumer.run(), "kafka-consumer")

        if settings.webhook_url is not None and settings.run_webhooks:
            await _start_webhooks(settings, runtime, url, stack)

        if announce:
            log.info("%s", startup_line(settings, api=api))
        yield runtime


async def _start_webhooks(settings: Settings, runtime: Runtime, url: str, stack: contextlib.AsyncExitStack) -> None:
    """The webhook deliverer: a task of its own with a pool of its own (events/webhooks.py)."""
    assert settings.webhook_url is not None and settings.webhook_secret is not None and runtime.presence is not None
    await check_resolved(settings.webhook_url, settings.webhook_allow_private)
    metrics = runtime.metrics
    deliverer = runtime.webhooks = Deliverer(
        url,
        runtime.presence,
        url=settings.webhook_url,
        secret=parse_secret(settings.webhook_secret.get_secret_value()),
        big_group_threshold=settings.big_group_threshold,
        timeout_seconds=settings.webhook_timeout_seconds,
        max_attempts=settings.webhook_max_attempts,
        backoff_seconds=settings.webhook_backoff_seconds,
        max_backoff_seconds=settings.webhook_max_backoff_seconds,
        concurrency=settings.webhook_concurrency,
        poll_seconds=settings.webhook_poll_seconds,
        standby_seconds=settings.relay_standby_seconds,
        db_connections=settings.webhook_db_connections,
        on_delivered=metrics.webhooks_delivered.inc,
        on_retried=metrics.webhooks_retried.inc,
        on_dead=metrics.webhooks_dead_lettered.inc,
    )
    await _task(stack, deliverer.run(), "webhooks")


def startup_line(settings: Settings, *, api: bool = True) -> str:
    """What this process serves and what it runs on, in one line (no passwords)."""
    if api:
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        doing = f"serving http://{host}:{settings.port}/graphql"
    else:
        doing = "running " + " and ".join(
            role
            for role, on in (
                ("the relay", settings.run_relay),
                ("the consumer", settings.run_consumer),
                ("the webhooks", settings.run_webhooks and settings.webhook_url is not None),
            )
            if on
        )
    if settings.database_url is None:
        database = f"embedded at {settings.data_dir.resolve()}"
    else:
        database = _without_password(settings.database_url.get_secret_value())
    kafka = settings.kafka_bootstrap_servers or "none"
    bus = _without_password(settings.broadcast_url)
    if api and settings.workers_share_a_hub:
        bus = "the supervisor's hub"
    line = f"{doing} · database: {database} · bus: {bus} · kafka: {kafka}"
    return f"{line} · workers: {settings.workers}" if api else line


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    if parts.username:
        netloc = f"{parts.username}@{netloc}"
    return urlunsplit(parts._replace(netloc=netloc))


class ChatApp(Starlette):
    """Starlette, with the two kinds of traffic that matter handed straight to their handler:

    - POST /graphql (nearly every request) goes to the GraphQL view, which answers
      every outcome itself: routing and the middleware stack would only cost time.
    - A websocket matching a WebSocketRoute goes to that route: an idle websocket
      keeps its whole call chain alive while it is open, and Starlette's error and
      exception middleware and its router add six coroutine frames (~3 KB) to each
      while giving a websocket session nothing. The scope gets what the router
      would have set.

    Everything else goes through Starlette.
    """

    def __init__(self, graphql: ChatGraphQL, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.graphql = graphql

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/graphql":
            scope["app"] = self
            if tracing.ON:
                await tracing.http_request(scope, receive, send, self.graphql)
                return
            await self.graphql(scope, receive, send)
            return
        if scope["type"] == "websocket":
            for route in self.router.routes:
                if isinstance(route, WebSocketRoute):
                    match, child_scope = route.matches(scope)
                    if match is Match.FULL:
                        scope["app"] = self
                        scope.setdefault("router", self.router)
                        scope["route"] = route
                        scope.update(child_scope)
                        await route.handle(scope, receive, send)
                        return
        await super().__call__(scope, receive, send)


def create_app(settings: Settings) -> Starlette:
    logs.redact_query_strings()
    deps = Deps(settings=settings, database=None)  # type: ignore[arg-type]
    graphql = ChatGraphQL(deps)
    state: dict[str, Runtime] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with running(settings, deps, announce=settings.supervisor_hub is None) as runtime:
            runtime.metrics.watch_planner(graphql.planner.stats)
            state["runtime"] = runtime
            app.state.runtime = runtime
            yield

    async def healthz(request: Request) -> Response:
        """Alive, unless this process's own database is down (being started again): a
        supervisor that watches liveness restarts the process when that does not succeed."""
        runtime = state.get("runtime")
        if runtime is not None and runtime.hub is not None:  # a worker: its supervisor owns the database
            trouble = await runtime.hub.supervisor_trouble()
        else:
            watch = runtime.embedded if runtime is not None else None
            trouble = watch.trouble() if watch is not None else None
        if trouble is not None:
            return PlainTextResponse(trouble, status_code=503)
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> Response:
        runtime = state.get("runtime")
        checks: dict[str, bool] = {}
        if runtime is not None:
            try:
                async with runtime.deps.database.connection() as conn:
                    await health.ping(conn)
                checks["database"] = True
            except Exception:
                checks["database"] = False
            if runtime.consumer is not None:
                checks["kafka_consumer"] = runtime.consumer.assigned.is_set()
        ready = runtime is not None and all(checks.values())
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    async def metrics_endpoint(request: Request) -> Response:
        if not metrics_allowed(settings, request.headers.get("authorization")):
            return PlainTextResponse("Not Found", status_code=404)  # what any unknown path answers
        runtime = state["runtime"]
        metrics = runtime.metrics
        try:
            async with runtime.deps.database.connection() as conn:
                backlog = {row.shard: row for row in await outbox.backlog(conn, settings.relay_shards)}
            metrics.outbox_rows.set(sum(row.rows for row in backlog.values()))
            metrics.outbox_oldest_age.set(max((row.oldest_age for row in backlog.values()), default=0))
            for shard in range(settings.relay_shards):
                metrics.outbox_shard_rows.labels(str(shard)).set(backlog[shard].rows if shard in backlog else 0)
            if settings.webhook_url is not None:
                async with runtime.deps.database.connection() as conn:
                    pending = await webhooks.backlog(conn)
                metrics.webhooks_pending.set(pending.pending)
                metrics.webhooks_oldest_pending_age.set(pending.oldest_age)
                metrics.webhooks_dead.set(pending.dead)
        except Exception:
            log.warning("could not read the outbox or webhook backlog", exc_info=True)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    graphiql = [Route(f"{ASSETS_PATH}/{{name}}", graphql.graphiql.asset)] if graphql.graphiql else []
    operator = []
    if settings.operator_token is not None:
        view = OperatorGraphQL(settings.operator_token.get_secret_value(), lambda: deps.database)
        operator = [Route(OPERATOR_PATH, view, methods=["POST"])]
    return ChatApp(
        graphql,
        routes=[
            *graphiql,
            *demo_routes(settings),
            *operator,
            # PUT and DELETE: graphql-sse's single connection mode (engine/streams.py)
            Route("/graphql", graphql, methods=["GET", "POST", "PUT", "DELETE"]),
            WebSocketRoute("/graphql", graphql),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics_endpoint),
        ],
        lifespan=lifespan,
    )


def metrics_allowed(settings: Settings, authorization: str | None) -> bool:
    """/metrics with CHATGQL_METRICS_TOKEN: only for `Bearer <it>`; without: development only."""
    if settings.metrics_token is None:
        return settings.env == "development"
    expected = f"Bearer {settings.metrics_token.get_secret_value()}".encode()
    return hmac.compare_digest((authorization or "").strip().encode("utf-8", "surrogateescape"), expected)


def create_app_from_environment() -> Starlette:
    """The app of one `chatgql serve --workers N` worker: settings from the environment."""
    from ..settings import load_settings
    from .supervisor import worker_dies_with_supervisor

    worker_dies_with_supervisor()
    app = create_app(load_settings())
    keep_startup_objects_out_of_gc()
    return app


def keep_startup_objects_out_of_gc() -> None:
    """What exists once the app is built lives as long as the process: see collector.py."""
    collector.keep_startup_objects_out_of_gc()
    # The event loop's thread gets the GIL back from the validation thread (engine/validation.py,
    # the process's only busy thread) within 1 ms instead of 5: a request waits less behind it.
    sys.setswitchinterval(0.001)
