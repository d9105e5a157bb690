"""Blocking and reporting in the API (docs/guide/moderation.md): blockUser, unblockUser, reportMessage,
reportUser, Viewer.blockedUsers, Message.senderBlockedByViewer, and the blockChanged event's type.

schema.py lists this module among its FEATURES (the roots take its Mutation fields); the
subscription (blockChanged) is in subscriptions.py. The operator's side is the command line (server/cli.py)."""

from __future__ import annotations

import enum
from typing import Annotated

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...models import REPORT_REASONS
from ...services import blocks, reports
from ...services.checks import check_id, check_seq, check_user_id
from ..scalars import Long


@strawberry.enum(
    description="Why something is reported: SPAM, HARASSMENT, HATE (hate speech), VIOLENCE (threats, "
    "violence), SEXUAL (sexual content), SELF_HARM, ILLEGAL (other illegal content), IMPERSONATION, OTHER "
    "(say what in details)."
)
class ReportReason(enum.Enum):
    SPAM = "SPAM"
    HARASSMENT = "HARASSMENT"
    HATE = "HATE"
    VIOLENCE = "VIOLENCE"
    SEXUAL = "SEXUAL"
    SELF_HARM = "SELF_HARM"
    ILLEGAL = "ILLEGAL"
    IMPERSONATION = "IMPERSONATION"
    OTHER = "OTHER"


if tuple(reason.value for reason in ReportReason) != REPORT_REASONS:  # the table's check constraint (models.py)
    raise AssertionError("ReportReason must list models.REPORT_REASONS, in order")


@strawberry.type(description="The result of blockUser and unblockUser.")
class BlockPayload:
    user_id: ID = strawberry.field(description="The other user.")
    blocked: bool = strawberry.field(description="Whether the viewer blocks them now.")
    changed: bool = strawberry.field(description="False when it was so already (both calls are idempotent).")


@strawberry.type(description="The result of reportMessage and reportUser.")
class ReportPayload:
    report_id: ID = strawberry.field(description="The report's id (the operator's `chatgql reports` lists it).")
    duplicate: bool = strawberry.field(
        description="True when the viewer had reported it before: nothing new was stored (the first report stands)."
    )


@strawberry.type(description="blockChanged: the viewer blocked or unblocked someone (on any of their devices).")
class BlockChangedEvent:
    user_id: ID = strawberry.field(description="The other user.")
    blocked: bool


_DETAILS = strawberry.argument(description="Free text for the moderator: at most 2,000 characters.")


@strawberry.type
class Mutation:
    @strawberry.mutation(
        description="The viewer blocks a user: no direct conversation between them can be created or written in "
        "(by either; FORBIDDEN, reason BLOCKED), and neither can add the other to a group. Messages in groups "
        "they share stay (Message.senderBlockedByViewer). Idempotent; the viewer's devices are told (blockChanged)."
    )
    async def block_user(self, info: Info, user_id: ID) -> BlockPayload:
        return await _set_block(info, user_id, True)

    @strawberry.mutation(description="The viewer unblocks a user. Idempotent; restores nothing refused meanwhile.")
    async def unblock_user(self, info: Info, user_id: ID) -> BlockPayload:
        return await _set_block(info, user_id, False)

    @strawberry.mutation(
        description="A member reports another's message of the conversation. The report keeps the message as it "
        "is now (a later edit, delete or erase leaves the evidence as it was). Idempotent per viewer and "
        "message; the sender never learns who reported it. A deleted message: CONFLICT (reason MESSAGE_DELETED); "
        "the viewer's own: BAD_USER_INPUT (reason OWN_MESSAGE)."
    )
    async def report_message(
        self,
        info: Info,
        conversation_id: ID,
        seq: Long,
        reason: ReportReason,
        details: Annotated[str, _DETAILS] = "",
    ) -> ReportPayload:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        at = check_seq(seq)
        checked = reports.check_report(reason.value, details)
        await ctx.deps.limits.check("reportMessage", viewer)
        done = await reports.do_report_message(ctx.database, viewer, cid, at, reason.value, checked)
        return ReportPayload(report_id=ID(str(done.report_id)), duplicate=done.duplicate)

    @strawberry.mutation(
        description="The viewer reports a user. Idempotent per viewer and user; the user never learns who reported "
        "them."
    )
    async def report_user(
        self,
        info: Info,
        user_id: ID,
        reason: ReportReason,
        details: Annotated[str, _DETAILS] = "",
    ) -> ReportPayload:
        ctx = info.context
        viewer = ctx.viewer_id
        other = check_user_id(user_id, "userId")
        checked = reports.check_report(reason.value, details)
        await ctx.deps.limits.check("reportUser", viewer)
        done = await reports.do_report_user(ctx.database, viewer, other, reason.value, checked)
        return ReportPayload(report_id=ID(str(done.report_id)), duplicate=done.duplicate)


async def _set_block(info: Info, user_id: ID, block: bool) -> BlockPayload:
    ctx = info.context
    viewer = ctx.viewer_id
    other = check_user_id(user_id, "userId")
    await ctx.deps.limits.check("blockUser", viewer)
    changed = await blocks.do_set_block(ctx.database, viewer, other, block)
    return BlockPayload(user_id=ID(other), blocked=block, changed=changed)
