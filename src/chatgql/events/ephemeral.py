"""Ephemeral events (typing): never written to PostgreSQL or the outbox.

They take the bus only: on a redis:// or redis+cluster:// bus every API process's feed hands them
to its dispatcher (so a subscriber on another process gets them); on memory:// (one process) they
go straight to this process's dispatcher, as the relay's events do there. At most once: a
subscriber that misses one sees the next, or none, and the indicator expires by itself.
"""

from __future__ import annotations

import orjson

from .bus import Bus
from .dispatch import Dispatcher
from .types import Event


class EphemeralPublisher:
    def __init__(self, bus: Bus, direct: Dispatcher | None = None) -> None:
        self._bus = bus
        self._direct = direct  # this process's dispatcher when the bus is memory://

    async def publish(self, event: Event) -> None:
        wire = event.to_wire()
        if self._direct is not None:
            await self._direct.dispatch(wire)
        else:
            await self._bus.publish(orjson.dumps(wire).decode(), key=str(event.conversation_id))
