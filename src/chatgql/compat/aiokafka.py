"""aiokafka's non-public API, as chatgql uses it (PINNED["aiokafka"]).

Why the package exists, and how a pin moves: compat/__init__.py, docs/internals/compat.md."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = [
    "abandon_unacknowledged",
]


async def abandon_unacknowledged(producer: Any, error: BaseException, timeout: float) -> None:
    """aiokafka has no public "stop now": its stop() waits until every pending batch is
    acknowledged, forever during a Kafka outage. End the sender task (`_sender.sender_task`, so
    nothing is re-queued), then fail what is left (`_message_accumulator.fail_all`), after which
    stop() returns. Buys a shutdown that does not hang; what Kafka did not acknowledge is still in
    the outbox. Breaks (shutdown hangs again) if either attribute is renamed."""
    sender = producer._sender.sender_task
    if sender is not None:
        sender.cancel()
        await asyncio.wait({sender}, timeout=timeout)
    producer._message_accumulator.fail_all(error)
