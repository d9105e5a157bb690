"""Fixtures of the fault suite: its own restartable PostgreSQL, stoppable
Kafka and Redis (session-wide, started only when a fault test runs), and the
closing table of every scenario's counts (also in tests/faults/out/results.md).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.infra import OUT, FaultKafka, FaultPostgres, FaultRedis
from .scenario import RESULTS, Infra, table, write_results


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "faults: fault injection (kills, restarts, outages) against real chatgql processes"
    )


@pytest.fixture(autouse=True)
def clean_database() -> None:
    """The fault scenarios each get a fresh database of their own PostgreSQL:
    no need for the shared test database (nor to empty it)."""


@pytest.fixture(scope="session")
def fault_postgres() -> Iterator[FaultPostgres]:
    pg = FaultPostgres(Path(tempfile.mkdtemp(prefix="chatgql-faults-pg-")))
    try:
        yield pg
    finally:
        pg.close()


@pytest.fixture(scope="session")
def fault_kafka() -> Iterator[FaultKafka]:
    kafka = FaultKafka(Path(tempfile.mkdtemp(prefix="chatgql-faults-kafka-")))
    try:
        kafka.start()
        yield kafka
    finally:
        kafka.close()


@pytest.fixture(scope="session")
def fault_redis() -> Iterator[FaultRedis]:
    redis = FaultRedis(OUT / "redis.log")
    try:
        yield redis
    finally:
        redis.close()


@pytest.fixture(scope="session")
def infra(fault_postgres: FaultPostgres, fault_kafka: FaultKafka, fault_redis: FaultRedis) -> Infra:
    return Infra(fault_postgres, fault_kafka, fault_redis)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    # In a pytest-xdist worker nobody sees this: the controller prints results.md (tests/conftest.py).
    if not RESULTS or hasattr(config, "workerinput"):
        return
    path = write_results()
    terminalreporter.write_sep("=", "fault suite: counts per scenario")
    terminalreporter.write_line(table(RESULTS))
    for r in RESULTS:
        for failure in r.failures:
            terminalreporter.write_line(f"{r.scenario} FAILED: {failure[:500]}")
    terminalreporter.write_line(f"(also in {path})")
