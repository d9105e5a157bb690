"""Scheduled messages in the API: scheduleMessage, editScheduledMessage, cancelScheduledMessage and
Query.scheduledMessages, with their rate limits and price. schema.py lists this module among its
FEATURES. A scheduled message reaches the conversation, at its time, as an ordinary message
(messageAdded, sync, history); until then only its sender sees it. Who may, the checks and the
firing: services/scheduled.py, services/scheduler.py."""

from __future__ import annotations

import base64
import binascii
import enum
from datetime import datetime
from typing import Annotated
from uuid import UUID

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...db import Row
from ...edge.ratelimit import declare_limits
from ...engine.registry import PRICING, Pricing, at_most
from ...errors import BadUserInput
from ...services import scheduled
from ...services.checks import MAX_ID, MAX_PAGE, check_id, check_page_size, check_text
from ..scalars import Long

declare_limits({"scheduleMessage": "send", "editScheduledMessage": "send", "cancelScheduledMessage": "send"})
PRICING.declare(Pricing(lists={("Query", "scheduledMessages"): at_most(MAX_PAGE)}))
_PREFIX = "ScheduledMessage"


@strawberry.enum(description="Where a scheduled message stands.")
class ScheduledMessageState(enum.Enum):
    PENDING = "PENDING"  # waiting for sendAt: its sender may edit or cancel it
    SENT = "SENT"  # sent at its time: seq is the message it became
    CANCELED = "CANCELED"  # canceled by its sender: never sent
    FAILED = "FAILED"  # refused at its time: failureCode and failureReason say why; nothing was sent


def scheduled_id(conversation_id: int, id_: int) -> str:
    return base64.urlsafe_b64encode(f"{_PREFIX}:{conversation_id}:{id_}".encode()).decode().rstrip("=")


def parse_scheduled_id(text: object) -> tuple[int, int]:
    """(conversation id, id) of a ScheduledMessage.id; BAD_USER_INPUT for any other text."""
    wrong = BadUserInput("id must be a ScheduledMessage id")
    if not isinstance(text, str) or len(text) > 80:
        raise wrong
    try:
        kind, cid, id_ = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode().split(":")
    except (binascii.Error, ValueError):
        raise wrong from None
    if kind != _PREFIX or not (cid.isdecimal() and id_.isdecimal()) or scheduled_id(int(cid), int(id_)) != text:
        raise wrong
    if not (0 < int(cid) <= MAX_ID and 0 < int(id_) <= MAX_ID):
        raise wrong
    return int(cid), int(id_)


@strawberry.type(
    description="A message its sender scheduled to be sent at sendAt: visible to its sender only until it is "
    "sent, then an ordinary message of the conversation (seq)."
)
class ScheduledMessage:
    id: ID = strawberry.field(description="Opaque; what editScheduledMessage and cancelScheduledMessage take.")
    conversation_id: ID
    client_msg_id: UUID = strawberry.field(description="The message's clientMsgId once sent (idempotency key).")
    body: str
    send_at: datetime
    created_at: datetime = strawberry.field(description="When it was scheduled (the server's clock).")
    state: ScheduledMessageState
    seq: Long | None = strawberry.field(description="SENT: the seq the message took when it was sent.")
    done_at: datetime | None = strawberry.field(description="When it was sent, refused or canceled.")
    failure_code: str | None = strawberry.field(
        description="FAILED: the error code the send was refused with (NOT_FOUND, FORBIDDEN, LIMIT_EXCEEDED, CONFLICT)."
    )
    failure_reason: str | None = strawberry.field(
        description="FAILED: why: NOT_A_MEMBER (the sender left, was removed or was banned from the group), "
        "BANNED (banned app-wide), BLOCKED (a block in a direct chat), SLOW_MODE, CONFLICT (the clientMsgId "
        "holds another message)."
    )

    @classmethod
    def from_row(cls, row: Row) -> ScheduledMessage:
        failure = row["failure"]
        return cls(
            id=ID(scheduled_id(row["conversation_id"], row["id"])),
            conversation_id=ID(str(row["conversation_id"])),
            client_msg_id=row["client_msg_id"],
            body=row["body"],
            send_at=row["send_at"],
            created_at=row["created_at"],
            state=ScheduledMessageState(row["state"]),
            seq=None if row["seq"] is None else Long(row["seq"]),
            done_at=row["done_at"],
            failure_code=None if failure is None else scheduled.FAILURE_CODES[failure],
            failure_reason=failure,
        )


@strawberry.type
class ScheduleMessagePayload:
    scheduled_message: ScheduledMessage
    duplicate: bool = strawberry.field(
        description="True: a retry of a scheduleMessage that succeeded already (the same clientMsgId, body and "
        "sendAt): the scheduled message as it is now, nothing written."
    )


@strawberry.type
class Mutation:
    @strawberry.mutation(
        description="Schedule a message to be sent to the conversation at sendAt (in the future, at most "
        f"{scheduled.MAX_AHEAD.days} days ahead, else BAD_USER_INPUT with reason SEND_AT_IN_THE_PAST or "
        "SEND_AT_TOO_FAR). At its time it is sent once, as an ordinary message with this clientMsgId, taking the "
        "conversation's next seq then; a send refused then (the sender no longer a member, banned, blocked, slow "
        "mode) leaves it FAILED with why. Idempotent on clientMsgId as sendMessage is. A sender has at most "
        f"{scheduled.MAX_PENDING_PER_CONVERSATION} PENDING in a conversation (LIMIT_EXCEEDED, reason "
        "SCHEDULED_PER_CONVERSATION). NOT_FOUND for a conversation the viewer is not in. The before-send hook, "
        "when there is one, is asked now (and about an edited body): its rejection is FORBIDDEN (reason "
        "MESSAGE_REJECTED), its rewrite is what is sent."
    )
    async def schedule_message(
        self, info: Info, conversation_id: ID, client_msg_id: UUID, body: str, send_at: datetime
    ) -> ScheduleMessagePayload:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        body = check_text(body, "body", max_chars=ctx.settings.max_body_chars)
        await ctx.deps.limits.check("scheduleMessage", viewer)
        made = await scheduled.do_schedule_message(
            ctx.database, viewer, cid, client_msg_id, body, send_at, now=ctx.deps.clock(), hook=ctx.deps.before_send
        )
        return ScheduleMessagePayload(scheduled_message=ScheduledMessage.from_row(made.row), duplicate=made.duplicate)

    @strawberry.mutation(
        description="Its sender changes a PENDING scheduled message's body and/or sendAt (null: kept as it is). "
        "Sent, failed or canceled already: CONFLICT (reason NOT_PENDING); anyone else's: NOT_FOUND."
    )
    async def edit_scheduled_message(
        self,
        info: Info,
        id: ID,
        body: Annotated[str | None, strawberry.argument(description="The new body; null: kept.")] = None,
        send_at: Annotated[datetime | None, strawberry.argument(description="The new time; null: kept.")] = None,
    ) -> ScheduledMessage:
        ctx = info.context
        viewer = ctx.viewer_id
        cid, id_ = parse_scheduled_id(id)
        if body is not None:
            body = check_text(body, "body", max_chars=ctx.settings.max_body_chars)
        await ctx.deps.limits.check("editScheduledMessage", viewer)
        row = await scheduled.do_edit_scheduled(
            ctx.database, viewer, cid, id_, body=body, send_at=send_at, now=ctx.deps.clock(), hook=ctx.deps.before_send
        )
        return ScheduledMessage.from_row(row)

    @strawberry.mutation(
        description="Its sender cancels a PENDING scheduled message: it is never sent (CANCELED; canceling it "
        "again answers it as it is). Sent or failed already: CONFLICT (reason NOT_PENDING); anyone else's: "
        "NOT_FOUND."
    )
    async def cancel_scheduled_message(self, info: Info, id: ID) -> ScheduledMessage:
        ctx = info.context
        viewer = ctx.viewer_id
        cid, id_ = parse_scheduled_id(id)
        await ctx.deps.limits.check("cancelScheduledMessage", viewer)
        row = await scheduled.do_cancel_scheduled(ctx.database, viewer, cid, id_, now=ctx.deps.clock())
        return ScheduledMessage.from_row(row)


@strawberry.type
class Query:
    @strawberry.field(
        description="The viewer's own scheduled messages (of one conversation, or all), the soonest first: by "
        "default those PENDING and FAILED. Nobody reads another's."
    )
    async def scheduled_messages(
        self,
        info: Info,
        conversation_id: ID | None = None,
        states: list[ScheduledMessageState] | None = None,
        first: Annotated[int | None, strawberry.argument(description=f"At most {MAX_PAGE}; default 50.")] = None,
    ) -> list[ScheduledMessage]:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = None if conversation_id is None else check_id(conversation_id, "conversationId")
        limit = check_page_size(first, "first")
        wanted = [s.value for s in states] if states else [scheduled.PENDING, scheduled.FAILED]
        rows = await scheduled.read_scheduled(ctx.database, viewer, cid, wanted, limit)
        return [ScheduledMessage.from_row(row) for row in rows]
