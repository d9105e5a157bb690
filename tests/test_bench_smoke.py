"""The benchmark harness in smoke mode (tiny numbers, seconds), so it never rots.

Runs `python -m bench --smoke` as its own process (its own embedded PostgreSQL,
its own `chatgql serve`, wrk or the Python fallback generator, the in-process
event bus) and checks results.json: every section present, every figure > 0,
and the harness's own consistency checks clean. The full benchmark
(`python -m bench`) is not part of the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = ("send_spread", "send_hot", "read", "inbox")


@pytest.fixture(autouse=True)
def clean_database() -> None:
    """This test brings its own database: skip the suite's table cleaning (and its PostgreSQL)."""


def test_bench_smoke(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    results = json.loads((out / "results.json").read_text())
    assert results["mode"] == "smoke"
    assert (out / "RESULTS.smoke.md").read_text().startswith("# chatgql benchmark results")

    for scenario in SCENARIOS:
        base, http = results["pgbench"][scenario], results["http"][scenario]
        assert base["tps"] > 0 and base["transactions"] > 0 and base["failed"] == 0, base
        assert http["rps"] > 0 and http["ok"] > 0, http
        assert http["generator_cpu_pct_of_one_core"] > 0, http
        assert http["cpu"]["pct_of_one_core"]["server"] > 0, http["cpu"]
        for check in (base["check"], http["check"]):
            assert "problem" not in check, check
        assert results["verdicts"][scenario]["value"] > 0

    live = results["live"]
    assert "error" not in live, live
    assert live["product"]["received"] > 0 and live["product"]["missing"] == 0, live["product"]
    assert live["product"]["latency_ms"]["p50"] > 0 and live["product"]["latency_ms"]["p99"] > 0
    assert live["baseline"]["received"] > 0 and live["baseline"]["latency_ms"]["p50"] > 0
    assert live["ratio_p99"] > 0
    waits = live["product"]["diagnosis"]["waits"]
    for what in ("event_loop_lag", "pool_wait", "relay_publish"):  # each sampled or timed in the window
        assert waits[what]["count"] > 0 and waits[what]["over_25ms"] <= waits[what]["count"], waits
    assert "the server's waits while measuring" in (out / "RESULTS.smoke.md").read_text()

    fanout = results["fanout"]
    assert "error" not in fanout, fanout
    assert fanout["subscribed"] == fanout["members"] > 0
    assert len(fanout["rounds"]) == results["sizes"]["fanout_rounds"]
    assert all(r["recipients"] == fanout["members"] and r["last_ms"] > 0 for r in fanout["rounds"])

    connections = results["connections"]
    assert "error" not in connections, connections
    assert connections["opened"] == connections["requested"] > 0
    assert connections["server_active_subscriptions"] >= connections["opened"]
    assert connections["rss_after_mb"] > 0
    # 50 sockets may fit in memory the allocator already had: the growth can be 0 in smoke mode
    assert connections["kb_per_subscription"] is not None
    # every protocol, deflate offered and not: the server agrees to the offer, and only to it
    assert len(connections["variants"]) == 4
    for variant in connections["variants"].values():
        assert variant["opened"] == variant["requested"] > 0
        assert variant["server_active_subscriptions"] >= variant["opened"]
        assert bool(variant["extensions_agreed"]) == bool(variant["compression_offered"]), variant

    for key in ("machine", "versions", "sizes", "total_seconds"):
        assert results[key], key
    assert results["versions"]["postgresql"]


def test_gc_soak_smoke(tmp_path: Path) -> None:
    """bench.gcsoak with tiny numbers: both sides run, every client got its events, the pauses are read."""
    out = tmp_path / "gc_soak.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.gcsoak",
            "--users",
            "20",
            "--rate",
            "5",
            "--seconds",
            "2",
            "--doc-seconds",
            "2",
            "--doc-clients",
            "2",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    results = json.loads(out.read_text())
    assert set(results["sides"]) == {"baseline", "product"}
    for side in results["sides"].values():
        assert side["subscriptions"] == 40 and side["http"]["failures"] == 0
        assert side["deliveries"]["errors"] == 0 and side["delivery_ms"]["count"] > 0
        assert side["gc_pause_longest_ms"] > 0 and side["distinct_documents"]["answered"] > 0
    assert out.with_suffix(".md").read_text().startswith("# Garbage-collector soak")


def test_the_search_benchmark_runs_the_products_own_search_statements() -> None:
    """bench.search's pgbench scripts are built from chatgql.store.search at run time (no database: < 1 s);
    the benchmark itself (10 million rows, ~10 min) is not part of the suite."""
    from bench.search import _scripts

    scripts = _scripts("tilodobo")
    assert len(scripts) == 9
    for name, script in scripts.items():
        parse, page = script.split("\\gset\n")
        assert "websearch_to_tsquery('simple', 'the')" in parse or "tilodobo')" in parse, name
        assert "to_tsvector('simple', body) @@ :tsq::tsquery" in page and "CROSS JOIN LATERAL" in page, name
        assert ("AND cm.conversation_id = " in page) is ("across" not in name), name


def test_growth_smoke(tmp_path: Path) -> None:
    """bench.growth with tiny sizes: every figure measured at every size through the served API, with
    PostgreSQL's own counts of the work under it, and the report has a table and a shape per figure."""
    out, report = tmp_path / "growth.json", tmp_path / "growth.md"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.growth", "--smoke", "--json", str(out), "--report", str(report)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    results = json.loads(out.read_text())
    sizes = results["sizes"]
    for figure in ("inbox", "history", "sync", "markread"):
        rows = results[figure]
        assert [int(n) for n in rows] == sizes[figure], figure
        for r in rows.values():
            assert r["ms_median"] > 0 and r["answer_bytes"] > 0, (figure, r)
            assert r["statements"] >= 1 and r["buffers"] > 0 and r["explained_plans"] >= 1, (figure, r)
            assert r["by_statement"], (figure, r)
    # the page of 50 holds 50 conversations once the viewer has that many; sync answers what was missed
    assert results["inbox"]["50"]["rows_returned"] >= 50
    assert results["sync"]["10"]["rows_returned"] >= 10
    fanout = results["fanout"]
    assert [int(n) for n in fanout] == sizes["fanout"]
    for n, r in fanout.items():
        assert r["subscribed"] == r["recipients"] == int(n) and r["rounds"] == sizes["fanout_rounds"], r
        assert r["statements"] >= 1 and r["buffers"] > 0 and r["ms_median"] > 0, r
    text = report.read_text()
    assert text.startswith("# How cost grows")
    assert text.count("Shape (measured): ") == 5
