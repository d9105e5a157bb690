"""/metrics: the collector's pauses are measured while the server runs, and only then."""

from __future__ import annotations

import gc

from .conftest import RunningServer, make_settings
from .support.live import metrics


async def test_gc_pauses_are_in_metrics_and_the_callback_goes_with_the_server(migrated_url, http):
    callbacks_before = len(gc.callbacks)
    async with RunningServer(make_settings(migrated_url, run_relay=False)) as server:
        assert len(gc.callbacks) == callbacks_before + 1
        before = await metrics(http, server)
        gc.collect()  # a full collection, timed by the server's callback (it runs in this process)
        after = await metrics(http, server)
        key = 'chatgql_gc_pause_seconds_count{generation="2"}'
        assert after[key] >= before.get(key, 0) + 1
        assert after['chatgql_gc_pause_seconds_sum{generation="2"}'] > 0
        assert after["chatgql_gc_pause_longest_seconds"] > 0
    assert len(gc.callbacks) == callbacks_before
