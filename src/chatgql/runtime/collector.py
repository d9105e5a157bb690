"""How a chatgql server process keeps Python's garbage collector out of its latency.

The collector stops the event loop while it walks the objects of the
generations it collects; its full (generation 2) pass walks every tracked
object the process holds. A server holding thousands of subscribed websockets
keeps ~130 tracked objects per subscription, so full passes took hundreds of
ms to seconds. What is done about it (numbers: bench/gcsoak.py):

- Everything alive once the app is built is frozen (gc.freeze): modules, the
  schema, caches. Frozen objects are never walked again.
- Survivors are frozen again after every `gc_freeze_every_young`-th young
  collection (which has just freed the young garbage): the websockets,
  subscriptions and whatever else lives long drop out of every later pass,
  so the middle and full passes walk only what survived since the last
  freeze, never the whole heap. Freezing happens between two validations
  of new documents, in their thread (graphql-core's validation makes
  short-lived cycles: frozen while alive, they would never be freed), and
  after validations, with a full collection first (at most once a second). A frozen object that is released is still
  freed by reference counting at once; only a frozen *reference cycle* would
  stay. So connection teardown, every execution and every request's loaders
  leave no cycles (engine/acyclic.py, graphql/loaders.py, websocket.py;
  tests/test_gc.py checks), and
  chatgql_gc_frozen_objects shows whether frozen memory comes back after
  clients leave.
- Young collections every `gc_young_threshold` (1,000) net allocations
  instead of 700 or 10,000: every event handed to an idle subscription replaces its waiting state (an
  await chain of a dozen objects), the replaced state is freed from the old
  generations, and so the young generation holds about three times its
  nominal threshold when it is collected; at 10,000 a young pass walked
  ~30,000 objects (25 ms) and a middle one ~100,000 (70 ms). 1,000 rather
  than 2,000: in one soak (bench/results/gcsoak.md) the longest pause was 17 ms
  against 36 ms, for about as much collector time in all. And a young pass
  at least every 0.5 s: the count alone let the young generation grow far
  past its threshold.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable

YOUNG_EVERY_SECONDS = 0.5
_process_opted_in = False
_cyclic_work_since_freeze = False
_freeze_pending = False
_last_collecting_freeze = float("-inf")


def keep_startup_objects_out_of_gc() -> None:
    """Freeze what exists once the app is built (`chatgql serve` only: test processes that run
    an app in-process keep an ordinary collector)."""
    global _process_opted_in
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)  # until the lifespan sets the configured one
    _process_opted_in = True


def freeze_survivors(
    young_threshold: int, every_young: int, run: Callable[[Callable[[], None]], object]
) -> Callable[[], None]:
    """Young collections every `young_threshold` net allocations; after every `every_young`-th
    one, `run(freeze)`: freeze what survived it, soon after, where no work making short-lived
    cycles is under way (engine/validation.py runs it between two validations, in their thread).
    Returns the function that stops it. Only in a process that froze its start-up objects."""
    if not _process_opted_in:
        return lambda: None
    gc.set_threshold(young_threshold, 10, 10)
    if every_young <= 0:
        return lambda: None
    loop = asyncio.get_running_loop()
    young = 0

    def on_gc(phase: str, info: dict) -> None:
        nonlocal young
        if phase != "stop" or info["generation"] != 0:
            return
        young += 1
        if young >= every_young and not _freeze_pending:
            young = 0
            _request_freeze()
            # Not run() itself: a collection may start anywhere, even inside the executor's lock.
            loop.call_soon_threadsafe(run, freeze)

    gc.callbacks.append(on_gc)
    timer = None

    def young_pass() -> None:
        # The allocation count understates the young generation: every event replaces idle
        # subscriptions' waiting state, and freeing the old (frozen) state lowers the count, so
        # young passes came rarely and walked many times the threshold (bench/results/micro.md).
        # A young pass at least every YOUNG_EVERY_SECONDS bounds what it walks by time as well.
        nonlocal timer
        gc.collect(0)
        timer = loop.call_later(YOUNG_EVERY_SECONDS, young_pass)

    timer = loop.call_later(YOUNG_EVERY_SECONDS, young_pass)

    def stop() -> None:
        timer.cancel()
        gc.callbacks.remove(on_gc)

    return stop


def _request_freeze() -> None:
    global _freeze_pending
    _freeze_pending = True  # one at a time: freezes wait behind queued validations


def freeze() -> None:
    """Freeze every object alive. If cyclic work ran since the last freeze, a full collection
    first (its garbage may be anywhere in the generations: a validation that lived through a
    middle collection is in the oldest; a frozen cycle is never freed): a full pass walks only
    what is not frozen yet, and runs at most once a second, else the freeze waits (a full pass
    before every freeze paused far longer; a middle collection instead left some validations'
    cycles frozen: bench/results/micro.md)."""
    global _cyclic_work_since_freeze, _freeze_pending, _last_collecting_freeze
    _freeze_pending = False
    if _cyclic_work_since_freeze:
        now = time.monotonic()
        if now - _last_collecting_freeze < 1.0:
            return
        _last_collecting_freeze = now
        _cyclic_work_since_freeze = False
        gc.collect()
    gc.freeze()


def cyclic_work_done() -> None:
    """Work that makes reference cycles dying with it just ran (graphql-core's validation of a
    new document: its visitors hold their own bound methods): the next freeze collects first."""
    global _cyclic_work_since_freeze
    _cyclic_work_since_freeze = True
