"""One data directory, one owner.

The process that runs the embedded PostgreSQL of a data directory holds an
exclusive lock on DATA_DIR/chatgql.lock (flock) until it stops the server or
exits; the kernel drops the lock when the process dies, however it dies. A
second chatgql on the same directory is refused: it would attach to the
running server and serve HTTP, but live events stay in the process whose relay
holds the outbox (the in-process bus reaches only that process's subscribers).

`chatgql serve --workers N` takes the lock once, in the supervisor; its workers
get CHATGQL_DATABASE_URL and never start an embedded server.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

LOCK_NAME = "chatgql.lock"

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
        del _held[data_dir]
        os.close(held[0])  # closing the only open file of the lock releases it


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
