"""GraphQL object types of the contract, built from store rows."""

from __future__ import annotations

import base64
import enum
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar, cast
from uuid import UUID

import strawberry
from strawberry import ID
from strawberry.types import Info
from strawberry.types.nodes import FragmentSpread, InlineFragment

from ..db import Row
from ..errors import BadUserInput, conversation_not_found
from ..services.checks import MAX_ID, PageRequest, check_member_page, check_message_page
from ..services.history import catch_up_page
from . import ids
from .loaders import Loaders, MemberPageKey, PageKey, SeenByKey, SeenKey
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


@strawberry.enum
class ConversationType(enum.Enum):
    DIRECT = "DIRECT"
    GROUP = "GROUP"


_CONVERSATION_TYPES = {member.value: member for member in ConversationType}  # a lookup, not an Enum call


@strawberry.enum
class MemberRole(enum.Enum):
    OWNER = "OWNER"
    MEMBER = "MEMBER"


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

    @strawberry.field(description="Globally unique and stable; opaque.")
    def id(self) -> ID:
        return ID(ids.member_id(self.conversation_id, int(self.user_id)))

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
        row = await loaders.member.load((self.conversation_id, int(self.user_id)))
        if row is None:  # left since the event
            raise conversation_not_found(self.conversation_id)
        self.row = row
        return getattr(row, column) if column != "role" else MemberRole(row.role)


@strawberry.type
class Message(Node):
    conversation_id: ID
    seq: Long
    sender_id: ID
    client_msg_id: UUID
    body: str
    created_at: datetime
    # Set on subscription events: makes that event's own loaders, on first use (see subscriptions.py).
    new_loaders: strawberry.Private[Callable[[], Loaders] | None] = None
    loaders: strawberry.Private[Loaders | None] = None

    def _loaders(self, info: Info) -> Loaders:
        if self.loaders is None and self.new_loaders is not None:
            self.loaders = self.new_loaders()
        return self.loaders or info.context.loaders

    @classmethod
    def from_row(cls, row: Any) -> Message:
        if isinstance(row, Row):
            # Columns by key: a Row's attribute access is a Python __getattr__ (~1 us each, measured)
            return cls(
                conversation_id=ID(str(row["conversation_id"])),
                seq=row["seq"],
                sender_id=ID(str(row["sender_id"])),
                client_msg_id=row["client_msg_id"],
                body=row["body"],
                created_at=row["created_at"],
            )
        return cls(  # a service's result (StoredMessage)
            conversation_id=ID(str(row.conversation_id)),
            seq=row.seq,
            sender_id=ID(str(row.sender_id)),
            client_msg_id=row.client_msg_id,
            body=row.body,
            created_at=row.created_at,
        )

    @classmethod
    def last_in_inbox_row(cls, conversation_id: ID, row: Row) -> Message | None:
        """The message at the conversation's last_seq in a row of
        store.conversations.inbox_page_with_last_messages; None when it has none."""
        if row["lm_sender_id"] is None:
            return None
        return cls(
            conversation_id=conversation_id,
            seq=row["last_seq"],
            sender_id=ID(str(row["lm_sender_id"])),
            client_msg_id=row["lm_client_msg_id"],
            body=row["lm_body"],
            created_at=row["lm_created_at"],
        )

    @strawberry.field(description="Globally unique and stable; opaque.")
    def id(self) -> ID:
        return ID(ids.message_id(int(self.conversation_id), self.seq))

    def _seen_key(self) -> SeenKey:
        return SeenKey(int(self.conversation_id), self.seq, int(self.sender_id))

    @strawberry.field(description="Members other than the sender whose lastReadSeq >= seq.")
    async def seen_by_count(self, info: Info) -> int:
        return (await self._loaders(info).seen.load(self._seen_key())).count

    @strawberry.field(
        description="User ids of those members, at most `first` of them, ascending. "
        "after (additive): only user ids above it; page with after = the last id of the previous "
        "page. first is capped at CHATGQL_MEMBERS_PAGE_MAX (default 1,000)."
    )
    async def seen_by(self, info: Info, first: int | None = 100, after: ID | None = strawberry.UNSET) -> list[ID]:
        after_id, limit = check_member_page(
            100 if first is None else first, _given(after), default=100, cap=info.context.settings.members_page_max
        )
        key = SeenByKey(int(self.conversation_id), self.seq, int(self.sender_id), after_id, limit)
        return [ID(str(uid)) for uid in await self._loaders(info).seen_by.load(key)]

    @strawberry.field(
        description="True when every member other than the sender has read it (in a DIRECT chat: the other person)."
    )
    async def seen(self, info: Info) -> bool:
        return (await self._loaders(info).seen.load(self._seen_key())).everyone


@strawberry.type
class MessageEdge:
    cursor: str
    node: Message


@strawberry.type(
    description="Messages ascending by seq. A message cursor is its seq in decimal, so a\n"
    'client may build one from a seq it holds: after: "40" gives seq 41, 42, ...\n'
    "No arguments, or only `last`, gives the newest messages. `first` and `last`\n"
    "are 1..200 (default 50); `first` goes with `after`, `last` with `before`."
)
class MessageConnection:
    edges: list[MessageEdge]
    nodes: list[Message]
    page_info: PageInfo
    gap_too_long: bool = strawberry.field(
        default=False,
        description="True when `after` was more than CHATGQL_MAX_CATCH_UP (default 1,000) messages behind "
        "the newest message the page could reach (lastSeq, or `before`): the gap is too long to fill, so "
        "this is the newest page of that range (as `last` would give it), not the page after `after`, and "
        "the messages in between were skipped. The client should drop what it holds of this conversation, "
        "keep this page, and page backward with `before` only as far as it needs. False otherwise.",
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
    too_long = False
    if _given(after) is not None:  # catching up from a seq the client holds
        page, too_long = catch_up_page(page, last_seq, info.context.settings.max_catch_up)
    rows = await info.context.loaders.message_page.load(PageKey(conversation_id, page))
    return MessageConnection.from_page(list(rows), page, last_seq, too_long)


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
    last_read_seq: Long = strawberry.field(description="The viewer's own watermark here.")
    # A value, not a resolver: an inbox page asks for it on every node.
    unread_count: Long = strawberry.field(description="lastSeq - lastReadSeq for the viewer.")
    # Set by an inbox page that read every node's last message with the page (see Query.inbox).
    preloaded_last_message: strawberry.Private[Any] = _NOT_LOADED

    @classmethod
    def from_row(cls, row: Any) -> Conversation:
        """row: a conversation joined with the viewer's membership (store.conversations.for_viewer)."""
        # Columns by key: a Row's attribute access is a Python __getattr__ (~1 us each; an inbox page
        # read ~900 of them, measured).
        last_seq, last_read_seq = row["last_seq"], row["last_read_seq"]
        return cls(
            id=ID(str(row["id"])),
            type=_CONVERSATION_TYPES[row["type"]],
            title=row["title"],
            last_seq=last_seq,
            last_message_at=row["last_message_at"],
            created_at=row["created_at"],
            last_read_seq=last_read_seq,
            unread_count=Long(last_seq - last_read_seq),
        )

    @strawberry.field
    async def member_count(self, info: Info) -> int:
        return await info.context.loaders.member_count.load(int(self.id))

    @strawberry.field(
        description="Members ascending by user id. Additive arguments: at most `first` of them "
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
        first: int | None = strawberry.UNSET,
        after: str | None = strawberry.UNSET,
        last: int | None = strawberry.UNSET,
        before: str | None = strawberry.UNSET,
    ) -> MessageConnection:
        return await load_message_page(info, int(self.id), self.last_seq, first, after, last, before)


@strawberry.type
class ConversationEdge:
    cursor: str
    node: Conversation


@strawberry.type(description="The viewer's conversations, newest activity first (lastMessageAt, else createdAt).")
class ConversationConnection:
    nodes: list[Conversation]
    page_info: PageInfo
    activity: strawberry.Private[list[datetime]]  # each node's cursor key, with its id

    @strawberry.field
    def edges(self) -> list[ConversationEdge]:
        # Built only when asked for: most clients read nodes and pageInfo.
        return [
            ConversationEdge(cursor=inbox_cursor(at, int(node.id)), node=node)
            for at, node in zip(self.activity, self.nodes, strict=True)
        ]


def inbox_cursor(activity_at: datetime, conversation_id: int) -> str:
    raw = f"{activity_at.isoformat()}|{conversation_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_inbox_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, _, cid = raw.partition("|")
        parsed = datetime.fromisoformat(at)
        if parsed.tzinfo is None:
            raise ValueError
        parsed = parsed.astimezone(UTC)  # OverflowError when outside years 1..9999 in UTC
        conversation_id = int(cid)
        if not 0 < conversation_id <= MAX_ID:
            raise ValueError
        return parsed, conversation_id
    except (ValueError, UnicodeDecodeError, OverflowError):
        raise BadUserInput("after is not an inbox cursor") from None


@strawberry.type
class Viewer(Node):
    user_id: ID

    @strawberry.field(description="Globally unique and stable; opaque.")
    def id(self) -> ID:
        return ID(ids.viewer_id(int(self.user_id)))

    @strawberry.field(description="Sum of unreadCount over all of the viewer's conversations.")
    async def total_unread(self, info: Info) -> Long:
        return (await info.context.loaders.viewer_totals.load(int(self.user_id))).total_unread

    @strawberry.field(description="How many of the viewer's conversations have unreadCount > 0.")
    async def unread_conversations(self, info: Info) -> int:
        return (await info.context.loaders.viewer_totals.load(int(self.user_id))).unread_conversations


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


@strawberry.input
class SyncCursor:
    conversation_id: ID
    after_seq: Long = strawberry.field(
        description="The highest seq the client holds for this conversation (0 for none)."
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
        description="The viewer's watermark after the call (clamped to lastSeq, never lowered)."
    )
    advanced: bool = strawberry.field(description="True when the watermark moved forward.")
    unread_count: Long


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
        description="The member whose watermark moved, with its global id: a caching client updates "
        "that member's lastReadSeq with no code of its own. id, userId and lastReadSeq come with the event."
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
