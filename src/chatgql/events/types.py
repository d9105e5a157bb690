"""Event kinds, each defined once: its fields, its JSON form and how a subscriber reads it back.

An event is a frozen dataclass registered under its "type". Producers (services/) build one and
write `outbox_row()` (the outbox payload is also the Kafka value and what the bus carries);
subscribers (graphql/subscriptions.py) turn the dispatched dict back into the typed event with
`parse()`. A field's wire key is its name in camelCase (client_msg_id -> "clientMsgId"): the name
is written nowhere else. Keys a reader does not know are ignored (a newer producer may add some).

Some fields are not known when the event is built; the definition says who fills them in:
- STORE: the statement that writes the outbox row (seq and createdAt: chat_send() and
  chat_send_batch(), migration 0013_event_keys; lastReadSeq: the watermark statements of
  store/reads.py; deliveredSeq: store/delivery.py). Each takes the keys from `store_keys()` as a
  parameter and fills them in by position: the keys are written here only.
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

from ..models import MessageRecord, SentMessage, UserId
from ..runtime import tracing

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


def _user_id(value: Any) -> Any:
    """A user id read back: text as it is; a number (an event written before user ids were text,
    migration 0014_text_user_ids, still in the outbox or on Kafka) as its decimal text, the same id."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _user_ids(value: Any) -> Any:
    return [_user_id(v) for v in value] if isinstance(value, list) else value


def _nullable(codec: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else codec(value)


# JSON form of the field types that are not JSON already: (encode, decode).
_CODECS: dict[Any, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    UUID: (str, UUID),
    datetime: (datetime.isoformat, datetime.fromisoformat),
    UserId: (_same, _user_id),
    list[UserId]: (_same, _user_ids),
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
    # True: for the member it names (user_id) only, on all of their devices; the dispatcher
    # offers it to nobody else (the member's own settings and own unread start).
    OWN: ClassVar[bool] = False
    FIELDS: ClassVar[tuple[WireField, ...]]
    # (name, key, encode or None, optional: left out when None)
    _PRODUCED: ClassVar[tuple[tuple[str, str, Callable[[Any], Any] | None, bool], ...]]
    _READ: ClassVar[tuple[tuple[str, str, Callable[[Any], Any] | None, bool], ...]]  # ..., decode, required
    _USER_KEYS: ClassVar[tuple[tuple[str, Callable[[Any], Any]], ...]]  # (key, decode) of the user id fields
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

    @classmethod
    def store_keys(cls) -> list[str]:
        """The wire keys of the fields the store fills in, in their definition's order: the statements that
        write the outbox row take them as a parameter and fill them in by position (MessageNew: the seq,
        then the time; ReadUpdated and DeliveryUpdated: the watermark), so no SQL names an event key."""
        return [wire.key for wire in cls.FIELDS if wire.filled_by == STORE]

    def payload(self) -> dict[str, Any]:
        """The outbox payload the producer writes: its own fields (the store adds its own)."""
        out: dict[str, Any] = {"type": self.TYPE}
        for name, key, encode, optional in self._PRODUCED:  # on every write: kept short
            value = getattr(self, name)
            if value is None and optional:
                continue  # an optional field left out reads back as its default (None)
            out[key] = value if encode is None else encode(value)
        if tracing.ON:
            tracing.stamp(out)  # the trace it was written in goes on with it (taken out by the relay)
        return out

    def outbox_row(self) -> tuple[str, dict[str, Any]]:
        """(key, payload) for store.outbox.append: keyed by the conversation."""
        return str(self.conversation_id), self.payload()

    def to_wire(self) -> dict[str, Any]:
        """The whole JSON form, as a subscriber receives it (a field not filled in is left out)."""
        out: dict[str, Any] = {"type": self.TYPE}
        for wire in self.FIELDS:
            value = getattr(self, wire.name)
            if value is not None and (wire.filled_by == PRODUCER or value != wire.default):
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
    hints = get_type_hints(cls, include_extras=True)  # UserId is Annotated: kept, for its codec
    wires = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        base = hints[f.name]
        optional = getattr(base, "__args__", None)
        nullable = False
        if optional is not None and type(None) in optional:  # `datetime | None`: the type is datetime
            (base,) = (arg for arg in optional if arg is not type(None))
            nullable = True
        encode, decode = _CODECS.get(base, (_same, _same))
        default = None if f.default is dataclasses.MISSING else f.default
        filled_by = f.metadata.get("filled_by", PRODUCER)
        if nullable and filled_by == PRODUCER and (encode, decode) != (_same, _same):  # None stays None
            encode, decode = _nullable(encode), _nullable(decode)
        wires.append(WireField(f.name, _camel(f.name), filled_by, encode, decode, default))
    cls.FIELDS = tuple(wires)
    cls._USER_KEYS = tuple((w.key, w.decode) for w in wires if _is_user_id(hints[w.name]))
    # Required: the store's fields and the producer's that have no default (a producer's optional field may be null).
    optional_keys = {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}  # type: ignore[arg-type]
    cls._PRODUCED = tuple(
        (w.name, w.key, None if w.encode is _same else w.encode, w.name in optional_keys)
        for w in wires
        if w.filled_by == PRODUCER
    )
    cls._READ = tuple(
        (
            w.name,
            w.key,
            None if w.decode is _same else w.decode,
            w.filled_by == STORE or (w.filled_by == PRODUCER and w.name not in optional_keys),
        )
        for w in wires
    )
    if cls.TYPE in REGISTRY:
        raise ValueError(f"two event kinds are called {cls.TYPE}")
    REGISTRY[cls.TYPE] = cls
    return cls


def _is_user_id(hint: Any) -> bool:
    return hint in (UserId, list[UserId]) or UserId in getattr(hint, "__args__", ())


def with_text_user_ids(data: dict[str, Any]) -> dict[str, Any]:
    """data with its user ids as text, in place: a consumer that routes raw dicts (the dispatcher, the
    webhook deliverer) calls it first, so an event written before 0014_text_user_ids (numbers) names
    the same users as one written after. Unknown types are left as they are."""
    cls = REGISTRY.get(data.get("type"))  # type: ignore[arg-type]
    if cls is not None:
        for key, decode in cls._USER_KEYS:
            value = data.get(key)
            if value is not None and not isinstance(value, str):
                data[key] = decode(value)
    return data


def parse(data: dict[str, Any]) -> Event:
    """The typed event of a dispatched dict, by its "type" (KeyError for an unknown type)."""
    return REGISTRY[data["type"]].from_wire(data)


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class MessageNew(SentMessage, Event):
    """A message was stored: what its sender gave (models.SentMessage: conversation_id, sender_id,
    client_msg_id, body, reply_to_seq), and the seq and time the store gave it. Carries every common field
    of Message, so fanout needs no query per subscriber."""

    TYPE: ClassVar[str] = "message.new"
    seq: int | None = stored()
    created_at: datetime | None = stored()


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class ReadUpdated(Event):
    """A member's watermark moved (lastReadSeq: where to). In a big group the dispatcher may pass on
    only the newest of several moves: coalesced, with how many it stands for."""

    TYPE: ClassVar[str] = "read.updated"
    conversation_id: int
    user_id: UserId
    last_read_seq: int | None = stored()
    coalesced: bool = dispatched(False)
    moves: int = dispatched(1)


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class MembersAdded(Event):
    TYPE: ClassVar[str] = "member.added"
    conversation_id: int
    user_ids: list[UserId]


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class MemberRemoved(Event):
    TYPE: ClassVar[str] = "member.removed"
    conversation_id: int
    user_id: UserId


# The member's own state (read state): events for the member's own devices only (OWN).


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class MembershipUpdated(Event):
    """A member changed their own settings (updateMembership) or own unread start (markUnread):
    the state after the change. last_read_seq is the member's own read position (their unread
    count is lastSeq - lastReadSeq), which markUnread may hold below the watermark others see."""

    TYPE: ClassVar[str] = "membership.updated"
    OWN: ClassVar[bool] = True
    conversation_id: int
    user_id: UserId
    muted: bool
    archived: bool
    pinned: bool
    last_read_seq: int


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class SavedChanged(Event):
    """user_id saved (saved: true, to be reminded at remind_at, None: never) or unsaved (saved: false) the
    message at seq; version: the user's saved version the change took (services/saved.py)."""

    TYPE: ClassVar[str] = "saved.changed"
    OWN: ClassVar[bool] = True
    conversation_id: int
    user_id: UserId
    seq: int
    version: int
    saved: bool
    saved_at: datetime | None = None
    remind_at: datetime | None = None


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class ReminderDue(Event):
    """user_id's reminder of the message at seq fired (once: services/saved.py fire_due_reminders), at
    reminded_at for remind_at; version: the user's saved version the firing took."""

    TYPE: ClassVar[str] = "reminder.due"
    OWN: ClassVar[bool] = True
    conversation_id: int
    user_id: UserId
    seq: int
    version: int
    remind_at: datetime
    reminded_at: datetime


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadUpdated(Event):
    """A thread changed for a member (docs/guide/threads.md): a reply in a thread they follow (REPLY), a deleted
    reply in one (DELETE), or their own markThreadRead (READ), followThread (FOLLOW) or unfollowThread
    (UNFOLLOW): their thread state after it, and the version the change took (the member's thread versions in
    the conversation grow with each change: resuming threadUpdated after one skips what it already told)."""

    TYPE: ClassVar[str] = "thread.updated"
    OWN: ClassVar[bool] = True
    conversation_id: int
    user_id: UserId
    root_seq: int
    change: str
    last_reply_seq: int
    last_read_reply_seq: int
    unread_count: int
    following: bool
    # 0: written before thread versions existed (an outbox row from the previous release, relayed after
    # the upgrade); a resumed threadUpdated then counts it as already told
    version: int = 0


THREAD_REPLY, THREAD_READ, THREAD_FOLLOW, THREAD_UNFOLLOW = "REPLY", "READ", "FOLLOW", "UNFOLLOW"
THREAD_DELETE = "DELETE"


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class DraftUpdated(Event):
    """A member saved or cleared (body "") their draft of a conversation (root_seq 0) or of a thread
    (root_seq: the replyTo it will be sent with), on one of their devices: the draft after the save.
    version grows with every save of that draft; base_seq is the conversation's lastSeq at the save
    (a message of the member's after it, to the same place, clears the draft: store/drafts.py)."""

    TYPE: ClassVar[str] = "draft.updated"
    OWN: ClassVar[bool] = True
    conversation_id: int
    user_id: UserId
    root_seq: int
    body: str
    base_seq: int
    version: int
    updated_at: datetime


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationUpdated(Event):
    """A group was managed: renamed (RENAMED), a member's role changed (ROLE_CHANGED), a member
    left (MEMBER_LEFT: delivered to the one who left too), was banned (MEMBER_BANNED: delivered to
    the banned one too) or unbanned (MEMBER_UNBANNED), or the group's settings changed
    (SETTINGS_CHANGED: slow mode). user_id: who did it; member_id: whom it concerns (the one who
    did it for RENAMED and SETTINGS_CHANGED); title: the group's title after it; role: member_id's
    role after it ("" when they are not a member)."""

    TYPE: ClassVar[str] = "conversation.updated"
    conversation_id: int
    change: str
    user_id: UserId
    member_id: UserId
    title: str
    role: str


RENAMED, ROLE_CHANGED, MEMBER_LEFT = "RENAMED", "ROLE_CHANGED", "MEMBER_LEFT"
MEMBER_BANNED, MEMBER_UNBANNED, SETTINGS_CHANGED = "MEMBER_BANNED", "MEMBER_UNBANNED", "SETTINGS_CHANGED"
# the changes that take member_id out of the group: they are told too, before their subscriptions end
MEMBER_OUT = (MEMBER_LEFT, MEMBER_BANNED)


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryUpdated(Event):
    """A member's delivered watermark moved (deliveredSeq: where to; read implies delivered, so a
    read.updated moves it too). Not written for groups above the big-group threshold."""

    TYPE: ClassVar[str] = "delivery.updated"
    conversation_id: int
    user_id: UserId
    delivered_seq: int | None = stored()


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class Typing(Event):
    """A member is typing, until until_ms (epoch milliseconds). Ephemeral: never in PostgreSQL or
    the outbox; events/ephemeral.py puts it on the bus (or straight into this process's dispatcher),
    and it reaches the other members' typing subscriptions. It expires by itself."""

    TYPE: ClassVar[str] = "typing"
    conversation_id: int
    user_id: UserId
    until_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageChange(MessageRecord, Event):
    """A change to a stored message (not a message: it takes no seq). change_seq is the next value of the
    conversation's second gap-free counter; the message's fields (models.MessageRecord, inherited) are the
    message as it is after the change, the same fields Message has, so a subscriber (and a caching client, by
    the message's id) needs no query. user_id: who made the change (None: the operator, an erase or the
    retention policy). Each kind below is one TYPE of this shape."""

    TYPE: ClassVar[str]
    KIND: ClassVar[str]  # message_change.kind and GraphQL's MessageChangeKind
    change_seq: int
    user_id: UserId | None = None  # left out of the JSON when None
    reason: str | None = None  # the operator's change: ERASE or RETENTION (message_change.reason)


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class MessageEdited(MessageChange):
    """The sender changed the body (the previous one joins the edit history)."""

    TYPE: ClassVar[str] = "message.edited"
    KIND: ClassVar[str] = "EDITED"


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class MessageDeleted(MessageChange):
    """The message is a tombstone now (body '', deletedAt, deletedBy): its content is erased."""

    TYPE: ClassVar[str] = "message.deleted"
    KIND: ClassVar[str] = "DELETED"


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class ReactionChanged(MessageChange):
    """user_id added (added) or removed an emoji reaction; the message's reactions are read by who asks
    (reactedByViewer depends on them)."""

    TYPE: ClassVar[str] = "reaction.changed"
    KIND: ClassVar[str] = "REACTION"
    emoji: str | None = None
    added: bool | None = None


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class MessagePinned(MessageChange):
    """user_id pinned the message (or replaced its pin), at pinned_at, until expires_at (None: until unpinned)."""

    TYPE: ClassVar[str] = "message.pinned"
    KIND: ClassVar[str] = "PINNED"
    pinned_at: datetime | None = None
    expires_at: datetime | None = None


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class MessageUnpinned(MessageChange):
    """user_id unpinned the message."""

    TYPE: ClassVar[str] = "message.unpinned"
    KIND: ClassVar[str] = "UNPINNED"


# A user's own events, about no conversation: their conversation id is NO_CONVERSATION (so all of them share
# one outbox and Kafka key, in one order; they are few), and the dispatcher offers them to that user's
# all-conversations subscriptions only.
NO_CONVERSATION = 0


class UserEvent(Event):
    """An event for one user's devices (user_id), about no conversation."""

    __slots__ = ()
    user_id: str


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class BlockChanged(UserEvent):
    """user_id blocked (blocked: true) or unblocked other_id; for user_id's own devices."""

    TYPE: ClassVar[str] = "block.changed"
    conversation_id: int = NO_CONVERSATION
    user_id: UserId
    other_id: UserId
    blocked: bool


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class UserBanned(UserEvent):
    """The operator banned user_id app-wide (until: when it ends; None: until lifted): every live session
    of theirs ends at once, in every process."""

    TYPE: ClassVar[str] = "user.banned"
    conversation_id: int = NO_CONVERSATION
    user_id: UserId
    until: datetime | None = None


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class UserUnbanned(UserEvent):
    """The operator lifted user_id's app-wide ban: every process accepts their token again."""

    TYPE: ClassVar[str] = "user.unbanned"
    conversation_id: int = NO_CONVERSATION
    user_id: UserId


@register
@dataclass(frozen=True, slots=True, kw_only=True)
class PresenceChanged(UserEvent):
    """user_id's presence may have changed: online (any process holds a connection of theirs) as the
    process that saw a connection of theirs open or close found it, and their last seen then (None:
    as stored, which each watcher reads). Ephemeral, like typing: never in PostgreSQL or the outbox
    (events/ephemeral.py). The dispatcher offers it to the subscriptions registered under user_id for
    it: those watching them (graphql/features/presence.py), which check who may see it."""

    TYPE: ClassVar[str] = "presence.changed"
    conversation_id: int = NO_CONVERSATION
    user_id: UserId
    online: bool
    last_seen_at: datetime | None = None


# Every change kind, derived from the registry (GraphQL's MessageChangeKind is derived from it too):
# a new kind is its class above, registered.
CHANGE_KINDS: dict[str, type[MessageChange]] = {
    cls.KIND: cls for cls in REGISTRY.values() if issubclass(cls, MessageChange)
}
# The channel the dispatcher files every change kind under: one messageChanged subscription takes them all.
MESSAGE_CHANGED = "message.changed"
CHANNELS: dict[str, str] = {kind.TYPE: MESSAGE_CHANGED for kind in CHANGE_KINDS.values()}


# The types by name, for code that routes dicts (events/dispatch.py).
MESSAGE_NEW = MessageNew.TYPE
READ_UPDATED = ReadUpdated.TYPE
MEMBERS_ADDED = MembersAdded.TYPE
MEMBER_REMOVED = MemberRemoved.TYPE
MEMBERSHIP_UPDATED = MembershipUpdated.TYPE
THREAD_UPDATED = ThreadUpdated.TYPE
CONVERSATION_UPDATED = ConversationUpdated.TYPE
DELIVERY_UPDATED = DeliveryUpdated.TYPE
TYPING = Typing.TYPE
SAVED_CHANGED = SavedChanged.TYPE
REMINDER_DUE = ReminderDue.TYPE
DRAFT_UPDATED = DraftUpdated.TYPE
BLOCK_CHANGED = BlockChanged.TYPE
USER_BANNED = UserBanned.TYPE
USER_UNBANNED = UserUnbanned.TYPE
PRESENCE_CHANGED = PresenceChanged.TYPE
# Kinds for their own member only (Event.OWN), derived from the registry.
OWN_TYPES = frozenset(kind for kind, cls in REGISTRY.items() if cls.OWN)
# Kinds about no conversation, for one user (UserEvent).
USER_TYPES = frozenset(kind for kind, cls in REGISTRY.items() if issubclass(cls, UserEvent))
# The keys the store fills in of the events its statements write (Event.store_keys()), once.
MESSAGE_KEYS = MessageNew.store_keys()
READ_KEYS = ReadUpdated.store_keys()
DELIVERY_KEYS = DeliveryUpdated.store_keys()
