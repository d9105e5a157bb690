"""CPU time per HTTP request: what the request's own tasks spent, bounded.

A request's CPU time is this thread's (time.thread_time, not the machine's) while the request held
the event loop: its own steps, the stretches between two awaits, and those of the tasks it starts
(graphql-core gathers list items and fields in tasks of their own, the loaders batch in theirs),
which are created in the request's context, where its meter is. Not the clock's time: on a loaded
machine a step's wall time was 4 times its CPU time, and a plain 20-send mutation was refused.
What other clients' tasks do meanwhile is not counted (a busy process does not make a request over
its bound), nor the garbage collector's passes: the collector walks what the whole process holds,
and a full pass of a big heap (seconds, in a test process holding a thousand tests' objects) had
a 50-send burst's request refused as over its bound.

How it is counted:

- in the main thread (where uvicorn runs its event loop), by sampling. A timer of the process's
  CPU time (`setitimer(ITIMER_PROF)`) interrupts it every TICK_SECONDS of CPU, and the signal's
  handler charges this thread's CPU time since the last tick, less the collector's, to the meter
  of the context that runs: a request's step, or a task it started, or nothing between tasks. A
  request's end is a reading too. Nothing is paid per step: timing every step read the thread's
  CPU clock twice a step (a system call each) and wrapped each task a request
  started, about a tenth of a sendMessage's CPU (bench/results/perf-send.md). The price is
  precision: a reading charges the whole stretch since the last one to whoever runs at it, so a
  request is charged at most about a tick (1 ms) more or less than it spent, on bounds of tens of
  milliseconds and more;
- in any other thread (a signal's handler runs in the main thread only), or when something else
  holds SIGPROF (a profiler), by timing each step: `within_cpu` awaits the request through
  `_Metered`, and `install` makes that loop's task factory meter the tasks it starts.

Past the bound the request's task is cancelled once the step that crossed it is over (within a
tick of it, sampled), and `within_cpu` raises CpuLimitExceeded (the caller answers LIMIT_EXCEEDED;
so it does for a request whose last step crossed it). A step is not interrupted: a request ends
within one step of its bound (the price in cost.py keeps steps small).
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import os
import signal
import threading
import time
from collections.abc import Awaitable, Generator
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

_meter: ContextVar[Meter | None] = ContextVar("chatgql_cpu_meter", default=None)

TICK_SECONDS = 0.001  # of the process's CPU time, between two samples


# CPU seconds the collector's full passes have spent, per thread (its passes run in whichever thread
# allocated). Only full passes (generation 2) walk what the whole process holds; the young ones,
# several a request, take microseconds and are charged with the step they ran in (timing them read
# the thread's CPU clock twice each: a system call).
_collected: dict[int, float] = {}
_collection_started: dict[int, float] = {}


def _on_collection(phase: str, info: dict) -> None:
    if info["generation"] != 2:
        return
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
    sampled = _sampler.thread == threading.get_ident()
    try:
        result = await (operation if sampled else _Metered(operation, meter))
    except asyncio.CancelledError:
        if meter.cancelled and task.uncancel() == 0:
            raise CpuLimitExceeded from None
        raise
    finally:
        if sampled:
            _sampler.sample()  # the stretch since the last tick: this request's last step's
        _meter.reset(token)
        over = meter.exceeded
        meter.stop()
    if over:
        if meter.cancelled:
            task.uncancel()
        raise CpuLimitExceeded
    return result


class _Sampler:
    """The main thread's CPU time, read at each tick of the process's CPU timer and charged to the
    meter of the running context."""

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """Not sampling (as made, and in a forked child: the timer is not inherited)."""
        self.thread: int | None = None  # the thread sampled (the main one), once started
        self._last = 0.0  # its CPU time at the last reading, less the collector's
        self._reading = False  # within sample(): a tick then waits for the next

    def start(self) -> bool:
        """Sample this thread (the main one): False when it cannot (another thread, SIGPROF taken)."""
        if self.thread is not None:
            return self.thread == threading.get_ident()
        if threading.current_thread() is not threading.main_thread():
            return False
        if signal.getsignal(signal.SIGPROF) not in (signal.SIG_DFL, signal.SIG_IGN, None, self._on_tick):
            return False  # a profiler's (this sampler's own in a forked child)
        self._last = self._now(threading.get_ident())
        signal.signal(signal.SIGPROF, self._on_tick)
        signal.siginterrupt(signal.SIGPROF, False)  # system calls a tick interrupts resume (SA_RESTART)
        self.thread = threading.get_ident()
        # Stopped before the interpreter puts SIGPROF's default action back as it exits (terminate:
        # a tick then would end the process with "Profiling timer expired").
        atexit.register(signal.setitimer, signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_PROF, TICK_SECONDS, TICK_SECONDS)
        return True

    @staticmethod
    def _now(ident: int) -> float:
        return time.thread_time() - _collected.get(ident, 0.0)

    def _on_tick(self, signum: int, frame: Any) -> None:
        self.sample()

    def sample(self) -> None:
        thread = self.thread
        if self._reading or thread is None or thread in _collection_started:
            return  # a tick within a reading, or inside a collector's pass: the next reading has it
        self._reading = True
        try:
            now = self._now(thread)
            spent, self._last = now - self._last, now
            meter = _meter.get()
            if meter is not None and spent > 0:
                meter.charge(spent)
        finally:
            self._reading = False


_sampler = _Sampler()
# A child forked without exec inherits the handler but not the timer: it starts sampling afresh.
os.register_at_fork(after_in_child=_sampler.forget)


def _task_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task:
    context = kwargs.get("context")
    meter = context.get(_meter) if context is not None else _meter.get()
    if meter is not None and not meter.stopped:
        coro = _run_metered(coro, meter)
    return asyncio.Task(coro, loop=loop, **kwargs)


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Meter the requests of this loop: sampled in the main thread, else each step timed and the
    tasks a request starts too (a loop without a task factory of its own)."""
    if not _sampler.start() and loop.get_task_factory() is None:
        loop.set_task_factory(_task_factory)
