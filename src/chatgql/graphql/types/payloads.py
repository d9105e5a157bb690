"""What the mutations answer."""

from __future__ import annotations

import strawberry
from strawberry import ID

from ..scalars import Long
from .message import Message


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
