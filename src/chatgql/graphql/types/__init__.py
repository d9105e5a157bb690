"""GraphQL object types of the contract, built from store rows: a module per concept, every name
importable from here."""

from .common import ConversationType, MemberRole, Node, PageInfo, selections_at, selects, selects_only
from .conversation import (
    Conversation,
    ConversationConnection,
    ConversationEdge,
    InboxFilter,
    inbox_cursor,
    parse_inbox_cursor,
)
from .events import _EVENT_CONVERSATION, MessageNewEvent, ReadUpdatedEvent
from .member import Member
from .message import (
    Attachment,
    AttachmentInput,
    Message,
    MessageConnection,
    MessageEdge,
    MessageEdit,
    PageAfter,
    PageBefore,
    PageFirst,
    PageLast,
    ReactionSummary,
    load_message_page,
)
from .payloads import ChangeMessagePayload, MarkReadPayload, RemoveMemberPayload, SendMessagePayload
from .sync import ChangeCursor, ChangeReason, ConversationSync, MessageChange, MessageChangeKind, SyncCursor
from .viewer import Viewer

__all__ = [
    "Attachment",
    "AttachmentInput",
    "ChangeCursor",
    "ChangeMessagePayload",
    "ChangeReason",
    "Conversation",
    "ConversationConnection",
    "ConversationEdge",
    "ConversationSync",
    "ConversationType",
    "InboxFilter",
    "MarkReadPayload",
    "Member",
    "MemberRole",
    "Message",
    "MessageChange",
    "MessageChangeKind",
    "MessageConnection",
    "MessageEdge",
    "MessageEdit",
    "MessageNewEvent",
    "Node",
    "PageAfter",
    "PageBefore",
    "PageFirst",
    "PageInfo",
    "PageLast",
    "ReactionSummary",
    "ReadUpdatedEvent",
    "RemoveMemberPayload",
    "SendMessagePayload",
    "SyncCursor",
    "Viewer",
    "_EVENT_CONVERSATION",
    "inbox_cursor",
    "load_message_page",
    "parse_inbox_cursor",
    "selections_at",
    "selects",
    "selects_only",
]
