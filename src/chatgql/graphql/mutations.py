"""Mutation root: each mutation is one service call, one transaction."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

import strawberry
from strawberry import ID
from strawberry.types import Info

from ..errors import BadUserInput
from ..services import changes as change_service
from ..services import conversations as conversation_service
from ..services.checks import check_attachments, check_id, check_seq, check_text, check_user_id, check_user_ids
from ..services.messages import do_send_message
from ..services.reads import do_mark_read
from . import ids
from .groups import GroupMutation
from .queries import load_conversation
from .readstate import ReadStateMutation
from .scalars import Long
from .types import (
    AttachmentInput,
    ChangeMessagePayload,
    Conversation,
    MarkReadPayload,
    Message,
    RemoveMemberPayload,
    SendMessagePayload,
)


async def reload_conversation(info: Info, conversation_id: int) -> Conversation:
    """Read the conversation after a write, past anything cached earlier in the request."""
    info.context.forget_conversation(conversation_id)
    return await load_conversation(info, conversation_id)


@strawberry.type
class Mutation(ReadStateMutation, GroupMutation):
    @strawberry.mutation(description="Idempotent: both people calling it at once get the same conversation.")
    async def create_direct_conversation(self, info: Info, user_id: ID) -> Conversation:
        ctx = info.context
        viewer = ctx.viewer_id
        other = check_user_id(user_id, "userId")
        await ctx.deps.limits.check("createDirectConversation", viewer)
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
        members = check_user_ids(
            member_ids, "memberId", limit=min(settings.max_group_members, settings.max_members_per_call)
        )
        await ctx.deps.limits.check("createGroup", viewer)
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
        users = check_user_ids(user_ids, "userId", limit=min(settings.max_group_members, settings.max_members_per_call))
        await ctx.deps.limits.check("addMembers", viewer)
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
        target = check_user_id(user_id, "userId")
        await conversation_service.do_remove_member(ctx.database, viewer, cid, target)
        return RemoveMemberPayload(conversation_id=ID(str(cid)), user_id=ID(target))

    @strawberry.mutation(
        description="Idempotent on (conversationId, clientMsgId). Returns only after the message is durably stored."
    )
    async def send_message(
        self,
        info: Info,
        conversation_id: ID,
        client_msg_id: UUID,
        body: str,
        reply_to: Annotated[
            ID | None,
            strawberry.argument(
                description="The id (Message.id) of an earlier message of the same conversation that this one "
                "replies to and quotes (Message.replyTo). A message of another conversation: BAD_USER_INPUT "
                "(reason REPLY_ACROSS_CONVERSATIONS); no such earlier message: BAD_USER_INPUT."
            ),
        ] = None,
        thread_only: Annotated[
            bool,
            strawberry.argument(
                description="With replyTo: send the reply to its thread only (docs/guide/threads.md): it counts in "
                "the thread's unread, not in the conversation's unreadCount nor firstUnreadSeq. Without it a reply "
                "counts in both. Without replyTo: BAD_USER_INPUT."
            ),
        ] = False,
        attachments: Annotated[
            list[AttachmentInput] | None,
            strawberry.argument(
                description="Files the message points to (metadata only): at most CHATGQL_MAX_ATTACHMENTS, each "
                "validated (BAD_USER_INPUT otherwise, nothing written)."
            ),
        ] = None,
        mentions: Annotated[
            list[ID] | None,
            strawberry.argument(
                description="User ids the message mentions (additive): members of the conversation only, else "
                "BAD_USER_INPUT and nothing is stored; at most CHATGQL_MAX_MENTIONS."
            ),
        ] = strawberry.UNSET,
        mention_everyone: Annotated[
            bool,
            strawberry.argument(
                description="Mention every member of the group (counted in each one's unreadMentions like a direct "
                "mention; Message.mentions lists them). A group's OWNER or ADMIN only: anyone else is FORBIDDEN "
                "(reason MENTION_EVERYONE_NOT_ALLOWED), a direct conversation BAD_USER_INPUT (reason "
                "MENTION_EVERYONE_IN_DIRECT); nothing is stored then."
            ),
        ] = False,
        quote: Annotated[
            ID | None,
            strawberry.argument(
                description="The id (Message.id) of a message this one quotes (Message.quote), of this "
                "conversation or of another the sender reads (a member, the message within their visible "
                "history), not deleted: else BAD_USER_INPUT (reason QUOTE_NOT_FOUND) and nothing is stored. "
                "Each reader sees the quote as they may read it."
            ),
        ] = None,
    ) -> SendMessagePayload:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        body = check_text(body, "body", max_chars=ctx.settings.max_body_chars)
        quoted = None if reply_to is None else _reply_to_seq(reply_to, cid)
        quoting = None if quote is None else message_key(quote, "quote")
        if thread_only and quoted is None:
            raise BadUserInput("threadOnly goes with replyTo")
        files = (  # none: nothing to check (no list, no call)
            check_attachments(
                [(a.url, a.mime_type, a.name, a.size_bytes, a.width, a.height) for a in attachments],
                max_count=ctx.settings.max_attachments,
                max_bytes=ctx.settings.max_attachment_bytes,
            )
            if attachments
            else []
        )
        mentioned = (
            None
            if mentions is strawberry.UNSET or mentions is None
            else check_user_ids(mentions, "mention", limit=ctx.settings.max_mentions)
        )
        await ctx.deps.limits.check("sendMessage", viewer)
        result = await do_send_message(
            ctx.database,
            viewer,
            cid,
            client_msg_id,
            body,
            batcher=ctx.deps.send_batcher,
            reply_to=quoted,
            thread_only=thread_only,
            attachments=files,
            mentions=mentioned,
            mention_everyone=mention_everyone,
            hook=ctx.deps.before_send,
            quote=quoting,
        )
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
        await ctx.deps.limits.check("markRead", viewer)
        result = await do_mark_read(ctx.database, viewer, cid, seq, coalescer=ctx.deps.read_coalescer)
        ctx.forget_conversation(cid)
        # the viewer's own read position: below the watermark while a markUnread rewind lasts
        own = result.last_read_seq if result.own_read is None else result.own_read
        return MarkReadPayload(
            conversation_id=ID(str(cid)),
            last_read_seq=Long(own),
            advanced=result.advanced,
            unread_count=Long(max(0, result.last_seq - own - result.unread_deleted)),
        )

    @strawberry.mutation(
        description="The sender replaces the body of their message (within CHATGQL_EDIT_WINDOW_SECONDS of sending, "
        "when set), and its mentions when `mentions` is given. It keeps its seq and takes the next changeSeq; the "
        "previous body joins editHistory. The same body and mentions again change nothing (changeSeq null). Never "
        "changes unreadCount; unreadMentions follows the mentions as they are now. Subscribers get it on "
        "messageChanged (kind EDITED), never on messageNew. Someone else's message: FORBIDDEN; a deleted one: "
        "CONFLICT."
    )
    async def edit_message(
        self,
        info: Info,
        conversation_id: ID,
        seq: Long,
        body: str,
        mentions: Annotated[
            list[ID] | None,
            strawberry.argument(
                description="The user ids the message mentions from now on (additive), replacing those it had "
                "(a mentionEveryone's too); left out or null: it keeps them. Members of the conversation only, else "
                "BAD_USER_INPUT and nothing is changed; at most CHATGQL_MAX_MENTIONS. A newly mentioned member is "
                "not pushed (no messageNew, no webhook of its own): the mention counts in their unreadMentions."
            ),
        ] = strawberry.UNSET,
    ) -> ChangeMessagePayload:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        at = check_seq(seq)
        body = check_text(body, "body", max_chars=ctx.settings.max_body_chars)
        mentioned = (
            None
            if mentions is strawberry.UNSET or mentions is None
            else check_user_ids(mentions, "mention", limit=ctx.settings.max_mentions)
        )
        await ctx.deps.limits.check("editMessage", viewer)
        result = await change_service.do_edit_message(
            ctx.database, viewer, cid, at, body, window_seconds=ctx.settings.edit_window_seconds, mentions=mentioned
        )
        ctx.forget_conversation(cid)
        return ChangeMessagePayload(
            message=Message.from_row(result.message),
            change_seq=None if result.change_seq is None else Long(result.change_seq),
        )

    @strawberry.mutation(
        description="The sender, or a group's OWNER or ADMIN, deletes a message: it stays at its seq as a tombstone "
        "(deletedAt, deletedBy, body empty), its body and edit history erased from storage in the same "
        "transaction; it takes the next changeSeq and no longer counts as unread for members who had not read "
        "it. Subscribers get it on messageChanged (kind DELETED). Deleting it again: CONFLICT; someone else's "
        "message (not a group's owner or admin): FORBIDDEN."
    )
    async def delete_message(self, info: Info, conversation_id: ID, seq: Long) -> ChangeMessagePayload:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        at = check_seq(seq)
        await ctx.deps.limits.check("deleteMessage", viewer)
        result = await change_service.do_delete_message(ctx.database, viewer, cid, at)
        ctx.forget_conversation(cid)
        return ChangeMessagePayload(
            message=Message.from_row(result.message),
            change_seq=None if result.change_seq is None else Long(result.change_seq),
        )

    @strawberry.mutation(
        description="React to a message with an emoji (at most CHATGQL_MAX_EMOJI_CHARS characters). "
        "Idempotent per (message, viewer, emoji): adding it again changes nothing (changeSeq null). A reaction "
        "takes the next changeSeq, never a seq, and never counts as unread. A deleted message: CONFLICT; a new "
        "emoji on a message with CHATGQL_MAX_REACTIONS_PER_MESSAGE different ones: LIMIT_EXCEEDED."
    )
    async def add_reaction(self, info: Info, conversation_id: ID, seq: Long, emoji: str) -> ChangeMessagePayload:
        return await _react(info, conversation_id, seq, emoji, add=True)

    @strawberry.mutation(
        description="Take back the viewer's emoji reaction; removing one that is not there changes nothing "
        "(changeSeq null)."
    )
    async def remove_reaction(self, info: Info, conversation_id: ID, seq: Long, emoji: str) -> ChangeMessagePayload:
        return await _react(info, conversation_id, seq, emoji, add=False)


async def _react(info: Info, conversation_id: ID, seq: Long, emoji: str, *, add: bool) -> ChangeMessagePayload:
    ctx = info.context
    viewer = ctx.viewer_id
    cid = check_id(conversation_id, "conversationId")
    at = check_seq(seq)
    emoji = check_text(emoji, "emoji", max_chars=ctx.settings.max_emoji_chars)
    await ctx.deps.limits.check("addReaction" if add else "removeReaction", viewer)
    result = await change_service.do_react(
        ctx.database, viewer, cid, at, emoji, add=add, max_emojis=ctx.settings.max_reactions_per_message
    )
    return ChangeMessagePayload(
        message=Message.from_row(result.message),
        change_seq=None if result.change_seq is None else Long(result.change_seq),
    )


def message_key(message_id: ID, name: str) -> tuple[int, int]:
    """(conversation, seq) of a Message id given as argument `name`; BAD_USER_INPUT when it is none."""
    parsed = ids.parse(message_id)
    if parsed is None or parsed.type_name != "Message":
        raise BadUserInput(f"{name} must be a Message id")
    cid, seq = parsed.keys
    return cid, seq


def _reply_to_seq(reply_to: ID, conversation_id: int) -> int:
    """The seq a sendMessage(replyTo:) quotes: a Message id of the same conversation."""
    parsed = ids.parse(reply_to)
    if parsed is None or parsed.type_name != "Message":
        raise BadUserInput("replyTo must be a Message id")
    quoted_cid, seq = parsed.keys
    if quoted_cid != conversation_id:
        raise BadUserInput("replyTo must be a message of the same conversation", reason="REPLY_ACROSS_CONVERSATIONS")
    return seq
