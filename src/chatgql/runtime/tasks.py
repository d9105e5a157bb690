"""Tasks of the process's, started from a request's code."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any


def process_task(coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
    """A task that works for the whole process (group commit's drain, the relay's wake-up), not for
    the request whose code started it: in a fresh context, so none of that request's context follows
    it (its CPU meter, engine/meter.py, would charge it the others' work, each step timed)."""
    return asyncio.create_task(coro, name=name, context=contextvars.Context())
