"""Sampling profiles of the `chatgql serve` process with py-spy, and their summary.

py-spy (`pip install py-spy`, or the `bench` extra) attaches to the running server
(ptrace: root, or CAP_SYS_PTRACE, or kernel.yama.ptrace_scope=0) and writes raw
collapsed stacks: one line per distinct stack, `frame;frame;...;leaf COUNT`, each
frame `function (path:line)`. Only samples of a thread holding the GIL are kept
(`--gil`): a thread waiting in epoll or in a socket call has released it, so the
shares are shares of the time the process was running Python (or C called from
Python). Without --gil, py-spy's idle detection misses waits inside uvloop and
asyncpg's Cython code and charges them as work.

What is reported is SELF time by the package of the leaf frame, not inclusive time:
py-spy sees Python frames only, so code with no Python frame (uvloop, httptools,
asyncpg's Cython protocol, orjson) is charged to the nearest Python frame below it,
which makes "everything under X" unreliable.

With `chatgql serve --workers N` py-spy records the supervisor and all its workers
(`--subprocesses`): each stack then starts with `process PID:"command line"` frames (the
sampled process's ancestors', then its own), counted per sampled process (`by_process`)
and dropped before the stack is summarised, so the shares are over the samples of every
process together.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
import time
from collections import Counter
from functools import cache
from pathlib import Path

from .infra import die_with_parent

RATE = 200  # samples per second

# bucket label, in the order the report lists them (then "other")
BUCKETS = (
    "strawberry",
    "graphql-core",
    "sqlalchemy",
    "asyncpg",
    "uvicorn+httptools",
    "starlette",
    "asyncio/event loop",
    "json/orjson",
    "jwt",
    "aiokafka",
    "redis-py",
    "chatgql",
    "python stdlib (other)",
    "no Python frame",
    "other",
)
_PREFIXES = (  # first match wins; matched against the path py-spy prints (site-packages stripped)
    ("chatgql/", "chatgql"),  # first: chatgql/graphql/... is chatgql's, not graphql-core's
    ("strawberry/", "strawberry"),
    ("graphql/", "graphql-core"),
    ("sqlalchemy/", "sqlalchemy"),
    ("asyncpg/", "asyncpg"),
    ("uvicorn/", "uvicorn+httptools"),
    ("httptools/", "uvicorn+httptools"),
    ("h11/", "uvicorn+httptools"),
    ("websockets/", "uvicorn+httptools"),
    ("starlette/", "starlette"),
    ("asyncio/", "asyncio/event loop"),
    ("uvloop/", "asyncio/event loop"),
    ("json/", "json/orjson"),
    ("orjson/", "json/orjson"),
    ("jwt/", "jwt"),
    ("aiokafka/", "aiokafka"),
    ("kafka/", "aiokafka"),
    ("redis/", "redis-py"),  # the redis bus client (workers)
)
_PROCESS_FRAME = re.compile(r"^process (?P<pid>\d+):")  # py-spy --subprocesses: the root frame of each stack
_PROCESS_END = re.compile(r'"(?: \([^()]*\))?$')
_FRAME = re.compile(r"^(?P<func>.*) \((?P<path>[^()]*?)(?::(?P<line>\d+))?\)$")


def pyspy_path() -> str | None:
    """The py-spy binary (resolving a pyenv shim, which would add a shell's startup to every call)."""
    found = shutil.which("py-spy")
    if found and "/shims/" in found and shutil.which("pyenv"):
        try:
            real = subprocess.run(["pyenv", "which", "py-spy"], capture_output=True, text=True, timeout=20)
            if real.returncode == 0 and real.stdout.strip():
                return real.stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    return found


def pyspy_version(path: str | None) -> str | None:
    if not path:
        return None
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
        return r.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


class Recorder:
    """`py-spy record` on one pid (subprocesses: and all its descendants), in the background, for a
    fixed number of seconds."""

    def __init__(self, pid: int, seconds: float, out: Path, rate: int = RATE, subprocesses: bool = False) -> None:
        self.pid, self.seconds, self.out, self.rate = pid, seconds, out, rate
        self.subprocesses = subprocesses
        self.exe = pyspy_path()
        self.proc: subprocess.Popen | None = None
        self.log = out.with_suffix(".pyspy.log")
        self.t0 = 0.0

    def start(self) -> Recorder:
        if not self.exe:
            raise RuntimeError("py-spy is not installed (pip install py-spy, or the `bench` extra)")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.unlink(missing_ok=True)
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen(
                [
                    self.exe,
                    "record",
                    "-p",
                    str(self.pid),
                    "-f",
                    "raw",
                    "-o",
                    str(self.out),
                    "-r",
                    str(self.rate),
                    "--nonblocking",
                    "--gil",
                    "-d",
                    str(max(1, int(round(self.seconds)))),
                ]
                + (["--subprocesses"] if self.subprocesses else []),
                stdout=logf,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
            )
        self.t0 = time.monotonic()
        return self

    def attached(self, timeout: float = 10) -> bool:
        """Wait until py-spy says it is sampling (so the load run covers the whole recording)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Sampling process" in self._log_text() or (self.proc and self.proc.poll() is not None):
                return self.proc is not None and self.proc.poll() is None
            time.sleep(0.05)
        return False

    def wait(self) -> dict:
        """Wait for py-spy to finish; {"ok", "samples", "errors", "error"} from its output."""
        assert self.proc is not None
        try:
            code = self.proc.wait(self.seconds + 60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        text = self._log_text()
        m = re.search(r"Samples: (\d+) Errors: (\d+)", text)
        info: dict = {
            "exit_code": code,
            "pyspy_samples": int(m.group(1)) if m else None,
            "pyspy_errors": int(m.group(2)) if m else None,
            "pyspy_wall_s": round(time.monotonic() - self.t0, 2),
        }
        if code != 0 or not self.out.exists():
            said = [
                ln.strip()
                for ln in text.split("Stack backtrace:")[0].splitlines()
                if ln.strip() and not ln.startswith("py-spy> ")
            ]
            info["error"] = f"py-spy exited {code}: " + " ".join(said)[-600:]
        return info

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def _log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


# --------------------------------------------------------------------- summary


def parse_raw(text: str) -> list[tuple[list[str], int]]:
    """Raw collapsed stacks -> [(frames root..leaf, count)]."""
    stacks = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        try:
            n = int(count)
        except ValueError:
            continue
        stacks.append((stack.split(";"), n))
    return stacks


def split_frame(frame: str) -> tuple[str, str]:
    """'Class.method (pkg/mod.py:123)' -> ('Class.method', 'pkg/mod.py')."""
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip(), ""
    return m.group("func"), m.group("path")


@cache
def _stdlib(path: str) -> bool:
    if not path or path.startswith("<"):
        return False
    if os.path.isabs(path):
        return path.startswith(sysconfig.get_paths()["stdlib"]) and "site-packages" not in path
    return os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], path))


@cache
def bucket(path: str) -> str:
    if not path:
        return "no Python frame"  # an empty stack: the thread ran C code outside any Python call
    if path.startswith("<frozen "):
        return "python stdlib (other)"
    p = path.replace("\\", "/")
    for prefix, label in _PREFIXES:
        if p.startswith(prefix) or f"/{prefix}" in p:
            return label
    return "python stdlib (other)" if _stdlib(p) else "other"


def summarize(text: str, top: int = 12) -> dict:
    """Self time by leaf package (shares), the top leaf functions, and how deep stacks went."""
    stacks = parse_raw(text)
    total = sum(n for _, n in stacks)
    by_process: Counter[str] = Counter()
    by_bucket: Counter[str] = Counter()
    by_leaf: Counter[tuple[str, str]] = Counter()
    leaf_bucket: dict[tuple[str, str], str] = {}
    chatgql_anywhere = 0
    for frames, n in stacks:
        frames = [f for f in frames if f.strip()]
        pid = None
        while frames and (m := _PROCESS_FRAME.match(frames[0].strip())):
            # a child's stacks start with its ancestors' process frames, then its own: the last one is the
            # sampled process. A frame is `process PID:"command line"`, and a command line may hold ';'
            # (multiprocessing's `-c "from multiprocessing.spawn import spawn_main; spawn_main(...)"`)
            pid = m.group("pid")
            end = next((i for i, f in enumerate(frames) if _PROCESS_END.search(f.strip())), 0)
            frames = frames[end + 1 :]
        if pid is not None:
            by_process[pid] += n
        func, path = split_frame(frames[-1]) if frames else ("(no Python frame)", "")
        b = bucket(path)
        by_bucket[b] += n
        key = (func, path)
        by_leaf[key] += n
        leaf_bucket[key] = b
        if any("chatgql/" in f for f in frames):
            chatgql_anywhere += n

    def share(n: int) -> float:
        return round(n / total, 4) if total else 0.0

    return {
        "samples": total,
        "distinct_stacks": len(stacks),
        "by_component": {
            b: {"samples": by_bucket[b], "share": share(by_bucket[b])}
            for b in sorted(by_bucket, key=lambda b: (-by_bucket[b], BUCKETS.index(b)))
        },
        "top_leaves": [
            {"function": f, "file": p, "component": leaf_bucket[(f, p)], "samples": n, "share": share(n)}
            for (f, p), n in by_leaf.most_common(top)
        ],
        "chatgql_frame_anywhere_share": share(chatgql_anywhere),
        # with --subprocesses: samples per pid (GIL holders only, so the supervisor has next to none)
        **(
            {"by_process": {pid: {"samples": n, "share": share(n)} for pid, n in by_process.most_common()}}
            if by_process
            else {}
        ),
    }


def per_request(summary: dict, server_cpu_ms_per_request: float | None) -> dict:
    """Shares -> microseconds of server CPU per request, by component."""
    if not server_cpu_ms_per_request:
        return {}
    return {b: round(v["share"] * server_cpu_ms_per_request * 1000, 1) for b, v in summary["by_component"].items()}
