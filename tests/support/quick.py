"""The quick loop (scripts/test-quick): the tests that need only PostgreSQL and Python.

With `--quick`, a test is deselected when it needs anything else: Kafka, Redis, a browser,
Node.js, the identity provider, or the fault and scale suites' own services; and when it is one
of the long proofs (marked slow), which the full suite runs. What a test needs
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
# Folders and files whose tests drive a browser or Node.js, run the fault and scale suites, or start
# servers of their own by the dozen.
SERVICE_PATHS = (
    "tests/adversarial/",  # each starts production servers of its own, and measures a bystander
    "tests/events/",  # the live path: Kafka, Redis and worker processes, mostly
    "tests/clients/",
    "tests/faults/",
    "tests/scale/",
    "tests/identity/",
    "tests/test_webchat_browser.py",
    "tests/test_demo.py",
    # real `chatgql serve` processes, started, killed and restarted, and the benchmark's smoke runs
    "tests/test_bench_smoke.py",
    "tests/test_embedded.py",
    "tests/test_operator_while_serving.py",
    "tests/test_settings_cli.py",
)


MARKERS = {
    "kafka": "needs a real Kafka broker",
    "browser": "drives a real browser (Chromium or Firefox)",
    "node": "runs Node.js",
    "slow": "a long proof (generated documents, storms, a 100,000-member group): the full suite's, not the quick loop's",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, description in MARKERS.items():
        if name != "kafka":  # pyproject.toml registers it
            config.addinivalue_line("markers", f"{name}: {description}")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="only the tests that need PostgreSQL alone (scripts/test-quick)",
    )


def needs_more_than_postgres(item: pytest.Item) -> bool:
    path = item.nodeid.split("::", 1)[0]
    return (
        any(item.get_closest_marker(name) is not None for name in MARKERS)
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
