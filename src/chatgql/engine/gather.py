"""Gathering sibling awaitables so that a cancelled request leaves no coroutine unawaited.

graphql-core's gather_with_cancel (its executor gathers a selection's fields and a list's
items with it; so do the plans, engine/plan/execute.py) wraps each awaitable in a task
and awaits asyncio.gather of them. When the request is cancelled (its timeout, the client
gone), the cancellation goes down through asyncio.gather to those tasks at once, and a
task cancelled before its first step never runs its coroutine: whatever that coroutine
holds (a resolver's coroutine, a sub-selection's gather) is never awaited, and Python
warns "coroutine ... was never awaited" for each one when it is collected.

Here the awaiting task waits on a future of its own that the tasks settle, and a
cancellation reaches that future alone: the loop runs callbacks in the order they were
scheduled, so by the time the task handles it, every task it made has taken its first
step; only then are they cancelled, each at the await it reached (the same again one level
down). Otherwise it is graphql-core's: the results in order, and on the first exception
(a task's cancellation included, as asyncio.gather has it) the others are cancelled and
settled before it propagates. It costs what asyncio.gather costs: one future, one
callback per task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any, cast


async def gather_with_cancel(*awaitables: Awaitable[Any]) -> list[Any]:
    futures = [asyncio.ensure_future(awaitable) for awaitable in awaitables]
    if not futures:
        return []
    settled = asyncio.get_running_loop().create_future()  # its result: the first to fail, or None
    pending = len(futures)

    def one_done(future: asyncio.Future) -> None:
        nonlocal pending
        pending -= 1
        if settled.done():
            return
        if future.cancelled() or future.exception() is not None:
            settled.set_result(future)
        elif not pending:
            settled.set_result(None)

    for future in futures:
        future.add_done_callback(one_done)
    try:
        failed = await settled
    except asyncio.CancelledError:  # the request: every one of them has started by now
        await _cancel_and_settle(futures)
        raise
    if failed is not None:  # the first to fail, as asyncio.gather reports it
        await _cancel_and_settle(futures)
        if failed.cancelled():
            raise asyncio.CancelledError
        raise cast(BaseException, failed.exception())
    return [future.result() for future in futures]


async def _cancel_and_settle(futures: Sequence[asyncio.Future]) -> None:
    for future in futures:
        if not future.done():
            future.cancel()
    await asyncio.gather(*futures, return_exceptions=True)
