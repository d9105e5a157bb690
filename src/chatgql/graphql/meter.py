"""CPU time per HTTP request: what the request's own tasks spent, bounded.

`within_cpu` runs a request's execution through `_Metered`, which adds up the
CPU time (time.thread_time: this thread's, not the machine's) of each of its
steps, the stretches between two awaits: the time the request held the event
loop, from everyone else on it. (Not the clock's time: on a loaded machine a
step's wall time was 4 times its CPU time, and a plain 20-send mutation was
refused. A thread_time reading is a ~3 µs system call; the largest page, 200
messages, takes ~1,600 steps: ~10 ms.) The tasks it starts are metered
too, into the same meter: graphql-core gathers list items and fields in tasks
of their own and the loaders batch in theirs, and they are created with the
request's context, where the meter is (`install` makes the event loop's task
factory look for it there). What other clients' tasks do meanwhile is not
counted: a busy process does not make a request over its bound. Nor are the
garbage collector's passes that ran inside a step: the collector walks what the
whole process holds, and a full pass of a big heap (seconds, in a test process
holding a thousand tests' objects) had a 50-send burst's request refused as over
its bound.

Past the bound the request's task is cancelled once the step that crossed it
is over, and `within_cpu` raises CpuLimitExceeded (the caller answers
LIMIT_EXCEEDED; so it does for a request whose last step crossed it). A step
is not interrupted: a request ends within one step of its bound (the price in
cost.py keeps steps small).
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Awaitable, Generator
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

_meter: ContextVar[Meter | None] = ContextVar("chatgql_cpu_meter", default=None)


# CPU seconds the collector has spent, per thread (its passes run in whichever thread allocated).
_collected: dict[int, float] = {}
_collection_started: dict[int, float] = {}


def _on_collection(phase: str, info: dict) -> None:
    ident = threading.get_ident()
    if phase == "start":
        _collection_started[ident] = time.thread_time()
    elif (started := _collection_started.pop(ident, None)) is not None:
        _collected[ident] = _collected.get(ident, 0.0) + time.thread_time() - started


gc.callbacks.append(_on_collection)


class CpuLimitExceeded(Exception):
    """The request's tasks used more CPU time than its bound."""


class Meter:
    __slots__ = ("budget", "spent", "task", "exceeded", "cancelled", "stopped", "_cancelling")

    def __init__(self, budget: float, task: asyncio.Task) -> None:
        self.budget = budget  # seconds
        self.spent = 0.0
        self.task: asyncio.Task | None = task
        self.exceeded = False
        self.stopped = False  # the request is over (a task it started may live on, no longer metered)
        self.cancelled = False  # the request's task was cancelled for it
        self._cancelling: asyncio.Handle | None = None

    def charge(self, seconds: float) -> None:
        self.spent += seconds
        if self.spent > self.budget and not self.exceeded and self.task is not None:
            self.exceeded = True
            # Not within the step: a task cancelled while it runs would see it at its next
            # await, wherever that is. Once the step is over, the task waits on something.
            self._cancelling = self.task.get_loop().call_soon(self._cancel)

    def _cancel(self) -> None:
        self._cancelling = None
        if self.task is not None and not self.task.done():
            self.cancelled = True
            self.task.cancel()

    def stop(self) -> None:
        """The request is over: nothing is cancelled for it any more, nothing new is metered."""
        self.stopped = True
        self.task = None  # a task the request started and that lives on must not hold the request's
        if self._cancelling is not None:
            self._cancelling.cancel()
            self._cancelling = None


class _Metered:
    """Awaits an awaitable step by step, charging each step's CPU time to a meter."""

    __slots__ = ("inner", "meter")

    def __init__(self, inner: Awaitable[Any], meter: Meter) -> None:
        self.inner = inner.__await__()
        self.meter = meter

    def __await__(self) -> Generator[Any, Any, Any]:
        inner, charge, clock = self.inner, self.meter.charge, time.thread_time
        collected, ident = _collected, threading.get_ident()
        value: Any = None
        error: BaseException | None = None
        while True:
            started, collecting = clock(), collected.get(ident, 0.0)
            try:
                yielded = inner.send(value) if error is None else inner.throw(error)
            except StopIteration as done:
                charge(clock() - started - (collected.get(ident, 0.0) - collecting))
                return done.value
            except BaseException:
                charge(clock() - started - (collected.get(ident, 0.0) - collecting))
                # What raises (a cancellation thrown in, mostly) carries this frame in its traceback:
                # holding it in a local too would make a cycle of the frame, the error and the meter.
                error = None
                raise
            charge(clock() - started - (collected.get(ident, 0.0) - collecting))
            try:
                value, error = (yield yielded), None
            except GeneratorExit:
                inner.close()
                raise
            except BaseException as thrown:  # noqa: BLE001 - handed on to the awaitable (cancellation)
                value, error = None, thrown


async def _run_metered(coro: Awaitable[T], meter: Meter) -> T:
    return await _Metered(coro, meter)


async def within_cpu(operation: Awaitable[T], budget_seconds: float) -> T:
    """Await operation; CpuLimitExceeded once it (and the tasks it starts) spent more than budget_seconds
    (also when it was done by then: the bound holds whether or not a step was its last)."""
    task = asyncio.current_task()
    assert task is not None
    meter = Meter(budget_seconds, task)
    token = _meter.set(meter)
    try:
        result = await _Metered(operation, meter)
    except asyncio.CancelledError:
        if meter.cancelled and task.uncancel() == 0:
            raise CpuLimitExceeded from None
        raise
    finally:
        _meter.reset(token)
        over = meter.exceeded
        meter.stop()
    if over:
        if meter.cancelled:
            task.uncancel()
        raise CpuLimitExceeded
    return result


def _task_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task:
    context = kwargs.get("context")
    meter = context.get(_meter) if context is not None else _meter.get()
    if meter is not None and not meter.stopped:
        coro = _run_metered(coro, meter)
    return asyncio.Task(coro, loop=loop, **kwargs)


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Tasks started within a metered request are metered too (a loop without a task factory of its own)."""
    if loop.get_task_factory() is None:
        loop.set_task_factory(_task_factory)
