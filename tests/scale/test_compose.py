"""docker-compose.scaled.yml describes the topology the proof runs (tests/scale/topology.py),
with settings chatgql accepts. No Docker engine is needed: the file is read as YAML (and,
where a compose client is installed, `config -q` validates it against the compose spec)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from urllib.parse import urlsplit

import pytest
import yaml

from chatgql.events.backends import cluster_nodes
from chatgql.settings import Settings, load_settings

from ..conftest import REPO
from .topology import Topology

SCALED = REPO / "docker-compose.scaled.yml"


def _services() -> dict[str, dict]:
    document = yaml.safe_load(SCALED.read_text())
    assert isinstance(document, dict) and isinstance(document.get("services"), dict), document
    return document["services"]


def _chatgql_services() -> dict[str, dict]:
    return {name: s for name, s in _services().items() if s.get("image") == "chatgql:local"}


def _role(service: dict) -> str:
    command = service["command"]
    assert command[0] == "chatgql", command
    if command[1] == "serve":
        assert "--no-relay" in command and "--no-consumer" in command, command
        return "api"
    return command[1]


def test_the_scaled_compose_file_runs_the_roles_the_proof_runs() -> None:
    roles = Counter(_role(s) for s in _chatgql_services().values())
    topology = Topology.__init__.__kwdefaults__
    assert roles == {
        "migrate": 1,
        "api": topology["apis"],
        "relay": topology["relays"],
        "consume": topology["consumers"],
    }


def test_every_process_of_the_scaled_deployment_has_the_same_valid_settings(monkeypatch) -> None:
    services = _services()
    environments = [s["environment"] for s in _chatgql_services().values()]
    assert all(e == environments[0] for e in environments), "every process must share shards, buckets, topic, bus"
    environment = {k: str(v) for k, v in environments[0].items()}
    fields = {name.lower() for name in Settings.model_fields}
    unknown = sorted(k for k in environment if not k.startswith("CHATGQL_") or k[8:].lower() not in fields)
    assert unknown == [], f"not fields of chatgql.settings.Settings: {unknown}"

    for key in list(os.environ):
        if key.startswith("CHATGQL_"):
            monkeypatch.delenv(key)
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()  # production: refuses the dev secret, a heartbeat too slow for the session, ...
    topology = Topology.__init__.__kwdefaults__
    assert settings.env == "production" and not settings.migrate_on_start
    assert settings.relay_shards == topology["shards"]
    assert settings.kafka_topic_partitions == topology["partitions"]
    assert str(settings.kafka_topic_partitions) == str(services["kafka"]["environment"]["KAFKA_NUM_PARTITIONS"])
    assert settings.kafka_session_timeout_ms <= 6000  # a dead consumer's partitions move within 10 s
    assert settings.max_delivery_delay_seconds > 10  # ... and its subscribers stay live through that
    assert settings.broadcast_url.startswith("redis+cluster://")
    assert {host for host, _ in cluster_nodes(settings.broadcast_url)} == {"redis-1", "redis-2", "redis-3"}
    assert {"redis-1", "redis-2", "redis-3", "redis-cluster-init"} <= set(services)
    assert settings.database_url is not None
    assert urlsplit(settings.database_url.get_secret_value()).hostname == "postgres"
    assert settings.kafka_bootstrap_servers == "kafka:9092"


def test_the_scaled_compose_file_starts_each_service_after_what_it_needs() -> None:
    services = _services()
    for name, service in services.items():
        for needed in service.get("depends_on") or {}:
            assert needed in services, f"{name} depends on {needed}, which is not a service"
        assert not service.get("profiles"), f"{name}: every service of this file runs"
    for name, service in _chatgql_services().items():
        needs = service["depends_on"]
        if name == "migrate":
            assert needs == {"postgres": {"condition": "service_healthy"}}
        else:
            assert needs["migrate"] == {"condition": "service_completed_successfully"}, name
            assert needs["redis-cluster-init"] == {"condition": "service_completed_successfully"}, name


@pytest.mark.parametrize("compose_file", ["docker-compose.yml", "docker-compose.scaled.yml"])
def test_a_compose_client_where_installed_accepts_the_file(compose_file: str) -> None:
    """Validates against the compose spec when a client is on PATH (docker-compose, Debian's
    package; or the docker CLI's compose plugin); otherwise the YAML checks above stand alone."""
    if shutil.which("docker-compose"):
        command = ["docker-compose"]
    elif (
        shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        command = ["docker", "compose"]
    else:
        yaml.safe_load((REPO / compose_file).read_text())
        return
    done = subprocess.run([*command, "-f", str(REPO / compose_file), "config", "-q"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
