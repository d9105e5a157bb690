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
  freeze, never the whole heap. Work known to make short-lived cycles
  (validating a new document) holds freezing off while it runs
  (cyclic_work()). A frozen object that is released is still
  freed by reference counting at once; only a frozen *reference cycle* would
  stay. So connection teardown and every execution leave no cycles
  (graphql/acyclic.py, websocket.py; tests/test_gc.py checks), and
  chatgql_gc_frozen_objects shows whether frozen memory comes back after
  clients leave.
- Young collections every `gc_young_threshold` (2,000) net allocations instead of 700 or 10,000:
  every event handed to an idle subscription replaces its waiting state (an
  await chain of a dozen objects), the replaced state is freed from the old
  generations, and so the young generation holds about three times its
  nominal threshold when it is collected; at 10,000 a young pass walked
  ~30,000 objects (25 ms) and a middle one ~100,000 (70 ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
from collections.abc import Callable, Iterator

_process_opted_in = False
_guard = threading.Lock()
_in_flight = 0  # cyclic_work() blocks open now
_since_freeze = False  # one was open since the last freeze


def keep_startup_objects_out_of_gc() -> None:
    """Freeze what exists once the app is built (`chatgql serve` only: test processes that run
    an app in-process keep an ordinary collector)."""
    global _process_opted_in
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)  # until the lifespan sets the configured one
    _process_opted_in = True


def freeze_survivors(young_threshold: int, every_young: int) -> Callable[[], None]:
    """Young collections every `young_threshold` net allocations; after every `every_young`-th
    one, freeze what survived it (soon after, on the running loop: a collection may run in any
    thread). Returns the function that stops it. Only in a process that froze its start-up objects."""
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
        if young >= every_young:
            young = 0
            loop.call_soon_threadsafe(_freeze)

    gc.callbacks.append(on_gc)
    return lambda: gc.callbacks.remove(on_gc)


def _freeze() -> None:
    global _since_freeze
    with _guard:  # no cyclic_work() starts meanwhile
        if _in_flight:
            return  # its cycles are alive now and garbage soon: the next young collection tries again
        if _since_freeze:
            # Its garbage may have outlived young and middle collections: free it before freezing.
            # A full pass walks only what is not frozen yet, i.e. what came since the last freeze.
            gc.collect()
            _since_freeze = False
        gc.freeze()


@contextlib.contextmanager
def cyclic_work() -> Iterator[None]:
    """Around work known to make reference cycles that die with it (graphql-core's validation of
    a new document: its visitors hold their own bound methods), in any thread. Nothing is frozen
    while one runs, and the next freeze first collects what is not frozen yet: a cycle frozen
    while alive would never be freed."""
    global _in_flight, _since_freeze
    with _guard:
        _in_flight += 1
        _since_freeze = True
    try:
        yield
    finally:
        with _guard:
            _in_flight -= 1
