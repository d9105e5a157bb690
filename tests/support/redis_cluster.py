"""A 3-master Redis Cluster of the tests' own on 127.0.0.1 (scripts/redis-cluster.sh), for the
cluster bus tests (tests/events/conftest.py's redis_cluster), the scaled topology's proof
(tests/scale/topology.py) and bench/redisbus.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
from pathlib import Path

from ..conftest import REPO, worker_ports

REDIS_CLUSTER_SH = REPO / "scripts" / "redis-cluster.sh"


class RedisCluster:
    """A 3-master Redis Cluster on 127.0.0.1 (scripts/redis-cluster.sh): ports, port+1, port+2."""

    def __init__(self, port: int, data_dir: Path) -> None:
        self.port = port
        self.data_dir = data_dir
        self.ports = [port, port + 1, port + 2]
        self.url = ""

    def _script(self, command: str, port: int | None = None) -> str:
        done = subprocess.run(
            [str(REDIS_CLUSTER_SH), command, "--port", str(port or self.port), "--dir", str(self.data_dir)],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        return done.stdout.strip()

    def start(self) -> None:
        self.url = self._script("start")

    def stop(self) -> None:
        self._script("stop")

    async def stop_node(self, port: int) -> None:
        await asyncio.to_thread(self._script, "stop-node", port)

    async def start_node(self, port: int) -> None:
        await asyncio.to_thread(self._script, "start-node", port)

    def _pid(self, port: int) -> int:
        return int((self.data_dir / str(port) / "redis.pid").read_text())

    def pause_node(self, port: int) -> None:
        """SIGSTOP: its connections stay open and say nothing (a stall, not a break)."""
        os.kill(self._pid(port), signal.SIGSTOP)

    def resume_node(self, port: int) -> None:
        os.kill(self._pid(port), signal.SIGCONT)


def free_cluster_port() -> int:
    """P with P..P+2 and their cluster bus ports P+10000..P+10002 free, below the ephemeral range
    (and below the ports of tests/conftest.py's free_port_pair); from this pytest-xdist worker's slice."""
    ports = worker_ports(20_000, 22_600)
    for _ in range(200):
        port = random.randrange(ports.start, ports.stop - 3)
        try:
            with contextlib.ExitStack() as stack:
                for p in (port, port + 1, port + 2, port + 10_000, port + 10_001, port + 10_002):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
    raise RuntimeError("no free ports for a redis cluster")
