"""One data directory, one owner.

The process that runs the embedded PostgreSQL of a data directory holds an
exclusive lock on DATA_DIR/chatgql.lock (flock) until it stops the server or
exits; the kernel drops the lock when the process dies, however it dies. A
second chatgql on the same directory is refused: it would attach to the
running server and serve HTTP, but live events stay in the process whose relay
holds the outbox (the in-process bus reaches only that process's subscribers).

`chatgql serve --workers N` takes the lock once, in the supervisor; its workers
get CHATGQL_DATABASE_URL and never start an embedded server.

The owner publishes how to reach its server in DATA_DIR/chatgql.server (its pid
and the URL; readable by its user only, replaced whole, removed when it stops):
the operator's commands (erase-user, retention run, webhooks dead | replay,
migrate) connect to that server instead of being refused (`published()`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import tempfile
from pathlib import Path

import psutil

LOCK_NAME = "chatgql.lock"
SERVER_NAME = "chatgql.server"

# Locks this process holds: resolved data dir -> [fd, holders]. A flock is held by an
# open file, so a second open of the lock file in this process would be refused too;
# one process taking the same directory twice (cli, then its own lifespan) shares it.
_held: dict[Path, list[int]] = {}


class DataDirInUse(RuntimeError):
    """Another process owns the data directory."""

    def __init__(self, data_dir: Path, owner: str) -> None:
        self.data_dir = data_dir
        self.owner = owner
        super().__init__(
            f"the embedded PostgreSQL in {data_dir} is in use by another chatgql process ({owner}). "
            "One data directory has one owner: stop that process or set CHATGQL_DATA_DIR to another "
            "directory. To run more processes against that database, give them "
            f"CHATGQL_DATABASE_URL=postgresql://postgres@/postgres?host={_socket_dir(data_dir / 'pgdata')} "
            "(and CHATGQL_BROADCAST_URL=redis://... when more than one serves subscribers)."
        )


def acquire(data_dir: Path) -> None:
    """Own data_dir until release() (or exit); DataDirInUse when another process does."""
    data_dir = data_dir.resolve()
    held = _held.get(data_dir)
    if held is not None:
        held[1] += 1
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = _read_owner(fd)
        os.close(fd)
        raise DataDirInUse(data_dir, owner) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n{' '.join(sys.argv)}\n".encode(), 0)
    _held[data_dir] = [fd, 1]


def release(data_dir: Path) -> None:
    """Give data_dir up (after the last acquire() of this process is released)."""
    data_dir = data_dir.resolve()
    held = _held.get(data_dir)
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        withdraw(data_dir)
        del _held[data_dir]
        os.close(held[0])  # closing the only open file of the lock releases it


def publish(data_dir: Path, url: str) -> None:
    """Tell other chatgql processes how to reach the embedded PostgreSQL of data_dir, which this
    process owns: DATA_DIR/chatgql.server, mode 0600, renamed into place (never read half written)."""
    data_dir = data_dir.resolve()
    if data_dir not in _held:
        raise RuntimeError(f"publish() by a process that does not own {data_dir}")
    fd, temporary = tempfile.mkstemp(dir=data_dir, prefix=f".{SERVER_NAME}.")  # mode 0600
    try:
        with os.fdopen(fd, "w") as file:
            json.dump({"pid": os.getpid(), "url": url}, file)
        os.replace(temporary, data_dir / SERVER_NAME)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def withdraw(data_dir: Path) -> None:
    """Remove what publish() wrote, when this process wrote it."""
    path = data_dir.resolve() / SERVER_NAME
    server = _read_server(path)
    if server is not None and server[0] == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def published(data_dir: Path) -> str | None:
    """The URL of data_dir's embedded PostgreSQL as its owner published it; None unless another
    process owns data_dir and is alive (the pid in chatgql.lock) and published it (the same pid in
    chatgql.server). A killed owner leaves both files: its pid is gone, or another process's."""
    data_dir = data_dir.resolve()
    if data_dir in _held:
        return None
    server = _read_server(data_dir / SERVER_NAME)
    if server is None or server[0] != _lock_owner(data_dir) or not pid_alive(server[0]):
        return None
    return server[1]


def _read_server(path: Path) -> tuple[int, str] | None:
    """(pid, url) from a chatgql.server file; None when there is none (or it is not one)."""
    try:
        document = json.loads(path.read_text())
        pid, url = document["pid"], document["url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (pid, url) if isinstance(pid, int) and isinstance(url, str) else None


def _lock_owner(data_dir: Path) -> int | None:
    """The pid the last owner wrote into chatgql.lock (acquire())."""
    try:
        first = (data_dir / LOCK_NAME).read_text().partition("\n")[0].strip()
    except OSError:
        return None
    return int(first) if first.isdigit() else None


def pid_alive(pid: int) -> bool:
    """A running process (a zombie is not: a killed owner its parent has not reaped yet)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def _read_owner(fd: int) -> str:
    try:
        pid, _, command = os.pread(fd, 4096, 0).decode(errors="replace").partition("\n")
    except OSError:
        return "pid unknown"
    command = command.strip()
    return f"pid {pid.strip()}: {command}" if command else f"pid {pid.strip() or 'unknown'}"


def _socket_dir(pgdata: Path) -> Path:
    """Where the running server's socket is (postmaster.pid's fifth line), else pgdata."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except OSError:
        return pgdata
    return Path(lines[4]) if len(lines) > 4 and lines[4].strip() else pgdata
