"""The quick loop (scripts/test-quick): the tests that need only PostgreSQL and Python.

With `--quick`, a test is deselected when it needs anything else: Kafka, Redis, a browser,
Node.js, the identity provider, or the fault and scale suites' own services. What a test needs
is read from the fixtures it asks for and from where it lives, so a new test that takes the
`kafka` fixture leaves the quick loop by itself. scripts/test-quick puts refusing stand-ins for
those programs first on PATH, so a test that needs one and is not deselected here fails, saying so.
"""

from __future__ import annotations

import pytest

# Fixtures that start (or stand for) a service other than PostgreSQL.
SERVICE_FIXTURES = frozenset(
    {
        "kafka",
        "kafka_server",
        "kafka_settings",
        "topic",
        "redis_url",
        "redis_cluster",
        "keycloak",
        "keycloak_url",
        "oidc_server",
        "fault_postgres",
        "fault_kafka",
        "fault_redis",
        "infra",
    }
)
# Folders and files whose tests drive a browser or Node.js, or run the fault and scale suites.
SERVICE_PATHS = (
    "tests/clients/",
    "tests/faults/",
    "tests/scale/",
    "tests/identity/",
    "tests/test_webchat_browser.py",
    "tests/test_demo.py",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="only the tests that need PostgreSQL alone (scripts/test-quick)",
    )


def needs_more_than_postgres(item: pytest.Item) -> bool:
    path = item.nodeid.split("::", 1)[0]
    return (
        item.get_closest_marker("kafka") is not None
        or path.startswith(SERVICE_PATHS)
        or not SERVICE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("quick"):
        return
    kept = [item for item in items if not needs_more_than_postgres(item)]
    deselected = [item for item in items if needs_more_than_postgres(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
