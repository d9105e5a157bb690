"""What the engine reads of the API, declared by the API on its own fields.

A resolver whose value is the same for every subscriber of an event (read once per event, or
from the event itself) carries PER_EVENT in its field's metadata: `@strawberry.field(metadata=PER_EVENT)`.
The engine's shared event results (engine/shared.py) reuse one subscriber's result for the others
only when every field selected is a plain field or marked so.
"""

from __future__ import annotations

from typing import Any

PER_EVENT_KEY = "per_event"
PER_EVENT: dict[str, Any] = {PER_EVENT_KEY: True}
