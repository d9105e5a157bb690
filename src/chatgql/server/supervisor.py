"""`chatgql serve` with several workers: what its supervisor process does beside uvicorn's.

uvicorn's supervisor binds the port and keeps N worker processes serving it (restarting one
that dies). Beside that, in a thread with an event loop of its own, this process:

- owns the database: the embedded PostgreSQL is started (and started again when it dies,
  EmbeddedWatch) and migrated here, once, before any worker starts;
- serves the hub its workers share (events/hub.py): with no Redis bus configured, live
  events reach every subscriber through it whichever worker holds its websocket, and rate
  limits hold for the user across the workers; with one, those go through Redis. Either way
  the workers' sends wake the relay through it, and their /healthz asks it whether the
  database this process owns is down;
- runs the one outbox relay, the one Kafka consumer and the webhooks of the deployment: the
  workers run none of them, whatever their count.

The workers are told all this through their environment (their settings), and die with this
process: a SIGKILLed supervisor leaves no worker holding the port (worker_dies_with_supervisor).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from ..settings import Settings

if TYPE_CHECKING:
    from ..db.embedded import EmbeddedPostgres

log = logging.getLogger(__name__)

SUPERVISOR_PID = "CHATGQL_SUPERVISOR_PID"
# How long the workers' start waits for the Kafka consumer to be assigned its partitions.
CONSUMER_ASSIGNED_SECONDS = 30.0
PR_SET_PDEATHSIG = 1


class Supervisor:
    """The supervisor's own runtime, in a thread: start() returns once it serves (or raises)."""

    def __init__(
        self,
        settings: Settings,
        database_url: str,
        running: Callable[..., AbstractAsyncContextManager[Any]],
        *,
        embedded: EmbeddedPostgres | None = None,
    ) -> None:
        """running: app.running (given by the command line: nothing else imports app.py)."""
        self.settings = settings
        self._running = running
        self.database_url = database_url
        self.embedded = embedded
        self._dir = tempfile.mkdtemp(prefix="chatgql-hub-")
        self.hub_path = str(Path(self._dir) / "hub.sock")
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    @property
    def bus_url(self) -> str:
        """The bus the workers (and this process) use: the hub, unless a Redis bus is configured."""
        from ..events.hub import hub_url

        return hub_url(self.hub_path) if self.settings.workers_share_a_hub else self.settings.broadcast_url

    def worker_environment(self) -> dict[str, str]:
        """What the workers' settings must say beside the configured ones."""
        from ..events.hub import hub_url

        return {
            "CHATGQL_DATABASE_URL": self.database_url,
            "CHATGQL_MIGRATE_ON_START": "false",
            "CHATGQL_BROADCAST_URL": self.bus_url,
            "CHATGQL_RUN_RELAY": "false",
            "CHATGQL_RUN_CONSUMER": "false",
            "CHATGQL_RUN_WEBHOOKS": "false",
            "CHATGQL_WORKERS": str(self.settings.workers),
            "CHATGQL_SUPERVISOR_HUB": hub_url(self.hub_path),
            SUPERVISOR_PID: str(os.getpid()),
        }

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chatgql-supervisor", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._failure is not None:
            raise self._failure

    def stop(self, timeout: float = 15.0) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)
        with contextlib.suppress(OSError):
            os.rmdir(self._dir)

    def _run(self) -> None:
        import uvloop

        try:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(self._serve())
        except BaseException as error:  # noqa: BLE001 - handed to start(), or ends the server
            if not self._started.is_set():
                self._failure = error
            else:
                # Workers without their relay or hub would serve sends that never go live: stop
                # the whole server (uvicorn's supervisor takes SIGTERM), for its own supervisor
                # (systemd, Kubernetes) to start it again.
                log.exception("the supervisor's relay, consumer or hub failed; stopping the server")
                os.kill(os.getpid(), signal.SIGTERM)
        finally:
            self._started.set()

    async def _serve(self) -> None:
        from ..db.embedded import EmbeddedWatch
        from ..edge.ratelimit import RateLimiter
        from ..events.hub import Hub

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        settings = self.settings.model_copy(
            update={
                "database_url": SecretStr(self.database_url),
                "migrate_on_start": False,
                "broadcast_url": self.bus_url,
            }
        )
        async with contextlib.AsyncExitStack() as stack:
            watch = None
            if self.embedded is not None:
                watch = EmbeddedWatch(self.embedded)
                watching = asyncio.create_task(watch.run(), name="embedded-watch")
                stack.callback(watching.cancel)
            hub = await stack.enter_async_context(Hub(self.hub_path, limiter=RateLimiter).serving())
            if watch is not None:
                hub.trouble = watch.trouble
            runtime = await stack.enter_async_context(self._running(settings, api=False, announce=False))
            hub.on_wake = runtime.deps.wakeup.wake
            if runtime.consumer is not None:
                try:
                    async with asyncio.timeout(CONSUMER_ASSIGNED_SECONDS):
                        await runtime.consumer.assigned.wait()
                except TimeoutError:
                    log.warning(
                        "the Kafka consumer has no partitions after %.0f s; starting the workers anyway",
                        CONSUMER_ASSIGNED_SECONDS,
                    )
            self._started.set()
            await self._stop.wait()


def worker_dies_with_supervisor() -> None:
    """In a worker: ask Linux to SIGKILL this process when its supervisor dies, as a SIGKILL of the
    supervisor (an OOM kill, a kill of the service) would otherwise leave workers serving the port
    with nobody relaying their sends. Nothing elsewhere (the supervisor's stop ends them)."""
    supervisor = os.environ.get(SUPERVISOR_PID)
    if supervisor is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        log.warning("could not ask to die with the supervisor (errno %d)", ctypes.get_errno())
    if os.getppid() != int(supervisor):  # it died before prctl took effect
        os._exit(1)
