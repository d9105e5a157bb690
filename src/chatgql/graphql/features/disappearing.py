"""Disappearing messages in the API: setMessageTtl, and Conversation.messageTtlSeconds (its type's own
field). schema.py lists this module among its FEATURES. An expired message reaches clients as a
delete (MessageChange kind DELETED, reason EXPIRED: messageChanged, and sync's changes after a change
cursor). Who may, and the firing: services/disappearing.py, services/scheduler.py."""

from __future__ import annotations

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...edge.ratelimit import declare_limits
from ...services import disappearing
from ...services.checks import check_id
from ..queries import load_conversation
from ..types import Conversation

declare_limits({"setMessageTtl": "send"})


@strawberry.type
class Mutation:
    @strawberry.mutation(
        description="Turn disappearing messages on (seconds: the time to live, "
        f"{disappearing.MIN_TTL_SECONDS} to {disappearing.MAX_TTL_SECONDS}) or off (0): each message sent while "
        "it is on is erased that long after its createdAt, as a delete (a tombstone at its seq, content erased, "
        "no longer unread; MessageChange kind DELETED, reason EXPIRED). Messages sent before, and those sent "
        "while it was on when it is changed later, keep their time. In a GROUP its OWNER or an ADMIN (anyone "
        "else: FORBIDDEN, reason NOT_GROUP_ADMIN); in a DIRECT chat either member. The members are told "
        "(conversationUpdated, SETTINGS_CHANGED)."
    )
    async def set_message_ttl(self, info: Info, conversation_id: ID, seconds: int) -> Conversation:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        seconds = disappearing.check_ttl(seconds)
        await ctx.deps.limits.check("setMessageTtl", viewer)
        await disappearing.do_set_message_ttl(ctx.database, viewer, cid, seconds)
        ctx.forget_conversation(cid)
        return await load_conversation(info, cid)
