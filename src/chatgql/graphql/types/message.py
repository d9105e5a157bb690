"""A message, its parts (edits, attachments, reactions), and a page of messages."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, ClassVar, cast
from uuid import UUID

import strawberry
from strawberry import ID
from strawberry.types import Info
from strawberry.types.base import StrawberryOptional
from strawberry.utils.str_converters import to_camel_case

from ...db import Row
from ...engine.registry import PER_EVENT
from ...models import MESSAGE_FIELDS, MESSAGE_PLAIN_FIELDS, MessageRecord
from ...services.checks import (
    PageRequest,
    check_member_page,
    check_message_page,
    check_page_size,
    check_seq_cursor,
)
from ...services.history import far_behind
from ...store.conversations import LAST_MESSAGE_PREFIX, last_message_fields
from .. import ids
from ..loaders import DeliveredKey, Loaders, PageKey, ReactedByKey, SeenByKey, SeenKey
from ..scalars import Long
from .common import Node, PageInfo, check_record, given


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
            100 if first is None else first, given(after), default=100, cap=info.context.settings.members_page_max
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
            100 if first is None else first, given(after), default=100, cap=info.context.settings.members_page_max
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
        description="True when the viewer blocked its sender (blockUser): a client may collapse it. Messages of "
        "blocked users stay in the groups the viewer shares with them, and count in unreadCount as any other."
    )
    async def sender_blocked_by_viewer(self, info: Info) -> bool:
        return bool(await self._loaders(info).blocked_by_viewer.load(str(self.sender_id)))

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
    check_record(Message, MESSAGE_FIELDS, "MessageRecord", "graphql/types/message.py")
    kinds = {f.python_name: f.type for f in cast(Any, Message).__strawberry_definition__.fields}
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
        cls, rows: list[Any], page: PageRequest, last_seq: int, gap_too_long: bool = False, *, visible_from: int = 1
    ) -> MessageConnection:
        """rows: the page as fetched (limit + 1 rows at most, newest first when from_end). visible_from: the first
        seq the viewer may read (none before it counts as a previous page)."""
        more = len(rows) > page.limit
        rows = rows[: page.limit]
        if page.from_end:
            rows.reverse()
            has_previous, has_next = more, page.before is not None and page.before <= last_seq
        else:
            has_previous, has_next = page.after >= visible_from and last_seq >= visible_from, more
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


async def load_message_page(
    info: Info,
    conversation_id: int,
    last_seq: int,
    first: int | None,
    after: str | None,
    last: int | None,
    before: str | None,
    *,
    visible_from: int = 1,
) -> MessageConnection:
    """visible_from: the first seq the viewer may read (a member added while the group hid its history):
    the page reads nothing below it."""
    asked = check_message_page(given(first), given(after), given(last), given(before))
    page = dataclasses.replace(asked, after=visible_from - 1) if asked.after < visible_from - 1 else asked
    # Catching up from a seq the client holds: flagged when far behind, never moved.
    behind = given(after) is not None and far_behind(page, last_seq, info.context.settings.max_catch_up)
    rows = await info.context.loaders.message_page.load(PageKey(conversation_id, page))
    return MessageConnection.from_page(list(rows), asked, last_seq, behind, visible_from=visible_from)
