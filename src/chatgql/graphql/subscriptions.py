"""Subscription root: live events from this process's Dispatcher.

Over websockets the context lives as long as the connection, so every event
gets its own loaders (nothing is cached across events), made when a field of
that event first needs one; seen, seenByCount and seenBy are read once per
event for all its subscribers (loaders.EventReads). Each event
keeps the dispatched dict it came from (`source`): subscribers of one event
may share its result (see shared.py).

Resumable messageNew (`cursors`, the SyncCursor shape sync takes): first
every message after the cursors from the database, then live, with no gap
and no duplicate. The order of the steps is what makes it gap-free:

1. register with the Dispatcher first: from then on every dispatched event
   is buffered for this subscription;
2. then read the database: each conversation's lastSeq and the messages up to
   it (services.history.read_replay). A message is dispatched only after its
   transaction committed; one that committed after the read started is
   dispatched after step 1, so it is in the buffer, and one that committed
   before it is in the read: every message is in one or the other;
3. deliver the replay, then the live events, dropping any whose seq is not
   above what the client holds for its conversation (the cursor, then each
   seq delivered): what was both read and buffered, and the duplicates that
   at-least-once delivery may bring, reach the client once.

Too far behind (more than CHATGQL_SUBSCRIBER_BUFFER messages to replay in
all, or more than CHATGQL_MAX_CATCH_UP in one conversation), the subscription
ends at once with the resync error (LIMIT_EXCEEDED, reason REPLAY_TOO_LONG,
resync: true), before any message is read: catch up with sync (which answers
a conversation that far behind with its newest page and tooLong), subscribe
again with the cursors sync gave.
While the replay is delivered, live events wait in the same bounded buffer
as always; a client too slow to take them is cut off with resync too.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import AsyncGenerator
from functools import partial
from typing import Annotated, Any

import strawberry
from strawberry import ID
from strawberry.types import Info

from ..errors import BadUserInput, conversation_not_found
from ..events.types import MESSAGE_NEW, READ_UPDATED, MessageNew, ReadUpdated
from ..services.checks import check_id
from ..services.history import read_replay
from .loaders import EventReads, SeenKey
from .scalars import Long
from .types import Message, MessageNewEvent, ReadUpdatedEvent, SyncCursor


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


# Recent message.new events -> (event, its Message fields, its shared reads): what every subscriber of an
# event shares, made once per event. Keyed by id(event); holding the event keeps its id from being reused.
# An event's subscribers mostly come one after another; a few events may interleave.
_recent: OrderedDict[int, tuple[dict, dict, EventReads]] = OrderedDict()
_RECENT = 64


def _for_event(event: dict, database: Any) -> tuple[dict, EventReads]:
    """A message.new event's fields as Message takes them, and its shared reads (once per event)."""
    found = _recent.get(id(event))
    if found is None or found[0] is not event:
        new = MessageNew.from_wire(event)
        fields = {
            "conversation_id": ID(str(new.conversation_id)),
            "seq": new.seq,
            "sender_id": ID(str(new.sender_id)),
            "client_msg_id": new.client_msg_id,
            "body": new.body,
            "created_at": new.created_at,
        }
        found = _recent[id(event)] = (event, fields, EventReads(database))
        if len(_recent) > _RECENT:
            _recent.popitem(last=False)
    return found[1], found[2]


# Recent read.updated events -> (event, its typed form, its shared reads): a member row selected by many
# subscribers (member { role joinedAt }) is read once per event, not once per subscriber.
_recent_reads: OrderedDict[int, tuple[dict, ReadUpdated, EventReads]] = OrderedDict()


def _read_event(event: dict, database: Any) -> tuple[ReadUpdated, EventReads]:
    found = _recent_reads.get(id(event))
    if found is None or found[0] is not event:
        found = _recent_reads[id(event)] = (event, ReadUpdated.from_wire(event), EventReads(database))
        if len(_recent_reads) > _RECENT:
            _recent_reads.popitem(last=False)
    return found[1], found[2]


@strawberry.type
class Subscription:
    @strawberry.subscription(
        description="New messages in one conversation, or in every conversation the viewer is a member of "
        "when conversationId is omitted."
    )
    async def message_new(
        self,
        info: Info,
        conversation_id: ID | None = strawberry.UNSET,
        cursors: Annotated[
            list[SyncCursor] | None,
            strawberry.argument(
                description="Resume: first every message after these cursors (as sync takes them), "
                "from the database, then live, with no gap and no duplicate (by conversationId and seq). "
                "More than CHATGQL_SUBSCRIBER_BUFFER messages behind in all, or more than CHATGQL_MAX_CATCH_UP "
                "in one conversation: LIMIT_EXCEEDED with resync: true (sync answers such a conversation with its "
                "newest page and tooLong)."
            ),
        ] = strawberry.UNSET,
    ) -> AsyncGenerator[MessageNewEvent, None]:
        if cursors is strawberry.UNSET or cursors is None:
            async with await _events(info, conversation_id, MESSAGE_NEW) as subscription:
                async for event in subscription:
                    fields, reads = _for_event(event, info.context.database)
                    message = Message(**fields, new_loaders=partial(info.context.fresh_loaders, reads))
                    yield MessageNewEvent(
                        conversation_id=message.conversation_id, seq=message.seq, message=message, source=event
                    )
            return
        ctx = info.context
        _ = ctx.viewer_id
        parsed = [(check_id(c.conversation_id, "conversationId"), c.after_seq) for c in cursors]
        only = None if conversation_id is None or conversation_id is strawberry.UNSET else conversation_id
        if only is not None and any(cid != check_id(only, "conversationId") for cid, _ in parsed):
            raise BadUserInput("with conversationId, every cursor must be for that conversation")
        async with await _events(info, conversation_id, MESSAGE_NEW) as subscription:
            replay = await read_replay(  # after registering: see the module docstring
                ctx.database,
                ctx.viewer_id,
                parsed,
                bound=ctx.settings.subscriber_buffer,
                max_cursors=ctx.settings.max_sync_cursors,
                max_catch_up=ctx.settings.max_catch_up,
            )
            held = replay.held
            # The replay is one read of one moment: its messages share one set of loaders.
            replay_loaders = functools.cache(ctx.fresh_loaders)
            if replay.messages:  # their seen fields, if selected, in one read (not one per message)
                replay_loaders().seen_reads.expect_seen(
                    [SeenKey(row["conversation_id"], row["seq"], row["sender_id"]) for row in replay.messages]
                )
            for row in replay.messages:
                message = Message.from_row(row)
                message.new_loaders = replay_loaders
                yield MessageNewEvent(conversation_id=message.conversation_id, seq=message.seq, message=message)
            async for event in subscription:
                fields, reads = _for_event(event, ctx.database)
                cid, seq = int(fields["conversation_id"]), fields["seq"]
                if seq <= held.get(cid, 0):
                    continue
                held[cid] = seq
                message = Message(**fields, new_loaders=partial(ctx.fresh_loaders, reads))
                yield MessageNewEvent(
                    conversation_id=message.conversation_id, seq=message.seq, message=message, source=event
                )

    @strawberry.subscription(
        description="Watermark moves in one conversation, or in all of the viewer's. In a group of more than "
        "CHATGQL_BIG_GROUP_THRESHOLD members a member's moves reach only that member's own subscriptions at "
        "once; the others get at most one event a second per conversation, with coalesced: true."
    )
    async def read_updated(
        self, info: Info, conversation_id: ID | None = strawberry.UNSET
    ) -> AsyncGenerator[ReadUpdatedEvent, None]:
        async with await _events(info, conversation_id, READ_UPDATED) as subscription:
            async for event in subscription:
                read, reads = _read_event(event, info.context.database)
                yield ReadUpdatedEvent(
                    conversation_id=ID(str(read.conversation_id)),
                    user_id=ID(str(read.user_id)),
                    last_read_seq=Long(read.last_read_seq or 0),  # never None: from_wire requires it
                    coalesced=read.coalesced,
                    moves=read.moves,
                    source=event,
                    new_loaders=partial(info.context.fresh_loaders, reads),
                )
