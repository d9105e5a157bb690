"""A group's moderation in the API: banMember, unbanMember (Conversation.bans lists them), setSlowMode,
setHistoryVisibility.

schema.py lists this module among its FEATURES (the roots take its Mutation fields); the live
event is conversationUpdated (MEMBER_BANNED, MEMBER_UNBANNED, SETTINGS_CHANGED). Who may do what:
services/bans.py, services/moderation.py."""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...services import bans, moderation
from ...services.checks import check_id, check_user_id
from ..queries import load_conversation
from ..types import Conversation, RemoveMemberPayload
from ..types.ban import ConversationBan


@strawberry.type
class Mutation:
    @strawberry.mutation(
        description="The OWNER or an ADMIN bans a user from a group (an ADMIN bans MEMBERs only; nobody bans the "
        "OWNER or themselves: FORBIDDEN, BAD_USER_INPUT). A member is removed at once (their subscriptions to it "
        "end); while the ban holds (until: null, until unbanned) addMembers refuses them (FORBIDDEN, reason "
        "USER_BANNED). Banning again replaces the ban. The members and the banned user are told "
        "(conversationUpdated, MEMBER_BANNED)."
    )
    async def ban_member(
        self,
        info: Info,
        conversation_id: ID,
        user_id: ID,
        until: datetime | None = None,
        reason: str | None = None,
    ) -> ConversationBan:
        ctx = info.context
        cid = check_id(conversation_id, "conversationId")
        target = check_user_id(user_id, "userId")
        ban = await bans.do_ban_member(ctx.database, ctx.viewer_id, cid, target, until=until, reason=reason)
        ctx.forget_conversation(cid)
        return ConversationBan.from_row(ban)

    @strawberry.mutation(
        description="The OWNER or an ADMIN lifts a ban (no ban holding: NOT_FOUND); the user may be added again, "
        "and is not added back by it. The members are told (conversationUpdated, MEMBER_UNBANNED)."
    )
    async def unban_member(self, info: Info, conversation_id: ID, user_id: ID) -> RemoveMemberPayload:
        ctx = info.context
        cid = check_id(conversation_id, "conversationId")
        target = check_user_id(user_id, "userId")
        await bans.do_unban_member(ctx.database, ctx.viewer_id, cid, target)
        return RemoveMemberPayload(conversation_id=ID(str(cid)), user_id=ID(target))

    @strawberry.mutation(
        description="The OWNER or an ADMIN sets the group's slow mode: a MEMBER may send one message every `seconds` "
        "(0: off, at most 3600); the OWNER and ADMINs are exempt. A send too soon is LIMIT_EXCEEDED, reason "
        "SLOW_MODE, with retryAfter. The members are told (conversationUpdated, SETTINGS_CHANGED)."
    )
    async def set_slow_mode(self, info: Info, conversation_id: ID, seconds: int) -> Conversation:
        ctx = info.context
        cid = check_id(conversation_id, "conversationId")
        await moderation.do_set_slow_mode(ctx.database, ctx.viewer_id, cid, moderation.check_slow_mode(seconds))
        ctx.forget_conversation(cid)
        return await load_conversation(info, cid)

    @strawberry.mutation(
        description="The OWNER or an ADMIN sets whether members added from now on read the group's earlier "
        "history: hideHistory true, they read only the messages sent after they joined (history, search, sync, "
        "replies, pins, node ids and live changes alike; their unread starts at their join). Members keep what "
        "they were given when it changes later. The members are told (conversationUpdated, SETTINGS_CHANGED)."
    )
    async def set_history_visibility(self, info: Info, conversation_id: ID, hide_history: bool) -> Conversation:
        ctx = info.context
        cid = check_id(conversation_id, "conversationId")
        await moderation.do_set_history_visibility(ctx.database, ctx.viewer_id, cid, hide_history)
        ctx.forget_conversation(cid)
        return await load_conversation(info, cid)
