"""A conversation as the viewer sees it, and the inbox's pages."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any, ClassVar

import strawberry
from strawberry import ID
from strawberry.types import Info
from strawberry.utils.str_converters import to_camel_case

from ...errors import BadUserInput
from ...services.bans import ban_page
from ...services.checks import (
    MAX_ID,
    check_member_page,
)
from ...store.conversations import INBOX_PLAIN_JSON_VALUES
from ..loaders import MemberPageKey
from ..scalars import Long
from .ban import ConversationBan
from .common import ConversationType, Node, PageInfo, given
from .member import Member
from .message import Message, MessageConnection, PageAfter, PageBefore, PageFirst, PageLast, load_message_page

_NOT_LOADED: Any = object()
_CONVERSATION_TYPES = {member.value: member for member in ConversationType}  # a lookup, not an Enum call


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
        description="lastSeq - lastReadSeq for the viewer, less the deleted messages and the thread-only replies "
        "(sendMessage(threadOnly:)) above lastReadSeq."
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
        description="The newest change seq: every change to a message (MessageChangeKind), which never takes a message "
        "seq, takes the "
        "next value of this second gap-free counter. A client holds it beside its message cursor and passes it "
        "to sync (afterChangeSeq) and messageChanged (cursors) to learn what changed while it was away.",
    )
    private_receipts: bool = strawberry.field(
        default=False,
        description="The viewer's read receipts are private here: others' seen, seenBy, seenByCount, delivered "
        "and deliveredCount leave the viewer out (updateMembership(privateReceipts:), updateViewerSettings).",
    )
    slow_mode_seconds: int = strawberry.field(
        default=0,
        description="A MEMBER may send one message every this many seconds (0: no slow mode); the OWNER and "
        "ADMINs are exempt (setSlowMode).",
    )
    hide_history: bool = strawberry.field(
        default=False,
        description="Members added from now on read only the messages sent after they joined, not the earlier "
        "history (setHistoryVisibility); those already in keep what they read.",
    )
    message_ttl_seconds: int = strawberry.field(
        default=0,
        description="Disappearing messages: each message sent while this is above 0 is erased this many seconds "
        "after its createdAt (a tombstone, MessageChange kind DELETED, reason EXPIRED); 0: off (setMessageTtl).",
    )
    # Set by an inbox page that read every node's last message with the page (see Query.inbox).
    preloaded_last_message: strawberry.Private[Any] = _NOT_LOADED
    # The first seq the viewer may read (a member added while the group hid its history: from their join on).
    visible_from_seq: strawberry.Private[int] = 1

    # The fields that read none of the membership's settings: an inbox page whose nodes select only
    # these reads the page without those columns (Query.inbox, store.conversations.inbox_page): the values
    # an inbox row has without them (INBOX_PLAIN_JSON_VALUES, what from_row(settings=False) sets), and the
    # resolvers that read none of them.
    PLAIN_FIELDS: ClassVar[frozenset[str]] = frozenset(
        ("__typename", *map(to_camel_case, INBOX_PLAIN_JSON_VALUES))
        + ("lastMessage", "unreadMentions", "firstUnreadSeq", "memberCount", "members", "messages")
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
        conversation.visible_from_seq = row["visible_from_seq"]
        if settings:
            muted, archived = row["muted"], row["archived"]
            conversation.last_change_seq = row["last_change_seq"]
            conversation.muted = muted
            conversation.muted_until = row["muted_until"] if muted else None
            conversation.archived = archived
            conversation.kept_archived = archived and row["keep_archived"]
            conversation.private_receipts = row["receipts_private"]
            conversation.slow_mode_seconds = row["slow_mode_seconds"]
            conversation.hide_history = row["hide_history"]
            conversation.message_ttl_seconds = row["message_ttl_seconds"]
        return conversation

    @strawberry.field(description="The viewer pinned it (pinnedAt is not null).")
    def pinned(self) -> bool:
        return self.pinned_at is not None

    @strawberry.field(
        description="The seq of the first message the viewer has not read: the first after lastReadSeq that is not "
        "deleted (where a client draws its 'new messages' line); null when unreadCount is 0. It follows markUnread, "
        "deletes and private receipts as unreadCount does."
    )
    def first_unread_seq(self, info: Info) -> Long | None:
        # Not `async`: without a deleted message above lastReadSeq (unreadCount is then all of them) it is the
        # next seq, and nothing is read.
        if self.unread_count <= 0:
            return None
        if self.unread_count == self.last_seq - self.last_read_seq:
            return Long(self.last_read_seq + 1)
        return info.context.loaders.first_unread.load(int(self.id))

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
        after_id, limit = check_member_page(given(first), given(after), default=cap, cap=cap)
        rows = await info.context.loaders.member_page.load(MemberPageKey(int(self.id), after_id, limit))
        return [Member.from_row(row) for row in rows]

    @strawberry.field(
        description="The bans that hold (a group's OWNER and ADMINs only: anyone else FORBIDDEN), ascending by user id "
        "in text order, paged as members: at most `first` (default and cap CHATGQL_MEMBERS_PAGE_MAX) after `after`."
    )
    async def bans(
        self, info: Info, first: int | None = strawberry.UNSET, after: ID | None = strawberry.UNSET
    ) -> list[ConversationBan]:
        cap = info.context.settings.members_page_max
        after_id, limit = check_member_page(given(first), given(after), default=cap, cap=cap)
        rows = await ban_page(info.context.database, info.context.viewer_id, int(self.id), after_id, limit)
        return [ConversationBan.from_row(row) for row in rows]

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
        return await load_message_page(
            info, int(self.id), self.last_seq, first, after, last, before, visible_from=self.visible_from_seq
        )


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
    # Edges whose nodes PostgreSQL built (Query.inbox, engine/prebuilt.py): then nodes may be empty.
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
