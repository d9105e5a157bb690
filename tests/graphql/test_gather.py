"""engine/gather.py: a gather cancelled before its tasks have started leaves no coroutine
unawaited (graphql-core's does: the control), and otherwise answers as graphql-core's."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from graphql.pyutils import gather_with_cancel as graphql_cores

from chatgql.engine.gather import gather_with_cancel


async def _leaf() -> str:
    await asyncio.sleep(3600)
    return "never"


async def _holding(inner: Any) -> Any:  # as a completion holds its resolver's coroutine
    return await inner


async def _unawaited_after_cancelling(gather: Callable[..., Any]) -> list[str]:
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        request = asyncio.ensure_future(gather(*(_holding(_leaf()) for _ in range(5))))
        await asyncio.sleep(0)  # the gather has made its tasks; none has taken a step
        request.cancel()
        await asyncio.wait([request])
        assert request.cancelled()
        del request  # its CancelledError's traceback holds the gather's frame: a cycle
        gc.collect()
    return [str(w.message) for w in caught if "never awaited" in str(w.message)]


async def test_a_gather_cancelled_before_its_tasks_start_leaves_no_coroutine_unawaited():
    assert await _unawaited_after_cancelling(graphql_cores), "the control: graphql-core's leaves some"
    assert await _unawaited_after_cancelling(gather_with_cancel) == []


async def test_results_in_order_and_the_first_error_cancels_the_rest():
    async def after(seconds: float, value: Any) -> Any:
        await asyncio.sleep(seconds)
        if isinstance(value, Exception):
            raise value
        return value

    assert await gather_with_cancel(after(0.02, 1), after(0, 2), after(0.01, 3)) == [1, 2, 3]
    slow = asyncio.ensure_future(after(3600, "slow"))
    with pytest.raises(ValueError, match="first"):
        await gather_with_cancel(slow, after(0, ValueError("first")))
    assert slow.cancelled()
