"""GraphQL object types of the contract, built from store rows."""

from __future__ import annotations

import base64
import dataclasses
import enum
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, TypeVar, cast
from uuid import UUID

import strawberry
from strawberry import ID
from strawberry.types import Info
from strawberry.types.base import StrawberryOptional
from strawberry.types.nodes import FragmentSpread, InlineFragment
from strawberry.utils.str_converters import to_camel_case

from ..db import Row
from ..engine.registry import PER_EVENT
from ..errors import BadUserInput, conversation_not_found
from ..events.types import MessageChange as MessageChange_
from ..models import MESSAGE_FIELDS, MESSAGE_PLAIN_FIELDS, MessageRecord
from ..services.checks import (
    MAX_ID,
    PageRequest,
    check_member_page,
    check_message_page,
    check_page_size,
    check_seq_cursor,
)
from ..services.history import far_behind
from ..services.membership import private_receipts_of
from ..store.conversations import LAST_MESSAGE_PREFIX, last_message_fields
from . import ids
from .loaders import DeliveredKey, Loaders, MemberPageKey, PageKey, ReactedByKey, SeenByKey, SeenKey
from .scalars import Long

_NOT_LOADED: Any = object()


def selects(selections: list[Any], *path: str) -> bool:
    """Whether the field at path (GraphQL names) is selected among info.selected_fields
    selections, looking through fragments (@skip/@include are not evaluated)."""
    head, *rest = path
    for selection in selections:
        if isinstance(selection, FragmentSpread | InlineFragment):
            if selects(selection.selections, *path):
                return True
        elif selection.name == head and (not rest or selects(selection.selections, *rest)):
            return True
    return False


def selections_at(selections: list[Any], *path: str) -> list[list[Any]]:
    """The selections of every field at path (GraphQL names) among info.selected_fields selections,
    looking through fragments (@skip/@include are not evaluated)."""
    head, *rest = path
    found: list[list[Any]] = []
    for selection in selections:
        if isinstance(selection, FragmentSpread | InlineFragment):
            found += selections_at(selection.selections, *path)
        elif selection.name == head:
            found += selections_at(selection.selections, *rest) if rest else [selection.selections]
    return found


def selects_only(selections: list[Any], names: frozenset[str]) -> bool:
    """Whether every field these selections select (through fragments) is one of names."""
    return all(
        selects_only(selection.selections, names)
        if isinstance(selection, FragmentSpread | InlineFragment)
        else selection.name in names
        for selection in selections
    )


@strawberry.enum
class ConversationType(enum.Enum):
    DIRECT = "DIRECT"
    GROUP = "GROUP"


_CONVERSATION_TYPES = {member.value: member for member in ConversationType}  # a lookup, not an Enum call


@strawberry.enum
class MemberRole(enum.Enum):
    OWNER = "OWNER"
    MEMBER = "MEMBER"
    ADMIN = "ADMIN"  # renames the group, changes roles (not the OWNER's)


@strawberry.interface(
    description="An object a client may cache by its `id` (Relay Global Object Identification): "
    "`id` is unique across all types and never changes; Query.node(id:) fetches the object again. "
    "A conversation's id is its decimal conversationId; other ids are opaque."
)
class Node:
    @strawberry.field(description="Globally unique and stable; opaque except for a Conversation's.")
    def id(self) -> ID:  # every implementation overrides it
        raise NotImplementedError


@strawberry.type
class PageInfo:
    has_next_page: bool
    has_previous_page: bool
    start_cursor: str | None
    end_cursor: str | None


@strawberry.type
class Member(Node):
    user_id: ID
    last_read_seq: Long
    conversation_id: strawberry.Private[int]
    # The membership row; None for a member built from a read.updated event, which
    # carries only the ids and the watermark: role and joinedAt are then loaded.
    row: strawberry.Private[Any] = None
    new_loaders: strawberry.Private[Callable[[], Loaders] | None] = None
    loaders: strawberry.Private[Loaders | None] = None

    @classmethod
    def from_row(cls, row: Any) -> Member:
        return cls(
            user_id=ID(str(row.user_id)), last_read_seq=row.last_read_seq, conversation_id=row.conversation_id, row=row
        )

    @strawberry.field(metadata=PER_EVENT, description="Globally unique and stable; opaque.")
    def id(self) -> ID:
        return ID(ids.member_id(self.conversation_id, str(self.user_id)))

    @strawberry.field
    def role(self, info: Info) -> MemberRole:
        if self.row is not None:
            return MemberRole(self.row.role)
        return self._load_row(info, "role")  # type: ignore[return-value]

    @strawberry.field
    def joined_at(self, info: Info) -> datetime:
        if self.row is not None:
            return self.row.joined_at
        return self._load_row(info, "joined_at")  # type: ignore[return-value]

    async def _load_row(self, info: Info, column: str) -> Any:
        if self.loaders is None and self.new_loaders is not None:
            self.loaders = self.new_loaders()
        loaders = self.loaders or info.context.loaders
        row = await loaders.member.load((self.conversation_id, str(self.user_id)))
        if row is None:  # left since the event
            raise conversation_not_found(self.conversation_id)
        self.row = row
        return getattr(row, column) if column != "role" else MemberRole(row.role)


@strawberry.type(description="A MessageEdit: a body the message had before an edit.")
class MessageEdit:
    body: str
    written_at: datetime = strawberry.field(description="When this body was sent, or written by an earlier edit.")
    replaced_at: datetime = strawberry.field(
        description="When an edit replaced it: the editedAt that edit gave the message."
    )
    change_seq: Long = strawberry.field(description="The change seq of the edit that replaced it.")


@strawberry.type(description="A file a message points to: its metadata (the bytes live in the client's storage).")
class Attachment:
    url: str
    mime_type: str
    name: str
    size_bytes: Long
    width: int | None
    height: int | None


@strawberry.input(description="A file to attach to a message: validated metadata only (CHATGQL_MAX_ATTACHMENTS).")
class AttachmentInput:
    url: str = strawberry.field(description="http(s), at most 2,048 characters.")
    mime_type: str = strawberry.field(description="type/subtype, e.g. image/png.")
    name: str = strawberry.field(description="1..255 characters.")
    size_bytes: Long = strawberry.field(description="0..CHATGQL_MAX_ATTACHMENT_BYTES.")
    width: int | None = strawberry.field(default=None, description="Pixels, 1..100,000, for images and video.")
    height: int | None = strawberry.field(default=None, description="Pixels, 1..100,000.")


@strawberry.type(description="One emoji on a message: how many reacted with it, and whether the viewer did.")
class ReactionSummary:
    emoji: str
    count: int
    reacted_by_viewer: bool


@strawberry.type
class Message(Node):
    conversation_id: ID
    seq: Long
    sender_id: ID
    client_msg_id: UUID
    body: str = strawberry.field(description="The current body (after edits); empty for a deleted message.")
    created_at: datetime
    edited_at: datetime | None = strawberry.field(
        default=None, description="When the body was last edited; null when never."
    )
    deleted_at: datetime | None = strawberry.field(
        default=None,
        description="Set when the message was deleted: it stays at its seq as a tombstone, its body and edit "
        "history erased.",
    )
    deleted_by: ID | None = strawberry.field(
        default=None,
        description="Who deleted it (the sender, or a group's owner or admin); null when not deleted, or when "
        "deletedAt is set and the operator erased it (an erase of the sender's messages, or the retention policy).",
    )
    reply_count: int = strawberry.field(
        default=0, description="How many messages reply to this one (deleted replies not counted)."
    )
    last_reply_at: datetime | None = strawberry.field(
        default=None, description="The createdAt of the newest reply that is not deleted."
    )
    reply_to_seq: strawberry.Private[int | None] = None
    # Set on subscription events: makes that event's own loaders, on first use (see subscriptions.py).
    new_loaders: strawberry.Private[Callable[[], Loaders] | None] = None
    loaders: strawberry.Private[Loaders | None] = None

    def _loaders(self, info: Info) -> Loaders:
        if self.loaders is None and self.new_loaders is not None:
            self.loaders = self.new_loaders()
        return self.loaders or info.context.loaders

    @classmethod
    def from_row(cls, row: Any) -> Message:
        """row: a message's fields by name (models.MessageRecord): a Row of store.messages.MESSAGE_COLUMNS,
        a MessageRecord (a service's new message), or a change event (events.types.MessageChange)."""
        return cls(**cls.fields_of(row))

    @staticmethod
    def fields_of(row: Any) -> dict[str, Any]:
        """Message's arguments from a message's fields by name (as from_row takes them); an object without
        some of them (a message.new event: none of the lifecycle) gives their defaults."""
        # An ID field gets the id's text, not ID(text): strawberry's ID is a NewType, the same str at
        # run time, and calling it is a Python call for each of the three id fields.
        values: dict[str, Any] = {}
        if isinstance(row, Row):  # columns by key: a Row's attribute access is a Python __getattr__
            for name, is_id in _RECORD:
                value = row[name]
                values[name] = str(value) if is_id and value is not None else value
            return values
        for name, is_id, default in _RECORD_DEFAULTS:
            value = getattr(row, name, default)
            values[name] = str(value) if is_id and value is not None else value
        return values

    # The fields that read nothing of its lifecycle (edits, deletes, replies: models.MessageRecord's
    # lifecycle fields): an inbox page whose lastMessage selects only these reads the message without
    # those columns (Query.inbox). Set below, from the record.
    PLAIN_FIELDS: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def last_in_inbox_row(cls, conversation_id: ID, row: Row, lifecycle: bool = True) -> Message | None:
        """The message at the conversation's last_seq in a row of
        store.conversations.inbox_page_with_last_messages; None when it has none. lifecycle=False:
        a row without the lifecycle columns (the message is fit for PLAIN_FIELDS only)."""
        if row[_LAST_SENDER] is None:
            return None
        values: dict[str, Any] = {"conversation_id": conversation_id, "seq": row["last_seq"]}
        for key, name, is_id in _LAST_RECORD[lifecycle]:
            value = row[key]
            values[name] = ID(str(value)) if is_id and value is not None else value
        return cls(**values)

    @strawberry.field(metadata=PER_EVENT, description="Globally unique and stable; opaque.")
    def id(self) -> ID:
        return ID(ids.message_id(int(self.conversation_id), self.seq))

    def _seen_key(self) -> SeenKey:
        return SeenKey(int(self.conversation_id), self.seq, str(self.sender_id))

    @strawberry.field(metadata=PER_EVENT, description="Members other than the sender whose lastReadSeq >= seq.")
    async def seen_by_count(self, info: Info) -> int:
        return (await self._loaders(info).seen.load(self._seen_key())).count

    @strawberry.field(
        metadata=PER_EVENT,
        description='User ids of those members, at most `first` of them, ascending in text order (byte by byte: "10" before "9"). '
        "after (additive): only user ids above it; page with after = the last id of the previous "
        "page. first is capped at CHATGQL_MEMBERS_PAGE_MAX (default 1,000).",
    )
    async def seen_by(self, info: Info, first: int | None = 100, after: ID | None = strawberry.UNSET) -> list[ID]:
        after_id, limit = check_member_page(
            100 if first is None else first, _given(after), default=100, cap=info.context.settings.members_page_max
        )
        key = SeenByKey(int(self.conversation_id), self.seq, str(self.sender_id), after_id, limit)
        return [ID(str(uid)) for uid in await self._loaders(info).seen_by.load(key)]

    @strawberry.field(
        metadata=PER_EVENT,
        description="True when every member other than the sender has read it (in a DIRECT chat: the other person).",
    )
    async def seen(self, info: Info) -> bool:
        return (await self._loaders(info).seen.load(self._seen_key())).everyone

    @strawberry.field(
        description="The files it points to (sendMessage(attachments:)), in order; empty for a deleted message "
        "(their metadata is erased with it)."
    )
    async def attachments(self, info: Info) -> list[Attachment]:
        if self.deleted_at is not None:
            return []
        rows = await self._loaders(info).attachments.load((int(self.conversation_id), self.seq))
        return [
            Attachment(
                url=r["url"],
                mime_type=r["mime_type"],
                name=r["name"],
                size_bytes=Long(r["size_bytes"]),
                width=r["width"],
                height=r["height"],
            )
            for r in rows
        ]

    @strawberry.field(
        description="The message this one replies to (sendMessage(replyTo:)), as it is now: its tombstone if "
        "deleted; null when this is no reply."
    )
    async def reply_to(self, info: Info) -> Message | None:
        if self.reply_to_seq is None:
            return None
        row = await self._loaders(info).message.load((int(self.conversation_id), self.reply_to_seq))
        return Message.from_row(row) if row is not None else None

    @strawberry.field(
        description="The replies to this message, ascending by seq: at most `first` (1..200, default 50) with "
        'seq > `after` (a message cursor, its seq in decimal; "0" or none: from the first). Page with after = '
        "the last reply's seq until fewer than `first` come back. replyCount says how many in all."
    )
    async def replies(self, info: Info, first: int | None = 50, after: str | None = None) -> list[Message]:
        limit = check_page_size(first, "first")
        after_seq = check_seq_cursor(after, "after") or 0
        if self.reply_count == 0:
            return []
        key = (int(self.conversation_id), self.seq, after_seq, limit)
        return [Message.from_row(row) for row in await self._loaders(info).replies.load(key)]

    @strawberry.field(
        description="Its reactions, one per emoji in the order each first appeared (at most "
        "CHATGQL_MAX_REACTIONS_PER_MESSAGE): the stored count, and whether the viewer is among them. "
        "Empty for a deleted message (its reactions are erased with it)."
    )
    async def reactions(self, info: Info) -> list[ReactionSummary]:
        if self.deleted_at is not None:
            return []
        rows = await self._loaders(info).reactions.load((int(self.conversation_id), self.seq))
        return [ReactionSummary(emoji=r["emoji"], count=r["count"], reacted_by_viewer=r["mine"]) for r in rows]

    @strawberry.field(
        description="Who reacted with `emoji`: user ids ascending in text order, at most `first` (default 100, capped by "
        "CHATGQL_MEMBERS_PAGE_MAX), above `after`; page with after = the last id of the previous page."
    )
    async def reacted_by(
        self, info: Info, emoji: str, first: int | None = 100, after: ID | None = strawberry.UNSET
    ) -> list[ID]:
        after_id, limit = check_member_page(
            100 if first is None else first, _given(after), default=100, cap=info.context.settings.members_page_max
        )
        key = ReactedByKey(int(self.conversation_id), self.seq, emoji, after_id, limit)
        return [ID(str(uid)) for uid in await self._loaders(info).reacted_by.load(key)]

    @strawberry.field(
        description="The bodies it had before its edits, oldest first (any member may read them); empty when "
        "never edited, and for a deleted message (its history is erased with it)."
    )
    async def edit_history(self, info: Info) -> list[MessageEdit]:
        if self.edited_at is None or self.deleted_at is not None:
            return []
        rows = await self._loaders(info).edit_history.load((int(self.conversation_id), self.seq))
        return [
            MessageEdit(
                body=row["body"],
                written_at=row["written_at"],
                replaced_at=row["replaced_at"],
                change_seq=Long(row["change_seq"]),
            )
            for row in rows
        ]

    @strawberry.field(
        description="The members this message mentions (sendMessage(mentions:)), ascending in text order."
    )
    async def mentions(self, info: Info) -> list[ID]:
        found = await self._loaders(info).mentions.load((int(self.conversation_id), self.seq))
        return [ID(str(uid)) for uid in found]

    # Delivered receipts (markDelivered; read implies delivered). Big groups: services/delivery.py.
    def _delivered_key(self, info: Info) -> DeliveredKey:
        whole = info.context.settings.big_group_threshold
        return DeliveredKey(int(self.conversation_id), self.seq, str(self.sender_id), whole)

    @strawberry.field(
        description="True when every member other than the sender has it delivered (markDelivered) or read "
        "(in a DIRECT chat: the other person). In a group of more than CHATGQL_BIG_GROUP_THRESHOLD members, "
        "where delivery is not tracked for others: the same as seen."
    )
    async def delivered(self, info: Info) -> bool:
        loaders = self._loaders(info)
        found = await loaders.delivered.load(self._delivered_key(info))
        if found is None:
            return (await loaders.seen.load(self._seen_key())).everyone
        return found.everyone

    @strawberry.field(
        description="Members other than the sender who have it delivered or read. Null in a group of more than "
        "CHATGQL_BIG_GROUP_THRESHOLD members (delivery counts are not kept there; seenByCount is)."
    )
    async def delivered_count(self, info: Info) -> int | None:
        found = await self._loaders(info).delivered.load(self._delivered_key(info))
        return None if found is None else found.count


def _graphql_id(kind: Any) -> bool:
    return kind is ID or (isinstance(kind, StrawberryOptional) and kind.of_type is ID)


def _message_record() -> tuple[tuple[str, bool], ...]:
    """(name, is an ID) of each of models.MessageRecord's fields, as Message takes it: a field of the same
    name (an ID field gets the id as text), or a private one."""
    kinds = {f.python_name: f.type for f in cast(Any, Message).__strawberry_definition__.fields}
    missing = set(MESSAGE_FIELDS) - set(kinds)
    if missing:
        raise AssertionError(f"Message has no field for {sorted(missing)} of models.MessageRecord")
    return tuple((name, _graphql_id(kinds[name])) for name in MESSAGE_FIELDS)


_RECORD = _message_record()
# _RECORD with each field's default beside it (None when it has none): what fields_of gives for a
# field an object lacks. A look-up of it in a dict per field was a third of fields_of.
_RECORD_DEFAULTS = tuple(
    (name, is_id, None if f.default is dataclasses.MISSING else f.default)
    for (name, is_id), f in zip(_RECORD, dataclasses.fields(MessageRecord), strict=True)
)
_LAST_RECORD = {
    lifecycle: tuple(
        (LAST_MESSAGE_PREFIX + name, name, is_id) for name, is_id in _RECORD if name in last_message_fields(lifecycle)
    )
    for lifecycle in (True, False)
}
_LAST_SENDER = LAST_MESSAGE_PREFIX + "sender_id"
Message.PLAIN_FIELDS = frozenset(
    ("__typename", "id")
    + tuple(to_camel_case(name) for name in MESSAGE_PLAIN_FIELDS)
    + ("seen", "seenByCount", "seenBy")  # by conversation, seq and sender (_seen_key)
)


@strawberry.type
class MessageEdge:
    cursor: str
    node: Message


@strawberry.type(
    description="Messages ascending by seq. A message cursor is its seq in decimal, so a\n"
    'client may build one from a seq it holds: after: "40" gives seq 41, 42, ...\n'
    "No arguments, or only `last`, gives the newest messages. `first` and `last`\n"
    "are 1..200 (default 50); `first` goes with `after`, `last` with `before`.\n"
    "Whatever the distance from the cursor, a page is the one adjacent to it (Relay's\n"
    "Cursor Connections): `first`/`after` the oldest messages with seq > after, `last`/`before`\n"
    'the newest with seq < before, and pageInfo is exact, so paging forward from after: "0"\n'
    "until hasNextPage is false (or backward until hasPreviousPage is false) visits every\n"
    "message once, in order."
)
class MessageConnection:
    edges: list[MessageEdge]
    nodes: list[Message]
    page_info: PageInfo
    gap_too_long: bool = strawberry.field(
        default=False,
        description="Advice only, never a different page: true on a forward page (`after` given) when `after` "
        "is more than CHATGQL_MAX_CATCH_UP (default 1,000) messages behind the newest message the page "
        "could reach (lastSeq, or `before`). The page is still the one right after `after`; a client that "
        "only wants to be current may drop what it holds and jump to the newest page (`last`) instead of "
        "paging through the gap. False otherwise (and always on backward pages).",
    )

    @classmethod
    def from_page(
        cls, rows: list[Any], page: PageRequest, last_seq: int, gap_too_long: bool = False
    ) -> MessageConnection:
        """rows: the page as fetched (limit + 1 rows at most, newest first when from_end)."""
        more = len(rows) > page.limit
        rows = rows[: page.limit]
        if page.from_end:
            rows.reverse()
            has_previous, has_next = more, page.before is not None and page.before <= last_seq
        else:
            has_previous, has_next = page.after > 0 and last_seq > 0, more
        nodes = [Message.from_row(row) for row in rows]
        return cls(
            edges=[MessageEdge(cursor=str(node.seq), node=node) for node in nodes],
            nodes=nodes,
            page_info=PageInfo(
                has_next_page=has_next,
                has_previous_page=has_previous,
                start_cursor=str(nodes[0].seq) if nodes else None,
                end_cursor=str(nodes[-1].seq) if nodes else None,
            ),
            gap_too_long=gap_too_long,
        )


# The arguments of Query.messages and Conversation.messages, and what each guarantees.
PageFirst = Annotated[
    int | None,
    strawberry.argument(
        description="Forward: at most this many messages (1..200, default 50), the oldest ones with seq > `after` "
        "(and < `before` when given): always the page right after `after`, however far behind it is. "
        "pageInfo.hasNextPage: more follow within that range; hasPreviousPage: some message has seq <= `after`."
    ),
]
PageAfter = Annotated[
    str | None,
    strawberry.argument(
        description='A message cursor: a seq in decimal ("0": before the first message). With `first`, or alone: '
        "the page starts right after it, whatever the distance (gapTooLong only advises, see MessageConnection). "
        "With `last`: a lower bound. Paging forward with after = the previous page's endCursor until "
        "hasNextPage is false visits every message once, in order."
    ),
]
PageLast = Annotated[
    int | None,
    strawberry.argument(
        description="Backward: at most this many messages (1..200, default 50), the newest ones with seq < `before` "
        "(every message when no `before`; > `after` when given): always the page right before `before`, however "
        "far. pageInfo.hasPreviousPage: more precede within that range; hasNextPage: some message has seq >= `before`."
    ),
]
PageBefore = Annotated[
    str | None,
    strawberry.argument(
        description="A message cursor: a seq in decimal. With `last`, or alone: the page ends right before it, "
        "whatever the distance. With `first`: an upper bound. Paging backward with before = the previous page's "
        "startCursor until hasPreviousPage is false visits every message once, in order."
    ),
]

T = TypeVar("T")


def _given(value: T) -> T | None:
    """None for an argument the query left out (strawberry.UNSET)."""
    return None if value is strawberry.UNSET else value


async def load_message_page(
    info: Info,
    conversation_id: int,
    last_seq: int,
    first: int | None,
    after: str | None,
    last: int | None,
    before: str | None,
) -> MessageConnection:
    page = check_message_page(_given(first), _given(after), _given(last), _given(before))
    # Catching up from a seq the client holds: flagged when far behind, never moved.
    behind = _given(after) is not None and far_behind(page, last_seq, info.context.settings.max_catch_up)
    rows = await info.context.loaders.message_page.load(PageKey(conversation_id, page))
    return MessageConnection.from_page(list(rows), page, last_seq, behind)


@strawberry.type
class Conversation(Node):
    id: ID = strawberry.field(
        description="Its conversationId in decimal; also its global id (Node.id): node(id:) takes it."
    )
    type: ConversationType
    title: str | None = strawberry.field(description="Groups only; null for DIRECT.")
    last_seq: Long = strawberry.field(description="Seq of the newest message; 0 when there is none.")
    last_message_at: datetime | None
    created_at: datetime
    last_read_seq: Long = strawberry.field(
        description="The viewer's own read position here: the watermark others see (Member.lastReadSeq), but "
        "below it after a markUnread and above it after a markRead with private receipts."
    )
    # A value, not a resolver: an inbox page asks for it on every node.
    unread_count: Long = strawberry.field(
        description="lastSeq - lastReadSeq for the viewer, less the deleted messages above lastReadSeq."
    )
    # The viewer's own settings (updateMembership): values, read with the membership row.
    muted: bool = strawberry.field(
        default=False,
        description="The viewer muted it (and the mute has not expired): its unread stays out of "
        "Viewer.totalUnread and unreadConversations (its own unreadCount still counts).",
    )
    muted_until: datetime | None = strawberry.field(
        default=None, description="When the viewer's mute ends; null when not muted or muted until unmuted."
    )
    archived: bool = strawberry.field(
        default=False,
        description="The viewer archived it: out of the default inbox until its next new message "
        "(unless keptArchived).",
    )
    kept_archived: bool = strawberry.field(
        default=False, description="Archived with keepArchived: new messages do not bring it back."
    )
    pinned_at: datetime | None = strawberry.field(
        default=None,
        description="When the viewer pinned it (null: not pinned); pinned conversations come first in the "
        "inbox, in the order they were pinned.",
    )
    last_change_seq: Long = strawberry.field(
        default=Long(0),
        description="The newest change seq: edits, deletes and reactions (which never take a message seq) each take the "
        "next value of this second gap-free counter. A client holds it beside its message cursor and passes it "
        "to sync (afterChangeSeq) and messageChanged (cursors) to learn what changed while it was away.",
    )
    private_receipts: bool = strawberry.field(
        default=False,
        description="The viewer's read receipts are private here: others' seen, seenBy, seenByCount, delivered "
        "and deliveredCount leave the viewer out (updateMembership(privateReceipts:), updateViewerSettings).",
    )
    # Set by an inbox page that read every node's last message with the page (see Query.inbox).
    preloaded_last_message: strawberry.Private[Any] = _NOT_LOADED

    # The fields that read none of the membership's settings: an inbox page whose nodes select only
    # these reads the page without those columns (Query.inbox, store.conversations.inbox_page).
    PLAIN_FIELDS: ClassVar[frozenset[str]] = frozenset(
        ("__typename", "id", "type", "title", "lastSeq", "lastMessageAt", "createdAt", "lastReadSeq")
        + ("unreadCount", "pinnedAt", "pinned", "lastMessage", "unreadMentions", "memberCount", "members")
        + ("messages",)
    )

    @classmethod
    def from_row(cls, row: Any, settings: bool = True) -> Conversation:
        """row: a conversation joined with the viewer's membership (store.conversations.for_viewer).
        settings=False: an inbox row without the settings columns (fit for PLAIN_FIELDS only)."""
        # Columns by key: a Row's attribute access is a Python __getattr__ (an inbox page reads
        # hundreds of them).
        # lastReadSeq is the viewer's own read position (markUnread may hold it below the watermark
        # others see: store.conversations.OWN_READ).
        last_seq, last_read_seq = row["last_seq"], row["own_read"]
        unread = last_seq - last_read_seq - row["unread_deleted"]
        conversation = cls(
            id=ID(str(row["id"])),
            type=_CONVERSATION_TYPES[row["type"]],
            title=row["title"],
            last_seq=last_seq,
            last_message_at=row["last_message_at"],
            created_at=row["created_at"],
            last_read_seq=last_read_seq,
            unread_count=Long(unread if unread > 0 else 0),
            pinned_at=row["pinned_at"],
        )
        if settings:
            muted, archived = row["muted"], row["archived"]
            conversation.last_change_seq = row["last_change_seq"]
            conversation.muted = muted
            conversation.muted_until = row["muted_until"] if muted else None
            conversation.archived = archived
            conversation.kept_archived = archived and row["keep_archived"]
            conversation.private_receipts = row["receipts_private"]
        return conversation

    @strawberry.field(description="The viewer pinned it (pinnedAt is not null).")
    def pinned(self) -> bool:
        return self.pinned_at is not None

    @strawberry.field(description="Messages after the viewer's lastReadSeq that mention the viewer (muted or not).")
    async def unread_mentions(self, info: Info) -> int:
        return await info.context.loaders.unread_mentions.load(int(self.id))

    @strawberry.field
    async def member_count(self, info: Info) -> int:
        return await info.context.loaders.member_count.load(int(self.id))

    @strawberry.field(
        description='Members ascending by user id in text order (byte by byte: "10" before "9"). Additive arguments: at most `first` of them '
        "(default and cap: CHATGQL_MEMBERS_PAGE_MAX, 1,000 unless configured: every member of a group of "
        "the default maximum size), after the user id `after`. Page a bigger group with after = the last "
        "userId of the previous page, until a page is shorter than first; memberCount says how many in all."
    )
    async def members(
        self, info: Info, first: int | None = strawberry.UNSET, after: ID | None = strawberry.UNSET
    ) -> list[Member]:
        cap = info.context.settings.members_page_max
        after_id, limit = check_member_page(_given(first), _given(after), default=cap, cap=cap)
        rows = await info.context.loaders.member_page.load(MemberPageKey(int(self.id), after_id, limit))
        return [Member.from_row(row) for row in rows]

    @strawberry.field
    def last_message(self, info: Info) -> Message | None:
        # Not `async`: preloaded (an inbox page), the answer is a plain value and the
        # executor skips a coroutine per node; otherwise it awaits the load below.
        if self.last_seq == 0:
            return None
        if self.preloaded_last_message is not _NOT_LOADED:
            return self.preloaded_last_message
        return self._load_last_message(info)  # type: ignore[return-value]

    async def _load_last_message(self, info: Info) -> Message | None:
        row = await info.context.loaders.message.load((int(self.id), self.last_seq))
        return Message.from_row(row) if row is not None else None

    @strawberry.field(description="Same as Query.messages for this conversation.")
    async def messages(
        self,
        info: Info,
        first: PageFirst = strawberry.UNSET,
        after: PageAfter = strawberry.UNSET,
        last: PageLast = strawberry.UNSET,
        before: PageBefore = strawberry.UNSET,
    ) -> MessageConnection:
        return await load_message_page(info, int(self.id), self.last_seq, first, after, last, before)


@strawberry.type
class ConversationEdge:
    cursor: str
    node: Conversation


@strawberry.type(
    description="The viewer's conversations: pinned ones first, in the order the viewer pinned them, then "
    "the others, newest activity first (lastMessageAt, else createdAt)."
)
class ConversationConnection:
    nodes: list[Conversation]
    page_info: PageInfo
    activity: strawberry.Private[list[datetime]]  # each node's cursor key, with its id and pinnedAt
    # Edges whose nodes PostgreSQL built (Query.inbox, graphql/prebuilt.py): then nodes may be empty.
    prebuilt_edges: strawberry.Private[list[ConversationEdge] | None] = None

    @strawberry.field
    def edges(self) -> list[ConversationEdge]:
        if self.prebuilt_edges is not None:
            return self.prebuilt_edges
        # Built only when asked for: most clients read nodes and pageInfo.
        return [
            ConversationEdge(cursor=inbox_cursor(at, int(node.id), node.pinned_at), node=node)
            for at, node in zip(self.activity, self.nodes, strict=True)
        ]


@strawberry.input(description="Which conversations an inbox page lists; a filter left out or null: either.")
class InboxFilter:
    archived: bool | None = strawberry.field(
        default=False,
        description="false (the default inbox): the conversations not archived; true: only archived ones; null: both.",
    )
    unread_only: bool | None = strawberry.field(default=False, description="true: only those with unreadCount > 0.")
    pinned: bool | None = strawberry.field(default=None, description="true: only pinned ones; false: only the others.")
    muted: bool | None = strawberry.field(default=None, description="true: only muted ones; false: only the others.")


def _time(text: str) -> datetime:
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError
    return parsed.astimezone(UTC)  # OverflowError when outside years 1..9999 in UTC


def inbox_cursor(activity_at: datetime, conversation_id: int, pinned_at: datetime | None = None) -> str:
    raw = f"{activity_at.isoformat()}|{conversation_id}"
    if pinned_at is not None:
        raw += f"|{pinned_at.isoformat()}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def parse_inbox_cursor(cursor: str) -> tuple[datetime, int, datetime | None]:
    """(activity_at, conversation_id, pinned_at or None) of an inbox cursor."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        parts = raw.split("|")
        if len(parts) not in (2, 3):
            raise ValueError
        parsed = _time(parts[0])
        conversation_id = int(parts[1])
        if not 0 < conversation_id <= MAX_ID:
            raise ValueError
        return parsed, conversation_id, _time(parts[2]) if len(parts) == 3 else None
    except (ValueError, UnicodeDecodeError, OverflowError):
        raise BadUserInput("after is not an inbox cursor") from None


@strawberry.type
class Viewer(Node):
    user_id: ID

    @strawberry.field(description="Globally unique and stable; opaque.")
    def id(self) -> ID:
        return ID(ids.viewer_id(str(self.user_id)))

    @strawberry.field(description="The viewer's default for private read receipts (updateViewerSettings).")
    async def private_receipts(self, info: Info) -> bool:
        return await private_receipts_of(info.context.database, str(self.user_id))

    @strawberry.field(description="Sum of unreadCount over the viewer's conversations that are not muted.")
    async def total_unread(self, info: Info) -> Long:
        return (await info.context.loaders.viewer_totals.load(str(self.user_id))).total_unread

    @strawberry.field(
        description="Sum of unreadMentions over the viewer's conversations; muted ones count too unless "
        "CHATGQL_MUTED_MENTIONS_COUNT is false."
    )
    async def total_unread_mentions(self, info: Info) -> int:
        key = (str(self.user_id), info.context.settings.muted_mentions_count)
        return await info.context.loaders.total_unread_mentions.load(key)

    @strawberry.field(description="How many of the viewer's conversations that are not muted have unreadCount > 0.")
    async def unread_conversations(self, info: Info) -> int:
        return (await info.context.loaders.viewer_totals.load(str(self.user_id))).unread_conversations


@strawberry.type
class ConversationSync:
    conversation_id: ID
    messages: list[Message] = strawberry.field(description="Messages with seq > afterSeq, ascending, at most `limit`.")
    has_more: bool = strawberry.field(description="More messages remain after the last one returned.")
    last_seq: Long
    last_read_seq: Long
    too_long: bool = strawberry.field(
        default=False,
        description="True when afterSeq was more than CHATGQL_MAX_CATCH_UP (default 1,000) messages behind "
        "lastSeq: the gap is too long to fill, so `messages` are the newest `limit` messages, not those right "
        "after afterSeq, and the ones in between were skipped (as Telegram's channelDifferenceTooLong). The "
        "client should drop what it holds of this conversation, keep these, use lastSeq as its next afterSeq, "
        "and load older messages with messages(before:) only as far as it needs. False otherwise.",
    )
    changes: list[MessageChange] = strawberry.field(
        default_factory=list,
        description="With afterChangeSeq: the changes after it (edits, deletes, reactions), ascending by changeSeq, at most "
        "`limit`, each with the message as it is now. Empty without afterChangeSeq.",
    )
    last_change_seq: Long = strawberry.field(default=Long(0), description="The conversation's newest change seq.")
    changes_have_more: bool = strawberry.field(
        default=False, description="More changes remain after the last one returned: sync again from it."
    )
    changes_too_long: bool = strawberry.field(
        default=False,
        description="True when afterChangeSeq was more than CHATGQL_MAX_CATCH_UP changes behind lastChangeSeq: "
        "no changes are returned; re-read the messages the client holds (messages(after:)) and go on from "
        "lastChangeSeq.",
    )


@strawberry.enum(description="What a change did to its message.")
class MessageChangeKind(enum.Enum):
    EDITED = "EDITED"
    DELETED = "DELETED"
    REACTION = "REACTION"


@strawberry.enum(description="Why the operator changed a message (MessageChange.changedBy is null).")
class ChangeReason(enum.Enum):
    ERASE = strawberry.enum_value("ERASE", description="An erase of all of the sender's messages (chatgql erase-user).")
    RETENTION = strawberry.enum_value("RETENTION", description="The retention policy (CHATGQL_RETENTION_DAYS).")


@strawberry.type(
    description="A change to a message (an edit, a delete, or a reaction added or taken back): it takes the conversation's next changeSeq, never "
    "a seq. `message` is the message as it is now, with its id, so a caching client updates it with no code."
)
class MessageChange:
    conversation_id: ID
    change_seq: Long
    kind: MessageChangeKind
    seq: Long = strawberry.field(description="The changed message's seq.")
    changed_by: ID | None = strawberry.field(description="Who made the change; null: the operator (see reason).")
    reason: ChangeReason | None = strawberry.field(
        default=None, description="Why the operator made the change; null for a user's change."
    )
    message: Message

    @classmethod
    def from_row(cls, row: Row) -> MessageChange:
        """row: services.changes' (change_seq, kind, changed_by, message columns...)."""
        message = Message.from_row(row)
        return cls(
            conversation_id=message.conversation_id,
            change_seq=Long(row["change_seq"]),
            kind=MessageChangeKind(row["kind"]),
            seq=message.seq,
            changed_by=None if row["changed_by"] is None else ID(str(row["changed_by"])),
            reason=None if row["reason"] is None else ChangeReason(row["reason"]),
            message=message,
        )

    @classmethod
    def from_event(cls, event: MessageChange_) -> MessageChange:
        message = Message.from_row(event)
        return cls(
            conversation_id=message.conversation_id,
            change_seq=Long(event.change_seq),
            kind=MessageChangeKind(event.KIND),
            seq=message.seq,
            changed_by=None if event.user_id is None else ID(str(event.user_id)),
            reason=None if event.reason is None else ChangeReason(event.reason),
            message=message,
        )


@strawberry.input
class ChangeCursor:
    conversation_id: ID
    after_change_seq: Long = strawberry.field(
        description="The change cursor the client holds for this conversation (its lastChangeSeq when last read)."
    )


@strawberry.input
class SyncCursor:
    conversation_id: ID
    after_seq: Long = strawberry.field(
        description="The highest seq the client holds for this conversation (0 for none)."
    )
    after_change_seq: Long | None = strawberry.field(
        default=None,
        description="The change cursor the client holds (the conversation's lastChangeSeq when it last read it; "
        "0 for none). Given: sync also answers the changes after it (ConversationSync.changes); null: no changes.",
    )


@strawberry.type
class ChangeMessagePayload:
    message: Message = strawberry.field(description="The message as it is after the call.")
    change_seq: Long | None = strawberry.field(
        description="The change seq the call took; null when it changed nothing (the same body again)."
    )


@strawberry.type
class SendMessagePayload:
    message: Message = strawberry.field(
        description="The stored message; on a retry, the original one with its original seq."
    )
    duplicate: bool = strawberry.field(description="True when this clientMsgId had already been stored.")


@strawberry.type
class MarkReadPayload:
    conversation_id: ID
    last_read_seq: Long = strawberry.field(
        description="The viewer's own read position after the call (Conversation.lastReadSeq): clamped to lastSeq, "
        "never lowered."
    )
    advanced: bool = strawberry.field(
        description="True when the watermark others see moved forward (never with private receipts)."
    )
    unread_count: Long = strawberry.field(
        description="Conversation.unreadCount after the call, as a query right after it reads."
    )


@strawberry.type
class RemoveMemberPayload:
    conversation_id: ID
    user_id: ID


_EVENT_CONVERSATION = (
    "The conversation as the subscriber sees it when the event is delivered (its lastReadSeq and "
    "unreadCount are the subscriber's own): a caching client's inbox entry updates with no code. Unlike "
    "the event's other fields it is read from the database, once per subscriber and event: select it only "
    "where that is worth it. Null if the subscriber has left the conversation since."
)


@strawberry.type
class MessageNewEvent:
    conversation_id: ID
    seq: Long
    message: Message
    # The dispatched event this was built from, shared by its subscribers (see shared.py).
    source: strawberry.Private[object] = None

    @strawberry.field(description=_EVENT_CONVERSATION)
    async def conversation(self, info: Info) -> Conversation | None:
        row = await self.message._loaders(info).conversation.load(int(self.conversation_id))
        return Conversation.from_row(row) if row is not None else None


@strawberry.type
class ReadUpdatedEvent:
    conversation_id: ID
    user_id: ID
    last_read_seq: Long
    coalesced: bool = strawberry.field(
        default=False,
        description="True in a big group (more members than CHATGQL_BIG_GROUP_THRESHOLD): this event is the "
        "newest of `moves` watermark moves of other members since the last one delivered (at most one a "
        "second per conversation); the others were not sent one by one. Update this member's lastReadSeq, "
        "then re-read seen / seenByCount of the messages on screen (one query). "
        "False: an ordinary event, one watermark move (a member's own moves always come this way).",
    )
    moves: int = strawberry.field(
        default=1, description="How many watermark moves this event stands for (1 unless coalesced)."
    )
    source: strawberry.Private[object] = None
    new_loaders: strawberry.Private[Callable[[], Loaders] | None] = None
    loaders: strawberry.Private[Loaders | None] = None

    def _loaders(self) -> Loaders | None:
        if self.loaders is None and self.new_loaders is not None:
            self.loaders = self.new_loaders()
        return self.loaders

    @strawberry.field(
        metadata=PER_EVENT,
        description="The member whose watermark moved, with its global id: a caching client updates "
        "that member's lastReadSeq with no code of its own. id, userId and lastReadSeq come with the event.",
    )
    def member(self) -> Member:
        return Member(
            user_id=self.user_id,
            last_read_seq=self.last_read_seq,
            conversation_id=int(self.conversation_id),
            # not None when new_loaders is not None
            new_loaders=cast("Callable[[], Loaders]", self._loaders) if self.new_loaders is not None else None,
        )

    @strawberry.field(description=_EVENT_CONVERSATION)
    async def conversation(self, info: Info) -> Conversation | None:
        row = await (self._loaders() or info.context.loaders).conversation.load(int(self.conversation_id))
        return Conversation.from_row(row) if row is not None else None
