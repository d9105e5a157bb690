"""Forwarding in the API: forwardMessage, with its rate limit (a send's). Quotes are sendMessage(quote:)
and Message.quote; both live in services/messages.py."""

from __future__ import annotations

from uuid import UUID

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...edge.ratelimit import declare_limits
from ...services.checks import check_id
from ...services.messages import do_forward_message
from ..mutations import message_key
from ..types import Message, SendMessagePayload

declare_limits({"forwardMessage": "send"})


@strawberry.type
class Mutation:
    @strawberry.mutation(
        description="Forward a message (messageId: a Message id) the viewer reads into conversationId, a "
        "conversation they are a member of: a new message there, sent like sendMessage (its seq, unread, "
        "blocks, bans, slow mode), with the original's body and attachments and forwarded true, naming nothing "
        "of the original. Idempotent on (conversationId, clientMsgId): a retry answers the stored forward "
        "(duplicate) even if the original changed since; a clientMsgId holding another message: CONFLICT. A "
        "message the viewer does not read: NOT_FOUND; a deleted one: CONFLICT (reason MESSAGE_DELETED)."
    )
    async def forward_message(
        self, info: Info, message_id: ID, conversation_id: ID, client_msg_id: UUID
    ) -> SendMessagePayload:
        ctx = info.context
        viewer = ctx.viewer_id
        source = message_key(message_id, "messageId")
        cid = check_id(conversation_id, "conversationId")
        await ctx.deps.limits.check("forwardMessage", viewer)
        result = await do_forward_message(ctx.database, viewer, source, cid, client_msg_id, hook=ctx.deps.before_send)
        ctx.forget_conversation(cid)
        return SendMessagePayload(message=Message.from_row(result.message), duplicate=result.duplicate)
