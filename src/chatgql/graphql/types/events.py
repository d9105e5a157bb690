"""What the subscriptions yield: one type per event."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...engine.registry import PER_EVENT
from ..loaders import Loaders
from ..scalars import Long
from .conversation import Conversation
from .member import Member
from .message import Message

_EVENT_CONVERSATION = (
    "The conversation as the subscriber sees it when the event is delivered (its lastReadSeq and "
    "unreadCount are the subscriber's own): a caching client's inbox entry updates with no code. Unlike "
    "the event's other fields it is read from the database, once per subscriber and event: select it only "
    "where that is worth it. Null if the subscriber has left the conversation since."
)


@strawberry.type
class MessageNewEvent:
    conversation_id: ID
    seq: Long
    message: Message
    # The dispatched event this was built from, shared by its subscribers (see shared.py).
    source: strawberry.Private[object] = None

    @strawberry.field(description=_EVENT_CONVERSATION)
    async def conversation(self, info: Info) -> Conversation | None:
        row = await self.message._loaders(info).conversation.load(int(self.conversation_id))
        return Conversation.from_row(row) if row is not None else None


@strawberry.type
class ReadUpdatedEvent:
    conversation_id: ID
    user_id: ID
    last_read_seq: Long
    coalesced: bool = strawberry.field(
        default=False,
        description="True in a big group (more members than CHATGQL_BIG_GROUP_THRESHOLD): this event is the "
        "newest of `moves` watermark moves of other members since the last one delivered (at most one a "
        "second per conversation); the others were not sent one by one. Update this member's lastReadSeq, "
        "then re-read seen / seenByCount of the messages on screen (one query). "
        "False: an ordinary event, one watermark move (a member's own moves always come this way).",
    )
    moves: int = strawberry.field(
        default=1, description="How many watermark moves this event stands for (1 unless coalesced)."
    )
    source: strawberry.Private[object] = None
    new_loaders: strawberry.Private[Callable[[], Loaders] | None] = None
    loaders: strawberry.Private[Loaders | None] = None

    def _loaders(self) -> Loaders | None:
        if self.loaders is None and self.new_loaders is not None:
            self.loaders = self.new_loaders()
        return self.loaders

    @strawberry.field(
        metadata=PER_EVENT,
        description="The member whose watermark moved, with its global id: a caching client updates "
        "that member's lastReadSeq with no code of its own. id, userId and lastReadSeq come with the event.",
    )
    def member(self) -> Member:
        return Member(
            user_id=self.user_id,
            last_read_seq=self.last_read_seq,
            conversation_id=int(self.conversation_id),
            # not None when new_loaders is not None
            new_loaders=cast("Callable[[], Loaders]", self._loaders) if self.new_loaders is not None else None,
        )

    @strawberry.field(description=_EVENT_CONVERSATION)
    async def conversation(self, info: Info) -> Conversation | None:
        row = await (self._loaders() or info.context.loaders).conversation.load(int(self.conversation_id))
        return Conversation.from_row(row) if row is not None else None
