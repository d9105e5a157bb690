"""The member's own read state in the API: settings (updateMembership) and their live event.

Kept apart from mutations.py and types/ (which Mutation and the subscriptions build on) so the
read-state features stay in one place; Mutation inherits ReadStateMutation's fields."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated

import strawberry
from strawberry import ID
from strawberry.types import Info

from ..events.types import Typing
from ..services.checks import check_id
from ..services.delivery import do_mark_delivered
from ..services.membership import SettingsChange, do_mark_unread, do_set_private_receipts, do_update_membership
from ..services.typing import check_typing
from .loaders import Loaders
from .queries import load_conversation
from .scalars import Long
from .types import _EVENT_CONVERSATION, Conversation, Viewer


def _given(value: object) -> object:
    return None if value is strawberry.UNSET else value


@strawberry.type
class ReadStateMutation:
    @strawberry.mutation(
        description="The viewer's own settings of a conversation they are in; an argument left out (or null) "
        "leaves that setting as it is. All of the viewer's devices are told (membershipUpdated)."
    )
    async def update_membership(
        self,
        info: Info,
        conversation_id: ID,
        muted: Annotated[
            bool | None,
            strawberry.argument(
                description="true: muted (until mutedUntil, else until unmuted): out of totalUnread and "
                "unreadConversations; false: unmuted."
            ),
        ] = strawberry.UNSET,
        muted_until: Annotated[
            datetime | None,
            strawberry.argument(description="Muted until then (a future time with its offset); implies muted."),
        ] = strawberry.UNSET,
        archived: Annotated[
            bool | None,
            strawberry.argument(
                description="true: out of the default inbox until its next new message (unless keepArchived); "
                "false: back in it."
            ),
        ] = strawberry.UNSET,
        keep_archived: Annotated[
            bool | None,
            strawberry.argument(description="With archived: true: new messages do not bring it back."),
        ] = strawberry.UNSET,
        pinned: Annotated[
            bool | None,
            strawberry.argument(
                description="true: pinned (first in the inbox, after those pinned before; pinning again keeps "
                "its place); false: unpinned."
            ),
        ] = strawberry.UNSET,
        private_receipts: Annotated[
            bool | None,
            strawberry.argument(
                description="This conversation's choice over the viewer's default (updateViewerSettings): true "
                "keeps the viewer out of the others' seen, seenBy, seenByCount, delivered and deliveredCount here."
            ),
        ] = strawberry.UNSET,
    ) -> Conversation:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        change = SettingsChange(
            muted=_given(muted),  # type: ignore[arg-type]
            muted_until=_given(muted_until),  # type: ignore[arg-type]
            archived=_given(archived),  # type: ignore[arg-type]
            keep_archived=_given(keep_archived),  # type: ignore[arg-type]
            pinned=_given(pinned),  # type: ignore[arg-type]
            private_receipts=_given(private_receipts),  # type: ignore[arg-type]
        )
        await ctx.deps.limits.check("updateMembership", viewer)
        await do_update_membership(ctx.database, viewer, cid, change)
        ctx.forget_conversation(cid)
        return await load_conversation(info, cid)

    @strawberry.mutation(
        description="The viewer's own defaults. privateReceipts: true keeps the viewer out of the other members' "
        "seen, seenBy, seenByCount, delivered and deliveredCount in every conversation where they did not choose "
        "otherwise (updateMembership(privateReceipts:)); their own unread keeps working."
    )
    async def update_viewer_settings(self, info: Info, private_receipts: bool) -> Viewer:
        ctx = info.context
        viewer = ctx.viewer_id
        await ctx.deps.limits.check("updateViewerSettings", viewer)
        await do_set_private_receipts(ctx.database, viewer, private_receipts)
        return Viewer(user_id=ID(str(viewer)))

    @strawberry.mutation(
        description="Mark as unread: the viewer's own unread starts again at fromSeq (1..lastSeq), and "
        "unreadCount, the inbox and the totals follow; it never marks anything read (a fromSeq past the "
        "viewer's own lastReadSeq changes nothing). What others see (seen, seenBy, seenByCount, the "
        "Member's lastReadSeq) never moves back. The rewind lasts until the viewer reads again: a markRead "
        "moves the own lastReadSeq up to its seq, and a markRead past the watermark others see, or a "
        "message the viewer sends, ends it. All of the viewer's devices are told (membershipUpdated)."
    )
    async def mark_unread(self, info: Info, conversation_id: ID, from_seq: Long) -> Conversation:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        await ctx.deps.limits.check("markUnread", viewer)
        await do_mark_unread(ctx.database, viewer, cid, from_seq)
        ctx.forget_conversation(cid)
        return await load_conversation(info, cid)

    @strawberry.mutation(
        description="Delivered receipt: the viewer's delivered watermark rises to min(seq, lastSeq), never "
        "lower (read implies delivered: it is never below lastReadSeq). The members are told "
        "(deliveryUpdated) when it moved, except in groups of more than CHATGQL_BIG_GROUP_THRESHOLD members."
    )
    async def mark_delivered(self, info: Info, conversation_id: ID, seq: Long) -> MarkDeliveredPayload:
        cid = check_id(conversation_id, "conversationId")
        (result,) = await _mark_delivered(info, [(cid, seq)])
        return result

    @strawberry.mutation(
        description="markDelivered for many conversations in one call (after a sync), all or nothing: "
        "NOT_FOUND for any conversation the viewer is not in, and then nothing is written. At most "
        "CHATGQL_MAX_SYNC_CURSORS items, each conversationId once."
    )
    async def mark_delivered_many(self, info: Info, items: list[DeliveredCursor]) -> list[MarkDeliveredPayload]:
        parsed = [(check_id(item.conversation_id, "conversationId"), int(item.seq)) for item in items]
        return await _mark_delivered(info, parsed)

    @strawberry.mutation(
        description="The viewer is typing in a conversation they are in: the other members' typing "
        "subscriptions get {userId, conversationId, until}, until CHATGQL_TYPING_SECONDS (5) from now; call "
        "again every few seconds while the user types. Ephemeral: never stored, it expires by itself. "
        "Rate-limited per user (CHATGQL_RATE_TYPING_*: LIMIT_EXCEEDED). Off in groups of more than "
        "CHATGQL_BIG_GROUP_THRESHOLD members (sent: false)."
    )
    async def typing(self, info: Info, conversation_id: ID) -> TypingPayload:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        await ctx.deps.limits.check("typing", viewer)
        event, publish = await check_typing(
            ctx.database,
            viewer,
            cid,
            seconds=ctx.settings.typing_seconds,
            whole_up_to=ctx.settings.big_group_threshold,
        )
        sent = publish and ctx.deps.typing is not None
        if sent:
            await ctx.deps.typing.publish(event)
        return TypingPayload(conversation_id=ID(str(cid)), until=_time(event.until_ms), sent=sent)


def _time(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC)


@strawberry.type
class TypingPayload:
    conversation_id: ID
    until: datetime = strawberry.field(description="When the indicator expires unless typing is called again.")
    sent: bool = strawberry.field(description="False in a big group (typing is off there): nobody was told.")


@strawberry.type(description="A member is typing; hide the indicator at `until` unless another one comes.")
class TypingEvent:
    conversation_id: ID
    user_id: ID
    until: datetime

    @classmethod
    def of(cls, event: Typing) -> TypingEvent:
        return cls(
            conversation_id=ID(str(event.conversation_id)), user_id=ID(str(event.user_id)), until=_time(event.until_ms)
        )


@strawberry.input
class DeliveredCursor:
    conversation_id: ID
    seq: Long = strawberry.field(description="The highest seq the client has received in this conversation.")


@strawberry.type
class MarkDeliveredPayload:
    conversation_id: ID
    delivered_seq: Long = strawberry.field(
        description="The viewer's delivered watermark after the call (at or above lastReadSeq; never lowered)."
    )
    advanced: bool = strawberry.field(description="True when the delivered watermark moved forward.")


async def _mark_delivered(info: Info, items: list[tuple[int, int]]) -> list[MarkDeliveredPayload]:
    ctx = info.context
    viewer = ctx.viewer_id
    await ctx.deps.limits.check("markDelivered", viewer)
    results = await do_mark_delivered(
        ctx.database,
        viewer,
        items,
        whole_up_to=ctx.settings.big_group_threshold,
        max_items=ctx.settings.max_sync_cursors,
        coalescer=ctx.deps.delivery_coalescer,
    )
    return [
        MarkDeliveredPayload(
            conversation_id=ID(str(r.conversation_id)), delivered_seq=Long(r.delivered_seq), advanced=r.advanced
        )
        for r in results
    ]


@strawberry.type(
    description="A member's delivered watermark moved (markDelivered). Read implies delivered: a readUpdated "
    "moves it too, with no deliveryUpdated of its own. Not sent in groups of more than "
    "CHATGQL_BIG_GROUP_THRESHOLD members."
)
class DeliveryUpdatedEvent:
    conversation_id: ID
    user_id: ID
    delivered_seq: Long


@strawberry.type(
    description="The subscriber's own state of a conversation changed (updateMembership, markUnread), on any "
    "of their devices; nobody else gets it."
)
class MembershipUpdatedEvent:
    conversation_id: ID
    muted: bool
    archived: bool
    pinned: bool
    last_read_seq: Long = strawberry.field(
        description="The subscriber's own read position (their unreadCount is lastSeq - lastReadSeq, less the "
        "deleted messages above it)."
    )
    new_loaders: strawberry.Private[Callable[[], Loaders] | None] = None

    @strawberry.field(description=_EVENT_CONVERSATION)
    async def conversation(self, info: Info) -> Conversation | None:
        loaders = self.new_loaders() if self.new_loaders is not None else info.context.loaders
        row = await loaders.conversation.load(int(self.conversation_id))
        return Conversation.from_row(row) if row is not None else None
