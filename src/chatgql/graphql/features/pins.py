"""Pinned messages in the API: pinMessage, unpinMessage and Query.pinnedMessages, with their rate
limits and prices. schema.py lists this module among its FEATURES (the roots take its Query and
Mutation fields). Pins and unpins reach clients as changes, with no field of their own: the
MessageChange kinds PINNED and UNPINNED (messageChanged, and sync's changes after a change cursor).
Who may pin, the cap and the expiry: services/pins.py."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...db import Row
from ...edge.ratelimit import declare_limits
from ...engine.registry import PRICING, Pricing, at_most
from ...services.checks import check_id, check_seq
from ...services.pins import MAX_PINS, PinResult, do_pin, read_pins
from ..scalars import Long
from ..types import Message

declare_limits({"pinMessage": "send", "unpinMessage": "send"})
PRICING.declare(Pricing(lists={("Query", "pinnedMessages"): at_most(MAX_PINS)}))


@strawberry.type(description="A pinned message of a conversation: who pinned it, when, and until when.")
class PinnedMessage:
    conversation_id: ID
    seq: Long
    pinned_by: ID = strawberry.field(description="Who pinned it (or last changed its expiry).")
    pinned_at: datetime
    expires_at: datetime | None = strawberry.field(
        description="When it stops being pinned (it leaves pinnedMessages then, with no change); null: until unpinned."
    )
    message: Message

    @classmethod
    def of(cls, message: Message, pin: Row) -> PinnedMessage:
        return cls(
            conversation_id=message.conversation_id,
            seq=message.seq,
            pinned_by=ID(str(pin["pinned_by"])),
            pinned_at=pin["pinned_at"],
            expires_at=pin["expires_at"],
            message=message,
        )


@strawberry.type
class PinMessagePayload:
    message: Message = strawberry.field(description="The message as it is after the call.")
    pin: PinnedMessage | None = strawberry.field(description="Its pin after the call; null: it is not pinned.")
    change_seq: Long | None = strawberry.field(
        description="The change seq the call took; null when it changed nothing (pinned already with this "
        "expiresAt, or not pinned)."
    )

    @classmethod
    def of(cls, result: PinResult) -> PinMessagePayload:
        message = Message.from_row(result.message)
        return cls(
            message=message,
            pin=None if result.pin is None else PinnedMessage.of(message, result.pin),
            change_seq=None if result.change_seq is None else Long(result.change_seq),
        )


async def _pin(
    info: Info, conversation_id: ID, seq: Long, *, pin: bool, expires_at: datetime | None = None
) -> PinMessagePayload:
    ctx = info.context
    viewer = ctx.viewer_id
    cid = check_id(conversation_id, "conversationId")
    at = check_seq(seq)
    await ctx.deps.limits.check("pinMessage" if pin else "unpinMessage", viewer)
    result = await do_pin(ctx.database, viewer, cid, at, pin=pin, now=ctx.deps.clock(), expires_at=expires_at)
    ctx.forget_conversation(cid)
    return PinMessagePayload.of(result)


@strawberry.type
class Mutation:
    @strawberry.mutation(
        description=f"Pin a message of the conversation (at most {MAX_PINS} pinned at once: LIMIT_EXCEEDED, "
        "reason PINS_PER_CONVERSATION). In a DIRECT conversation either member may; in a GROUP its OWNER or an "
        "ADMIN (anyone else: FORBIDDEN, reason PIN_NOT_ALLOWED). Pinning it again with another expiresAt "
        "replaces its pin; with the same one changes nothing (changeSeq null). A pin takes the next changeSeq "
        "(MessageChange kind PINNED), never a seq, and never counts as unread. A deleted message: CONFLICT."
    )
    async def pin_message(
        self,
        info: Info,
        conversation_id: ID,
        seq: Long,
        expires_at: Annotated[
            datetime | None,
            strawberry.argument(
                description="When it stops being pinned (a future time with its offset, else BAD_USER_INPUT); "
                "null: until unpinned."
            ),
        ] = None,
    ) -> PinMessagePayload:
        return await _pin(info, conversation_id, seq, pin=True, expires_at=expires_at)

    @strawberry.mutation(
        description="Unpin a message (who may: as pinMessage). It takes the next changeSeq (MessageChange kind "
        "UNPINNED); a message that is not pinned changes nothing (changeSeq null)."
    )
    async def unpin_message(self, info: Info, conversation_id: ID, seq: Long) -> PinMessagePayload:
        return await _pin(info, conversation_id, seq, pin=False)


@strawberry.type
class Query:
    @strawberry.field(
        description="The conversation's pinned messages, the newest pin first: those not deleted and not "
        "expired. NOT_FOUND for a conversation the viewer is not in."
    )
    async def pinned_messages(self, info: Info, conversation_id: ID) -> list[PinnedMessage]:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        rows = await read_pins(ctx.database, viewer, cid, ctx.deps.clock())
        return [PinnedMessage.of(Message.from_row(row), row) for row in rows]
