"""The lifespan's background tasks end at shutdown even when a dependency loses their cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from chatgql.server import app


async def test_a_task_that_lost_its_cancellation_is_logged_where_it_is_and_cancelled_again(caplog, monkeypatch):
    monkeypatch.setattr(app, "TASK_STOP_SECONDS", 0.2)
    cancels = 0

    async def loses_the_first_cancellation() -> None:
        nonlocal cancels
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancels += 1
                if cancels > 1:
                    raise
                # as Python 3.11's wait_for does when the cancellation lands as its inner task completes

    with caplog.at_level(logging.WARNING, logger="chatgql.server.app"):
        async with contextlib.AsyncExitStack() as stack:
            await app._task(stack, loses_the_first_cancellation(), "stubborn")
            await asyncio.sleep(0)
    assert cancels == 2
    [record] = [r for r in caplog.records if "did not end within" in r.getMessage()]
    assert record.getMessage().startswith("stubborn did not end within 0.2 s of its cancellation")
    assert "loses_the_first_cancellation" in record.getMessage()  # where it was
