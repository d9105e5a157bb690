"""Event kinds, each defined once: its fields, its JSON form and how a subscriber reads it back.

An event is a frozen dataclass registered under its "type". Producers (services/) build one and
write `outbox_row()` (the outbox payload is also the Kafka value and what the bus carries);
subscribers (graphql/subscriptions.py) turn the dispatched dict back into the typed event with
`parse()`. A field's wire key is its name in camelCase (client_msg_id -> "clientMsgId"): the name
is written nowhere else. Keys a reader does not know are ignored (a newer producer may add some).

Some fields are not known when the event is built; the definition says who fills them in:
- STORE: the statement that writes the outbox row (seq and createdAt: chat_send() and
  chat_send_batch(), migrations 0002 and 0006; lastReadSeq: the watermark statements of
  store/reads.py). tests/events/test_event_types.py checks that the SQL fills exactly these keys.
- DISPATCH: the dispatcher, on the way to subscribers (a coalesced read.updated in a big group);
  absent, they take their default.

Every event names its conversation; the outbox key (and the Kafka key) is the conversation id,
so one conversation's events stay in order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal, TypeVar, get_type_hints
from uuid import UUID

PRODUCER: Literal["producer"] = "producer"
STORE: Literal["store"] = "store"
DISPATCH: Literal["dispatch"] = "dispatch"
FilledBy = Literal["producer", "store", "dispatch"]


def stored() -> Any:
    """A field the statement writing the outbox row fills in (None until then)."""
    return field(default=None, metadata={"filled_by": STORE})


def dispatched(default: Any) -> Any:
    """A field the dispatcher may set on the way to subscribers."""
    return field(default=default, metadata={"filled_by": DISPATCH})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _same(value: Any) -> Any:
    return value


# JSON form of the field types that are not JSON already: (encode, decode).
_CODECS: dict[Any, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    UUID: (str, UUID),
    datetime: (datetime.isoformat, datetime.fromisoformat),
}


@dataclass(frozen=True, slots=True)
class WireField:
    name: str  # the Python attribute
    key: str  # the JSON key
    filled_by: FilledBy
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]
    default: Any


class Event:
    """The base of every event kind (see the module docstring)."""

    __slots__ = ()
    TYPE: ClassVar[str]
    FIELDS: ClassVar[tuple[WireField, ...]]
    _PRODUCED: ClassVar[tuple[tuple[str, str, Callable[[Any], Any] | None], ...]]  # (name, key, encode or None)
    _READ: ClassVar[tuple[tuple[str, str, Callable[[Any], Any] | None, bool], ...]]  # ..., decode, required
    conversation_id: int

    @classmethod
    def key(cls, name: str) -> str:
        """The wire key of field `name`."""
        for wire in cls.FIELDS:
            if wire.name == name:
                return wire.key
        raise KeyError(f"{cls.TYPE} has no field {name}")

    @classmethod
    def keys(cls, filled_by: FilledBy) -> frozenset[str]:
        """The wire keys of the fields `filled_by` fills in."""
        return frozenset(wire.key for wire in cls.FIELDS if wire.filled_by == filled_by)

    def payload(self) -> dict[str, Any]:
        """The outbox payload the producer writes: its own fields (the store adds its own)."""
        out: dict[str, Any] = {"type": self.TYPE}
        for name, key, encode in self._PRODUCED:  # on every write: kept short
            value = getattr(self, name)
            out[key] = value if encode is None else encode(value)
        return out

    def outbox_row(self) -> tuple[str, dict[str, Any]]:
        """(key, payload) for store.outbox.append: keyed by the conversation."""
        return str(self.conversation_id), self.payload()

    def to_wire(self) -> dict[str, Any]:
        """The whole JSON form, as a subscriber receives it (a field not filled in is left out)."""
        out: dict[str, Any] = {"type": self.TYPE}
        for wire in self.FIELDS:
            value = getattr(self, wire.name)
            if wire.filled_by == PRODUCER or value is not None and value != wire.default:
                out[wire.key] = wire.encode(value)
        return out

    @classmethod
    def from_wire(cls: type[E], data: dict[str, Any]) -> E:
        """The event a subscriber receives; a missing producer or store field is a ValueError."""
        values: dict[str, Any] = {}
        for name, key, decode, required in cls._READ:  # once per event and process: kept short
            raw = data.get(key)
            if raw is None:
                if required:
                    raise ValueError(f"{cls.TYPE} event without {key}")
                continue
            values[name] = raw if decode is None else decode(raw)
        return cls(**values)


E = TypeVar("E", bound=Event)
REGISTRY: dict[str, type[Event]] = {}


def register(cls: type[E]) -> type[E]:
    """Record an event kind's wire fields and file it under its type."""
    hints = get_type_hints(cls)
    wires = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        base = hints[f.name]
        optional = getattr(base, "__args__", None)
        if optional is not None and type(None) in optional:  # `datetime | None`: the type is datetime
            (base,) = (arg for arg in optional if arg is not type(None))
        encode, decode = _CODECS.get(base, (_same, _same))
        default = None if f.default is dataclasses.MISSING else f.default
        wires.append(WireField(f.name, _camel(f.name), f.metadata.get("filled_by", PRODUCER), encode, decode, default))
    cls.FIELDS = tuple(wires)
    cls._PRODUCED = tuple(
        (w.name, w.key, None if w.encode is _same else w.encode) for w in wires if w.filled_by == PRODUCER
    )
    cls._READ = tuple((w.name, w.key, None if w.decode is _same else w.decode, w.filled_by != DISPATCH) for w in wires)
    if cls.TYPE in REGISTRY:
        raise ValueError(f"two event kinds are called {cls.TYPE}")
    REGISTRY[cls.TYPE] = cls
    return cls


def parse(data: dict[str, Any]) -> Event:
    """The typed event of a dispatched dict, by its "type" (KeyError for an unknown type)."""
    return REGISTRY[data["type"]].from_wire(data)


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class MessageNew(Event):
    """A message was stored. Carries every common field of Message, so fanout needs no query per
    subscriber."""

    TYPE: ClassVar[str] = "message.new"
    conversation_id: int
    sender_id: int
    client_msg_id: UUID
    body: str
    seq: int | None = stored()
    created_at: datetime | None = stored()


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class ReadUpdated(Event):
    """A member's watermark moved (lastReadSeq: where to). In a big group the dispatcher may pass on
    only the newest of several moves: coalesced, with how many it stands for."""

    TYPE: ClassVar[str] = "read.updated"
    conversation_id: int
    user_id: int
    last_read_seq: int | None = stored()
    coalesced: bool = dispatched(False)
    moves: int = dispatched(1)


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class MembersAdded(Event):
    TYPE: ClassVar[str] = "member.added"
    conversation_id: int
    user_ids: list[int]


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class MemberRemoved(Event):
    TYPE: ClassVar[str] = "member.removed"
    conversation_id: int
    user_id: int


# The types by name, for code that routes dicts (events/dispatch.py).
MESSAGE_NEW = MessageNew.TYPE
READ_UPDATED = ReadUpdated.TYPE
MEMBERS_ADDED = MembersAdded.TYPE
MEMBER_REMOVED = MemberRemoved.TYPE
