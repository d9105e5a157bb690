"""pgbench baselines: the product's statements (bench.product_sql), same database,
same client count and duration as the HTTP load."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import orjson

from . import layout, live, product_sql
from .infra import Postgres, run_with_rusage


@dataclass
class Script:
    name: str
    text: str
    defines: dict[str, str]


def _json(obj: dict) -> str:
    return orjson.dumps(obj).decode()


def send_script(sizes: layout.Sizes, hot: bool) -> Script:
    stmt = product_sql.send_statement()
    if hot:
        head = (
            f"\\set j random(1, {sizes.hot_members})\n\\set cid {layout.HOT_CID}\n\\set uid {layout.HOT_MEMBER} + :j\n"
        )
    else:
        head = f"\\set cid random(1, {sizes.spread})\n\\set uid {layout.SPREAD_SENDER} + :cid\n"
    # the product sends a fresh clientMsgId; pgbench has no uuid in \set, the server makes one
    body = stmt.for_pgbench({"cmid": "gen_random_uuid()"})
    example = stmt.params
    return Script(
        "send_hot" if hot else "send_spread",
        head + body + "\n",
        {"body": example["body"], "message_event": example["message_event"], "read_event": example["read_event"]},
    )


def read_script(sizes: layout.Sizes) -> Script:
    """Each client owns the conversations i = client_id + 1 (mod clients) and raises
    their readers' watermarks with its own increasing counter: every call advances."""
    stmt = product_sql.mark_read_statement()
    per = sizes.read_conversations // sizes.clients
    head = (
        f"\\set n :n + 1\n"
        f"\\set i 1 + :client_id + {sizes.clients} * random(0, {per - 1})\n"
        f"\\set cid {layout.READ_CID0} + :i\n"
        f"\\set uid {layout.READER} + :i\n"
        f"\\set seq :n\n"
    )
    return Script("read", head + stmt.for_pgbench() + "\n", {"n": "0", "event": stmt.params["event"]})


def inbox_script(sizes: layout.Sizes) -> Script:
    stmts = product_sql.inbox_statements(str(layout.INBOX_USER), sizes.inbox_page)
    head = f"\\set uid {layout.INBOX_USER}\n\\set limit {sizes.inbox_page + 1}\n"
    text = head + "\n".join(s.for_pgbench({"archived": "false"}) for s in stmts) + "\n"
    return Script("inbox", text, {})


def _command(
    pg: Postgres,
    path: Path,
    sizes: layout.Sizes,
    seconds: float,
    defines: dict[str, str],
    database: str,
    options: list[str] | None = None,
) -> list[str]:
    """pgbench running the script at path with the HTTP load's clients and threads, prepared."""
    cmd = [str(Postgres.bin_dir() / "pgbench"), "-h", pg.socket_dir, "-U", "postgres", "-n", "-M", "prepared"]
    cmd += ["-c", str(sizes.clients), "-j", str(sizes.threads), "-T", str(max(1, int(round(seconds))))]
    cmd += [*(options or []), "-f", str(path)]
    for name, value in defines.items():
        cmd += ["-D", f"{name}={value}"]
    return [*cmd, database]


_TPS = re.compile(r"tps = ([0-9.]+) \(without initial connection time\)")
_PROCESSED = re.compile(r"number of transactions actually processed: (\d+)")
_FAILED = re.compile(r"number of failed transactions: (\d+)")
_LAT = re.compile(r"latency average = ([0-9.]+) ms")


def run(
    pg: Postgres,
    script: Script,
    sizes: layout.Sizes,
    workdir: Path,
    seconds: float,
    defines: dict[str, str] | None = None,
    database: str = "postgres",
) -> dict:
    """One pgbench run; returns tps, transactions, failures, latency, pgbench's own CPU.
    defines: override some of the script's -D variables (read: where the seq counter starts);
    database: the database it runs in (bench/userids.py runs two schemas side by side)."""
    path = workdir / f"pgbench_{script.name}.sql"
    path.write_text(script.text)
    cmd = _command(pg, path, sizes, seconds, {**script.defines, **(defines or {})}, database)
    status, out, cpu, wall = run_with_rusage(cmd, workdir / f"pgbench_{script.name}.out")
    if status != 0 or not _TPS.search(out):
        raise RuntimeError(f"pgbench {script.name} failed (exit {status}):\n{out[-3000:]}")
    processed = int(_PROCESSED.search(out).group(1))
    failed = int(m.group(1)) if (m := _FAILED.search(out)) else 0
    return {
        "tps": float(_TPS.search(out).group(1)),
        "transactions": processed,
        "failed": failed,
        "latency_avg_ms": float(m.group(1)) if (m := _LAT.search(out)) else None,
        "clients": sizes.clients,
        "threads": sizes.threads,
        "seconds": wall,
        "pgbench_cpu_pct_of_one_core": round(100 * cpu / wall, 1),
        "pgbench_cpu_s": round(cpu, 3),
        "script": str(path.name),
    }


def fixed_rate_latency(
    pg: Postgres, script: Script, sizes: layout.Sizes, workdir: Path, rate: float, seconds: float
) -> dict:
    """pgbench of the script at a fixed rate (open loop, `-R`), every transaction logged (`-l`): the
    database's own latency for the statement at that rate, percentiles in ms. bench/live.py puts it
    beside the send's answer time at the same rate: what a commit's tail alone costs on this machine."""
    prefix = workdir / f"pgbench_{script.name}_rate"
    for old in workdir.glob(f"{prefix.name}.*"):
        old.unlink()
    path = workdir / f"pgbench_{script.name}.sql"
    path.write_text(script.text)
    cmd = _command(
        pg, path, sizes, seconds, script.defines, "postgres", ["-R", f"{rate:g}", "-l", f"--log-prefix={prefix}"]
    )
    status, out, _, wall = run_with_rusage(cmd, workdir / f"pgbench_{script.name}_rate_stdout.txt", cwd=str(workdir))
    if status != 0:
        raise RuntimeError(f"pgbench {script.name} at {rate:g}/s failed (exit {status}):\n{out[-3000:]}")
    # Each line: client_id transaction_no time_us script_no time_epoch time_us_part [schedule_lag_us]
    latencies_ns = [
        int(line.split()[2]) * 1000
        for log in workdir.glob(f"{prefix.name}.*")
        for line in log.read_text().splitlines()
        if line
    ]
    if not latencies_ns:
        raise RuntimeError(f"pgbench {script.name} at {rate:g}/s logged no transaction:\n{out[-3000:]}")
    return {
        "rate_per_s": rate,
        "seconds": round(wall, 1),
        "transactions": len(latencies_ns),
        "latency_ms": live.stats_ms(latencies_ns),
    }
