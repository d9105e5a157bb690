"""Prometheus metrics of one process (its own registry, served at /metrics)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.outbox_rows = Gauge("chatgql_outbox_rows", "Events waiting in the outbox", registry=self.registry)
        self.outbox_oldest_age = Gauge(
            "chatgql_outbox_oldest_age_seconds", "Age of the oldest outbox row", registry=self.registry
        )
        self.events_relayed = Counter(
            "chatgql_events_relayed", "Events the relay published", registry=self.registry
        )
        self.consumer_lag = Gauge(
            "chatgql_consumer_lag", "Kafka records not yet handed to the bus", registry=self.registry
        )
        self.subscriptions_active = Gauge(
            "chatgql_subscriptions_active", "Live GraphQL subscriptions in this process", registry=self.registry
        )
        self.subscribers_dropped = Counter(
            "chatgql_subscribers_dropped", "Subscriptions ended because the client fell behind", registry=self.registry
        )

    def track(self, gauge: Gauge, read: Callable[[], float]) -> None:
        gauge.set_function(read)
