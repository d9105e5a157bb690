"""Mutation root: each mutation is one service call, one transaction."""

from __future__ import annotations

from uuid import UUID

import strawberry
from strawberry import ID
from strawberry.types import Info

from ..services import conversations as conversation_service
from ..services.checks import check_id, check_ids, check_text
from ..services.messages import do_send_message
from ..services.reads import do_mark_read
from .queries import load_conversation
from .scalars import Long
from .types import Conversation, MarkReadPayload, Message, RemoveMemberPayload, SendMessagePayload


async def reload_conversation(info: Info, conversation_id: int) -> Conversation:
    """Read the conversation after a write, past anything cached earlier in the request."""
    info.context.forget_conversation(conversation_id)
    return await load_conversation(info, conversation_id)


@strawberry.type
class Mutation:
    @strawberry.mutation(description="Idempotent: both people calling it at once get the same conversation.")
    async def create_direct_conversation(self, info: Info, user_id: ID) -> Conversation:
        ctx = info.context
        viewer = ctx.viewer_id
        other = check_id(user_id, "userId")
        await ctx.deps.direct_limiter.check(viewer)
        cid = await conversation_service.do_create_direct_conversation(
            ctx.database, viewer, other, policy=ctx.deps.membership_policy
        )
        return await reload_conversation(info, cid)

    @strawberry.mutation(
        description="The caller becomes OWNER; memberIds are added as MEMBER (max 1,000 members in all)."
    )
    async def create_group(self, info: Info, title: str, member_ids: list[ID]) -> Conversation:
        ctx = info.context
        settings = ctx.settings
        viewer = ctx.viewer_id
        title = check_text(title, "title", max_chars=settings.max_title_chars)
        members = check_ids(
            member_ids, "memberId", limit=min(settings.max_group_members, settings.max_members_per_call)
        )
        await ctx.deps.group_limiter.check(viewer)
        cid = await conversation_service.do_create_group(
            ctx.database,
            viewer,
            title,
            members,
            max_members=settings.max_group_members,
            max_per_day=settings.max_groups_per_day,
            policy=ctx.deps.membership_policy,
        )
        return await reload_conversation(info, cid)

    @strawberry.mutation(description="Any member may add; already-present ids are ignored.")
    async def add_members(self, info: Info, conversation_id: ID, user_ids: list[ID]) -> Conversation:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        settings = ctx.settings
        users = check_ids(user_ids, "userId", limit=min(settings.max_group_members, settings.max_members_per_call))
        await ctx.deps.add_members_limiter.check(viewer)
        await conversation_service.do_add_members(
            ctx.database,
            viewer,
            cid,
            users,
            max_members=ctx.settings.max_group_members,
            policy=ctx.deps.membership_policy,
        )
        return await reload_conversation(info, cid)

    @strawberry.mutation(description="Anyone may remove themselves (leave); only an OWNER may remove others.")
    async def remove_member(self, info: Info, conversation_id: ID, user_id: ID) -> RemoveMemberPayload:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        target = check_id(user_id, "userId")
        await conversation_service.do_remove_member(ctx.database, viewer, cid, target)
        return RemoveMemberPayload(conversation_id=ID(str(cid)), user_id=ID(str(target)))

    @strawberry.mutation(
        description="Idempotent on (conversationId, clientMsgId). Returns only after the message is durably stored."
    )
    async def send_message(self, info: Info, conversation_id: ID, client_msg_id: UUID, body: str) -> SendMessagePayload:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        body = check_text(body, "body", max_chars=ctx.settings.max_body_chars)
        await ctx.deps.send_limiter.check(viewer)
        result = await do_send_message(ctx.database, viewer, cid, client_msg_id, body, batcher=ctx.deps.send_batcher)
        ctx.forget_conversation(cid)
        return SendMessagePayload(message=Message.from_row(result.message), duplicate=result.duplicate)

    @strawberry.mutation(
        description="Monotonic: a lower seq than the current watermark changes nothing; "
        "a higher one than lastSeq is clamped."
    )
    async def mark_read(self, info: Info, conversation_id: ID, seq: Long) -> MarkReadPayload:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        await ctx.deps.read_limiter.check(viewer)
        result = await do_mark_read(ctx.database, viewer, cid, seq, coalescer=ctx.deps.read_coalescer)
        ctx.forget_conversation(cid)
        return MarkReadPayload(
            conversation_id=ID(str(cid)),
            last_read_seq=Long(result.last_read_seq),
            advanced=result.advanced,
            unread_count=Long(result.last_seq - result.last_read_seq),
        )
