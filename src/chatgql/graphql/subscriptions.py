"""Subscription root: live events from this process's Dispatcher.

Over websockets the context lives as long as the connection, so every event
gets its own loaders (nothing is cached across events), made when a field of
that event first needs one; the roster (seen, seenByCount, seenBy) is read
once per event for all its subscribers (loaders.EventRosters). Each event
keeps the dispatched dict it came from (`source`): subscribers of one event
may share its result (see shared.py).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncGenerator
from datetime import datetime
from functools import partial
from typing import Any
from uuid import UUID

import strawberry
from strawberry import ID
from strawberry.types import Info

from ..errors import conversation_not_found
from ..events import types as events
from ..services.checks import check_id
from .loaders import EventRosters
from .types import Message, MessageNewEvent, ReadUpdatedEvent


async def _events(info: Info, conversation_id: ID | None, event_type: str) -> Any:
    """The Dispatcher registration to iterate (`async with ... as events`), once the viewer may subscribe."""
    ctx = info.context
    viewer = ctx.viewer_id
    cid = None
    if conversation_id is not None and conversation_id is not strawberry.UNSET:
        cid = check_id(conversation_id, "conversationId")
        # NOT_FOUND unless a member (asked afresh: the connection may be old).
        if await ctx.fresh_loaders().conversation.load(cid) is None:
            raise conversation_not_found(cid)
    return ctx.deps.dispatcher.subscribe(viewer, cid, event_type)


# Recent message.new events -> (event, its Message fields, its rosters): what every subscriber of an
# event shares, made once per event. Keyed by id(event); holding the event keeps its id from being reused.
# An event's subscribers mostly come one after another; a few events may interleave.
_recent: OrderedDict[int, tuple[dict, dict, EventRosters]] = OrderedDict()
_RECENT = 64


def _for_event(event: dict, database: Any) -> tuple[dict, EventRosters]:
    """A message.new event's fields as Message takes them, and its shared rosters (once per event)."""
    found = _recent.get(id(event))
    if found is None or found[0] is not event:
        fields = {
            "conversation_id": ID(str(event["conversationId"])),
            "seq": event["seq"],
            "sender_id": ID(str(event["senderId"])),
            "client_msg_id": UUID(event["clientMsgId"]),
            "body": event["body"],
            "created_at": datetime.fromisoformat(event["createdAt"]),
        }
        found = _recent[id(event)] = (event, fields, EventRosters(database))
        if len(_recent) > _RECENT:
            _recent.popitem(last=False)
    return found[1], found[2]


@strawberry.type
class Subscription:
    @strawberry.subscription(
        description="New messages in one conversation, or in every conversation the viewer is a member of "
        "when conversationId is omitted."
    )
    async def message_new(
        self, info: Info, conversation_id: ID | None = strawberry.UNSET
    ) -> AsyncGenerator[MessageNewEvent, None]:
        async with await _events(info, conversation_id, events.MESSAGE_NEW) as subscription:
            ctx = info.context
            async for event in subscription:
                fields, rosters = _for_event(event, ctx.database)
                message = Message(**fields, new_loaders=partial(ctx.fresh_loaders, rosters))
                yield MessageNewEvent(
                    conversation_id=message.conversation_id, seq=message.seq, message=message, source=event
                )

    @strawberry.subscription(description="Watermark moves in one conversation, or in all of the viewer's.")
    async def read_updated(
        self, info: Info, conversation_id: ID | None = strawberry.UNSET
    ) -> AsyncGenerator[ReadUpdatedEvent, None]:
        async with await _events(info, conversation_id, events.READ_UPDATED) as subscription:
            async for event in subscription:
                yield ReadUpdatedEvent(
                    conversation_id=ID(str(event["conversationId"])),
                    user_id=ID(str(event["userId"])),
                    last_read_seq=event["lastReadSeq"],
                    source=event,
                )
