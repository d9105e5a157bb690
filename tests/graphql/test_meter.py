"""The CPU meter of an HTTP request (engine/meter.py): its own tasks' CPU time, not the clock's."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
import time

import pytest

from chatgql import db
from chatgql.engine import meter
from chatgql.events.wakeup import RelayWakeup
from chatgql.runtime.tasks import process_task


def burn(seconds: float) -> None:
    """Spend this thread's CPU time."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


async def steps(count: int, each: float) -> str:
    for _ in range(count):
        burn(each)
        await asyncio.sleep(0)
    return "done"


@pytest.fixture(autouse=True)
async def _factory() -> None:
    meter.install(asyncio.get_running_loop())


async def test_a_request_past_its_cpu_time_ends_and_its_task_goes_on():
    with pytest.raises(meter.CpuLimitExceeded):
        await meter.within_cpu(steps(100, 0.005), 0.02)
    await asyncio.sleep(0.01)  # the request's task is not left cancelled
    assert await meter.within_cpu(steps(2, 0.001), 1.0) == "done"


async def gathered_steps() -> list[str]:
    return await asyncio.gather(*(steps(10, 0.002) for _ in range(10)))


async def test_the_tasks_it_starts_are_counted():
    with pytest.raises(meter.CpuLimitExceeded):
        await meter.within_cpu(gathered_steps(), 0.05)


async def test_a_last_step_past_the_bound_counts_too():
    async def one_step() -> str:
        burn(0.05)
        return "done"

    with pytest.raises(meter.CpuLimitExceeded):
        await meter.within_cpu(one_step(), 0.01)
    await asyncio.sleep(0.01)


async def test_waiting_and_other_clients_work_do_not_count():
    async def others() -> None:
        for _ in range(20):
            burn(0.01)
            await asyncio.sleep(0)

    busy = asyncio.create_task(others())  # not started by the request: not its CPU time
    assert await meter.within_cpu(asyncio.sleep(0.3, "slept"), 0.05) == "slept"
    await busy


async def test_cancellation_from_outside_is_not_taken_for_the_bound():
    task = asyncio.create_task(meter.within_cpu(asyncio.sleep(10), 1.0))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_collectors_passes_inside_a_step_do_not_count():
    """A full collection walks everything the process holds: it is the process's work, not the
    request's (a test process's big heap had a plain send refused as over its bound)."""
    heap = [[i] for i in range(1_000_000)]  # tracked containers: a full pass walks each of them
    started = time.thread_time()
    gc.collect()
    full_pass = time.thread_time() - started
    assert full_pass > 0.03, f"a full pass took {full_pass * 1000:.1f} ms: too small a heap to tell"

    async def collecting() -> str:
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0)
        return "done"

    assert await meter.within_cpu(collecting(), full_pass / 2) == "done"
    # The same CPU spent by the request's own code is counted.
    with pytest.raises(meter.CpuLimitExceeded):
        await meter.within_cpu(steps(3, full_pass), full_pass / 2)
    del heap


async def test_a_cancelled_request_leaves_no_cycle_through_its_meter():
    """A cancellation thrown into a metered request carries the meter's frame in its traceback: the
    frame must not hold it too (a cycle of frame, error and meter, freed only by the collector)."""

    budget = 1.234567  # marks this test's meters: other tasks of the loop may meter requests meanwhile
    started = asyncio.Event()

    async def metered() -> None:
        started.set()
        await asyncio.sleep(10)

    async def request() -> None:
        await meter.within_cpu(metered(), budget)

    gc.collect()
    gc.disable()
    try:
        for _ in range(5):
            started.clear()
            task = asyncio.create_task(request())
            await started.wait()  # cancelled inside the metered step, however busy the machine
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            del task
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        meters = [o for o in gc.garbage if isinstance(o, meter.Meter) and o.budget == budget]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert not meters, f"{len(meters)} meters in cyclic garbage"


async def test_the_relay_wake_up_a_request_starts_is_not_metered_as_its_own(migrated_url: str):
    """The NOTIFY after a commit is the process's (debounced: one for a burst of requests), not the
    request's whose commit started it: its task runs outside that request's meter."""
    database = await db.Database(migrated_url).open()
    wakeup = RelayWakeup(database)
    try:

        async def request() -> asyncio.Task | None:
            wakeup.wake()
            return wakeup._task

        task = await meter.within_cpu(request(), 1.0)
        assert task is not None
        assert task.get_coro().__qualname__ == "RelayWakeup._notify"  # not wrapped in _run_metered
        await task
    finally:
        await wakeup.close()
        await database.close()


async def test_a_task_of_the_process_started_by_a_request_runs_without_its_meter():
    seen: list[object] = []

    async def of_the_process() -> None:
        seen.append(meter._meter.get())

    async def request() -> asyncio.Task:
        seen.append(meter._meter.get())
        return process_task(of_the_process(), "of-the-process")

    await (await meter.within_cpu(request(), 1.0))
    assert isinstance(seen[0], meter.Meter) and seen[1] is None


async def test_the_main_thread_is_sampled_and_another_thread_times_each_step():
    """In the main thread the meter samples (nothing per step); in another thread, where no signal
    handler runs, it times each step and the tasks a request starts, and holds the same bounds."""
    assert meter._sampler.thread == threading.main_thread().ident

    async def in_a_thread() -> list[str]:
        meter.install(asyncio.get_running_loop())
        results = []
        for operation, budget in ((steps(100, 0.005), 0.02), (gathered_steps(), 0.05), (steps(2, 0.001), 1.0)):
            try:
                results.append(await meter.within_cpu(operation, budget))
            except meter.CpuLimitExceeded:
                results.append("over")
        return results

    assert await asyncio.to_thread(asyncio.run, in_a_thread()) == ["over", "over", "done"]


def test_a_sampled_process_exits_cleanly():
    """The interpreter puts SIGPROF's default action (terminate) back as it exits: the timer is
    stopped first, or a tick then ends the process with "Profiling timer expired"."""
    script = (
        "import asyncio, time\n"
        "from chatgql.engine import meter\n"
        "async def main():\n"
        "    meter.install(asyncio.get_running_loop())\n"
        "    assert meter._sampler.thread is not None\n"
        "    until = time.thread_time() + 0.2\n"
        "    while time.thread_time() < until:\n"
        "        pass\n"
        "asyncio.run(main())\n"
        "[[i] for i in range(300_000)]  # CPU time spent as the interpreter exits\n"
    )
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (done.returncode, done.stderr)


def test_a_forked_child_samples_afresh():
    """A child forked without exec inherits SIGPROF's handler but not the timer: were it to take
    itself for sampled, its requests would never be charged.

    Forked from a fresh interpreter of its own, not from pytest's worker: a fork copies the
    locks other threads hold (xdist's receiver thread sits in a read of its channel), and the
    child would wait on one for good."""
    script = (
        "import asyncio, multiprocessing\n"
        "from chatgql.engine import meter\n"
        "def child():\n"
        "    async def main():\n"
        "        meter.install(asyncio.get_running_loop())\n"
        "        return meter._sampler.thread is not None\n"
        "    return (meter._sampler.thread is not None, asyncio.run(main()))\n"
        "async def parent():\n"
        "    meter.install(asyncio.get_running_loop())\n"
        "    assert meter._sampler.thread is not None\n"
        "    with multiprocessing.get_context('fork').Pool(1) as pool:\n"
        "        return await asyncio.to_thread(pool.apply, child)\n"
        "before, after = asyncio.run(parent())\n"
        "print(before, after)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"], done.stdout  # not sampled when forked; sampled once installed
