"""/metrics: the collector's pauses are measured while the server runs, and only then."""

from __future__ import annotations

import gc

from .conftest import RunningServer, make_settings


def samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


async def test_gc_pauses_are_in_metrics_and_the_callback_goes_with_the_server(migrated_url, http):
    callbacks_before = len(gc.callbacks)
    async with RunningServer(make_settings(migrated_url, run_relay=False)) as server:
        assert len(gc.callbacks) == callbacks_before + 1
        base = f"http://127.0.0.1:{server.port}"
        before = samples((await http.get(f"{base}/metrics")).text)
        gc.collect()  # a full collection, timed by the server's callback (it runs in this process)
        after = samples((await http.get(f"{base}/metrics")).text)
        key = 'chatgql_gc_pause_seconds_count{generation="2"}'
        assert after[key] >= before.get(key, 0) + 1
        assert after['chatgql_gc_pause_seconds_sum{generation="2"}'] > 0
        assert after["chatgql_gc_pause_longest_seconds"] > 0
    assert len(gc.callbacks) == callbacks_before
