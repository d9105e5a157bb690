"""Prometheus metrics of one process (its own registry, served at /metrics)."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

# Waits that are latency for a request: a millisecond and up, to a second.
_WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

# How often the event loop's lag is sampled (watch_loop): a stall this long or longer is seen.
LOOP_LAG_EVERY_SECONDS = 0.025


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.outbox_rows = Gauge("chatgql_outbox_rows", "Events waiting in the outbox", registry=self.registry)
        self.outbox_oldest_age = Gauge(
            "chatgql_outbox_oldest_age_seconds", "Age of the oldest outbox row", registry=self.registry
        )
        self.events_relayed = Counter("chatgql_events_relayed", "Events the relay published", registry=self.registry)
        # Sharded relay (events/relay.py): what this process leads, and each shard's share.
        self.relay_shards_led = Gauge(
            "chatgql_relay_shards_led", "Outbox relay shards this process leads", registry=self.registry
        )
        self.relay_shard_events = Counter(
            "chatgql_relay_shard_events_relayed",
            "Events this process's relay published, by shard",
            ["shard"],
            registry=self.registry,
        )
        self.outbox_shard_rows = Gauge(
            "chatgql_outbox_shard_rows",
            "Events waiting in the outbox, by relay shard",
            ["shard"],
            registry=self.registry,
        )
        self.consumer_lag = Gauge(
            "chatgql_consumer_lag", "Kafka records not yet handed to the bus", registry=self.registry
        )
        self.consumer_own_records = Gauge(
            "chatgql_consumer_own_records",
            "Kafka records this process's relay published and handed on itself, not fetched back",
            registry=self.registry,
        )
        self.bus_published = Gauge(
            "chatgql_bus_published", "Events this process published on the bus", registry=self.registry
        )
        self.bus_received = Gauge(
            "chatgql_bus_received",
            "Events this process's bus feed received: on a cluster bus, only those of its buckets",
            registry=self.registry,
        )
        self.oidc_keys = Gauge(
            "chatgql_oidc_keys", "The identity provider's signing keys this process knows", registry=self.registry
        )
        self.oidc_key_fetches = Gauge(
            "chatgql_oidc_key_fetches",
            "Fetches of the identity provider's keys, successful or not",
            registry=self.registry,
        )
        self.oidc_key_fetch_failures = Gauge(
            "chatgql_oidc_key_fetch_failures",
            "Fetches of the identity provider's keys that failed",
            registry=self.registry,
        )
        self.subscriptions_active = Gauge(
            "chatgql_subscriptions_active", "Live GraphQL subscriptions in this process", registry=self.registry
        )
        self.subscribers_dropped = Counter(
            "chatgql_subscribers_dropped", "Subscriptions ended because the client fell behind", registry=self.registry
        )
        # Read-storm coalescing: flushes, and the markRead calls they answered
        # livepath: the delay bound (docs/design/scale/livepath.md)
        self.subscribers_delayed = Gauge(
            "chatgql_subscribers_delayed",
            "Subscriptions ended with DELIVERY_DELAYED: an event for them was older than the delay bound",
            registry=self.registry,
        )
        self.events_shed = Gauge(
            "chatgql_events_shed",
            "Events not delivered: older than the delay bound when dispatched",
            registry=self.registry,
        )
        self.mark_read_flushes = Counter(
            "chatgql_mark_read_flushes", "markRead flushes committed (one statement each)", registry=self.registry
        )
        self.mark_read_flushed_calls = Counter(
            "chatgql_mark_read_flushed_calls", "markRead calls answered by those flushes", registry=self.registry
        )

        # Webhooks (events/webhooks.py): counters of the process that delivers; the queue's gauges
        # are read from PostgreSQL by whichever process answers /metrics.
        self.webhooks_delivered = Counter(
            "chatgql_webhooks_delivered", "Webhook requests the endpoint took (2xx)", registry=self.registry
        )
        self.webhooks_retried = Counter(
            "chatgql_webhooks_retried", "Webhook attempts that failed and will be tried again", registry=self.registry
        )
        self.webhooks_dead_lettered = Counter(
            "chatgql_webhooks_dead_lettered",
            "Webhook events moved to the dead letters after their last attempt",
            registry=self.registry,
        )
        self.webhooks_pending = Gauge(
            "chatgql_webhooks_pending", "Events waiting in the webhook queue", registry=self.registry
        )
        self.webhooks_oldest_pending_age = Gauge(
            "chatgql_webhooks_oldest_pending_age_seconds",
            "Age of the oldest event waiting in the webhook queue (since its commit)",
            registry=self.registry,
        )
        self.webhooks_dead = Gauge(
            "chatgql_webhooks_dead", "Events in the webhook dead letters (webhook_dead)", registry=self.registry
        )

        self.send_batch_size = Histogram(
            "chatgql_send_batch_size",
            "Sends stored per transaction by group commit (1: a send that went alone)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=self.registry,
        )

        # Python's collector stops the event loop while it runs: every pause is latency for
        # whatever the process was doing (requests, relay, websockets).
        self.gc_pause = Histogram(
            "chatgql_gc_pause_seconds",
            "Garbage collector pauses, by generation",
            ["generation"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=self.registry,
        )
        self.gc_pause_longest = Gauge(
            "chatgql_gc_pause_longest_seconds",
            "The longest collector pause since the process started",
            registry=self.registry,
        )

        # Where a request's latency goes besides its own work: waiting for the event loop (any
        # callback, sampled by a timer: watch_loop), for a pooled connection, for the relay.
        self.loop_lag = Histogram(
            "chatgql_event_loop_lag_seconds",
            f"How late the event loop ran a timer due every {LOOP_LAG_EVERY_SECONDS:g} s (what every callback waited then)",
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.loop_lag_longest = Gauge(
            "chatgql_event_loop_lag_longest_seconds",
            "The event loop's longest lag since the process started",
            registry=self.registry,
        )
        self.pool_wait = Histogram(
            "chatgql_db_pool_wait_seconds",
            "How long taking a connection from the database pool waited",
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.relay_step = Histogram(
            "chatgql_relay_step_seconds",
            "The outbox relay's steps: read (a batch; the previous one deleted with it while a drain goes on), publish (until the broker acknowledged), delete (on its own)",
            ["step"],
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )

        self.gc_frozen = Gauge(
            "chatgql_gc_frozen_objects",
            "Objects frozen out of the collector's passes (collector.py)",
            registry=self.registry,
        )
        self.gc_frozen.set_function(gc.get_freeze_count)

    def mark_read_flushed(self, keys: int, calls: int) -> None:
        self.mark_read_flushes.inc()
        self.mark_read_flushed_calls.inc(calls)

    def track(self, gauge: Gauge, read: Callable[[], float]) -> None:
        gauge.set_function(read)

    def watch_gc(self) -> Callable[[], None]:
        """Time every collection (gc.callbacks); returns the function that stops it."""
        started = longest = 0.0

        def on_gc(phase: str, info: dict) -> None:
            nonlocal started, longest
            if phase == "start":
                started = time.perf_counter()
                return
            pause = time.perf_counter() - started
            self.gc_pause.labels(str(info["generation"])).observe(pause)
            if pause > longest:
                longest = pause
                self.gc_pause_longest.set(pause)

        gc.callbacks.append(on_gc)
        return lambda: gc.callbacks.remove(on_gc)

    def watch_loop(self, every: float = LOOP_LAG_EVERY_SECONDS) -> Callable[[], None]:
        """Sample the running event loop's lag: a timer due every `every` seconds notes how late it ran.
        Returns the function that stops it."""
        loop = asyncio.get_running_loop()
        longest = 0.0
        handle: asyncio.TimerHandle | None = None

        def tick(due: float) -> None:
            nonlocal handle, longest
            now = loop.time()
            lag = max(0.0, now - due)
            self.loop_lag.observe(lag)
            if lag > longest:
                longest = lag
                self.loop_lag_longest.set(lag)
            handle = loop.call_at(now + every, tick, now + every)

        first = loop.time() + every
        handle = loop.call_at(first, tick, first)

        def stop() -> None:
            if handle is not None:
                handle.cancel()

        return stop

    def watch_planner(self, stats: Any) -> None:
        """Report the plan-once executor's counters (engine/plan/: a PlanStats it keeps itself)."""
        self.registry.register(_PlannerCollector(stats))


class _PlannerCollector:
    def __init__(self, stats: Any) -> None:
        self.stats = stats

    def collect(self) -> Any:
        stats = self.stats
        yield CounterMetricFamily("chatgql_plans_built", "Execution plans compiled", value=stats.built)
        yield CounterMetricFamily(
            "chatgql_plans_prebuilt",
            "Execution plans with a field whose answer PostgreSQL builds (an inbox page's nodes: engine/prebuilt.py)",
            value=stats.prebuilt,
        )
        yield CounterMetricFamily(
            "chatgql_plan_executions",
            "Operations (HTTP requests, subscription events) run by plan",
            value=stats.executions,
        )
        fallbacks = CounterMetricFamily(
            "chatgql_plan_fallbacks",
            "Accepted documents run by graphql-core's executor instead, by reason",
            labels=["reason"],
        )
        for reason, count in sorted(stats.fallbacks.items()):
            fallbacks.add_metric([reason], count)
        yield fallbacks
