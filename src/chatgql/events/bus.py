"""The broadcast bus -> the Dispatcher of this process."""

from __future__ import annotations

import asyncio
import logging

import orjson
from broadcaster import Broadcast

from .dispatch import Dispatcher
from .publish import BUS_CHANNEL

log = logging.getLogger(__name__)


async def feed_dispatcher(broadcast: Broadcast, dispatcher: Dispatcher, ready: asyncio.Event | None = None) -> None:
    """Hand every bus event to the dispatcher, until cancelled.

    If an event cannot be dispatched (say the membership query fails), the
    subscribers may have missed it: they are ended with a resync error.
    """
    while True:
        try:
            async with broadcast.subscribe(BUS_CHANNEL) as subscriber:
                if ready is not None:
                    ready.set()
                async for event in subscriber:
                    if event is None:  # the backend went away
                        break
                    try:
                        await dispatcher.dispatch(orjson.loads(event.message))
                    except Exception:
                        log.warning("could not dispatch an event; ending subscriptions", exc_info=True)
                        dispatcher.interrupt_all()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("broadcast bus subscription failed; resubscribing", exc_info=True)
        dispatcher.interrupt_all()
        await asyncio.sleep(0.5)
