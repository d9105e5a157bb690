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

from ..engine.registry import PARKABLE, PARKING, PER_EVENT
from ..errors import BadUserInput, conversation_not_found
from ..events.types import (
    BLOCK_CHANGED,
    CONVERSATION_UPDATED,
    DELIVERY_UPDATED,
    MEMBERSHIP_UPDATED,
    MESSAGE_CHANGED,
    MESSAGE_NEW,
    READ_UPDATED,
    TYPING,
    BlockChanged,
    ConversationUpdated,
    DeliveryUpdated,
    MembershipUpdated,
    MessageNew,
    ReadUpdated,
    Typing,
    parse,
)
from ..services.changes import read_change_replay
from ..services.checks import check_id
from ..services.history import read_replay
from .features.reporting import BlockChangedEvent
from .groups import ConversationChange, ConversationUpdatedEvent
from .loaders import EventReads, SeenKey
from .readstate import DeliveryUpdatedEvent, MembershipUpdatedEvent, TypingEvent
from .scalars import Long
from .types import (
    ChangeCursor,
    MemberRole,
    Message,
    MessageChange,
    MessageNewEvent,
    ReadUpdatedEvent,
    SyncCursor,
)


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
        fields = Message.fields_of(MessageNew.from_wire(event))
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


def _message_new(event: dict, ctx: Any) -> MessageNewEvent:
    fields, reads = _for_event(event, ctx.database)
    message = Message(**fields, new_loaders=partial(ctx.fresh_loaders, reads))
    return MessageNewEvent(conversation_id=message.conversation_id, seq=message.seq, message=message, source=event)


@strawberry.type
class Subscription:
    @strawberry.subscription(
        metadata=PER_EVENT,
        description="New messages in one conversation, or in every conversation the viewer is a member of "
        "when conversationId is omitted.",
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
            parked = PARKING.get()
            if parked is not None:  # run by a websocket handler that parks it when idle (PARKABLE below)
                async for event in parked.events(partial(_events, info, conversation_id, MESSAGE_NEW), _message_new):
                    yield _message_new(event, info.context)
                return
            async with await _events(info, conversation_id, MESSAGE_NEW) as subscription:
                async for event in subscription:
                    yield _message_new(event, info.context)
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
        metadata=PER_EVENT,
        description="Watermark moves in one conversation, or in all of the viewer's. In a group of more than "
        "CHATGQL_BIG_GROUP_THRESHOLD members a member's moves reach only that member's own subscriptions at "
        "once; the others get at most one event a second per conversation, with coalesced: true.",
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

    @strawberry.subscription(
        description="Changes to messages (MessageChangeKind) in one conversation, or in all of the viewer's: "
        "each with its changeSeq and the message as it is after it. Never a new message (that is messageNew)."
    )
    async def message_changed(
        self,
        info: Info,
        conversation_id: ID | None = strawberry.UNSET,
        cursors: Annotated[
            list[ChangeCursor] | None,
            strawberry.argument(
                description="Resume: first every change after these change cursors, from the database, then "
                "live, with no gap and no duplicate (by conversationId and changeSeq). More than "
                "CHATGQL_SUBSCRIBER_BUFFER changes behind in all, or more than CHATGQL_MAX_CATCH_UP in one "
                "conversation: LIMIT_EXCEEDED with resync: true (sync with afterChangeSeq answers changesTooLong)."
            ),
        ] = strawberry.UNSET,
    ) -> AsyncGenerator[MessageChange, None]:
        ctx = info.context
        _ = ctx.viewer_id
        resume = cursors is not strawberry.UNSET and cursors is not None
        parsed = [(check_id(c.conversation_id, "conversationId"), c.after_change_seq) for c in cursors or ()]
        only = None if conversation_id is None or conversation_id is strawberry.UNSET else conversation_id
        if only is not None and any(cid != check_id(only, "conversationId") for cid, _ in parsed):
            raise BadUserInput("with conversationId, every cursor must be for that conversation")
        async with await _events(info, conversation_id, MESSAGE_CHANGED) as subscription:
            held: dict[int, int] = {}
            if resume:  # after registering: the order messageNew's resume keeps (module docstring)
                replay = await read_change_replay(
                    ctx.database,
                    ctx.viewer_id,
                    parsed,
                    bound=ctx.settings.subscriber_buffer,
                    max_cursors=ctx.settings.max_sync_cursors,
                    max_catch_up=ctx.settings.max_catch_up,
                )
                held = replay.held
                replay_loaders = functools.cache(ctx.fresh_loaders)
                for row in replay.changes:
                    change = MessageChange.from_row(row)
                    change.message.new_loaders = replay_loaders
                    yield change
            async for event in subscription:
                typed = parse(event)
                cid, change_seq = typed.conversation_id, event["changeSeq"]
                if resume:
                    if change_seq <= held.get(cid, 0):
                        continue
                    held[cid] = change_seq
                change = MessageChange.from_event(typed)  # type: ignore[arg-type]
                change.message.new_loaders = partial(ctx.fresh_loaders, EventReads(ctx.database))
                yield change

    @strawberry.subscription(
        description="The viewer's own state of one conversation, or of all of theirs: settings (updateMembership) "
        "and own unread start (markUnread), from any of their devices. Only the viewer gets these."
    )
    async def membership_updated(
        self, info: Info, conversation_id: ID | None = strawberry.UNSET
    ) -> AsyncGenerator[MembershipUpdatedEvent, None]:
        async with await _events(info, conversation_id, MEMBERSHIP_UPDATED) as subscription:
            async for event in subscription:
                own = MembershipUpdated.from_wire(event)
                yield MembershipUpdatedEvent(
                    conversation_id=ID(str(own.conversation_id)),
                    muted=own.muted,
                    archived=own.archived,
                    pinned=own.pinned,
                    last_read_seq=Long(own.last_read_seq),
                    new_loaders=info.context.fresh_loaders,
                )

    @strawberry.subscription(
        description="Changes to one group, or to all of the viewer's: renamed, a member's role changed, a member "
        "left (the one who left is told too)."
    )
    async def conversation_updated(
        self, info: Info, conversation_id: ID | None = strawberry.UNSET
    ) -> AsyncGenerator[ConversationUpdatedEvent, None]:
        async with await _events(info, conversation_id, CONVERSATION_UPDATED) as subscription:
            async for event in subscription:
                change = ConversationUpdated.from_wire(event)
                yield ConversationUpdatedEvent(
                    conversation_id=ID(str(change.conversation_id)),
                    change=ConversationChange(change.change),
                    user_id=ID(str(change.user_id)),
                    member_id=ID(str(change.member_id)),
                    title=change.title or None,
                    role=MemberRole(change.role) if change.role else None,
                    new_loaders=info.context.fresh_loaders,
                )

    @strawberry.subscription(
        description="Delivered watermark moves (markDelivered) in one conversation, or in all of the viewer's; "
        "none in groups of more than CHATGQL_BIG_GROUP_THRESHOLD members."
    )
    async def delivery_updated(
        self, info: Info, conversation_id: ID | None = strawberry.UNSET
    ) -> AsyncGenerator[DeliveryUpdatedEvent, None]:
        async with await _events(info, conversation_id, DELIVERY_UPDATED) as subscription:
            async for event in subscription:
                moved = DeliveryUpdated.from_wire(event)
                yield DeliveryUpdatedEvent(
                    conversation_id=ID(str(moved.conversation_id)),
                    user_id=ID(str(moved.user_id)),
                    delivered_seq=Long(moved.delivered_seq or 0),  # never None: from_wire requires it
                )

    @strawberry.subscription(
        description="Other members typing in one conversation, or in all of the viewer's (never the viewer's own); "
        "none in groups of more than CHATGQL_BIG_GROUP_THRESHOLD members. Ephemeral and at most once: "
        "hide an indicator at its `until`."
    )
    async def typing(
        self, info: Info, conversation_id: ID | None = strawberry.UNSET
    ) -> AsyncGenerator[TypingEvent, None]:
        async with await _events(info, conversation_id, TYPING) as subscription:
            async for event in subscription:
                yield TypingEvent.of(Typing.from_wire(event))

    @strawberry.subscription(
        description="The viewer blocked or unblocked someone, on any of their devices (blockUser, unblockUser)."
    )
    async def block_changed(self, info: Info) -> AsyncGenerator[BlockChangedEvent, None]:
        async with await _events(info, None, BLOCK_CHANGED) as subscription:
            async for event in subscription:
                change = BlockChanged.from_wire(event)
                yield BlockChangedEvent(user_id=ID(change.other_id), blocked=change.blocked)


# messageNew parks while idle when run by a websocket handler (its resolver iterates PARKING's events);
# not with `cursors`: resume replays first, and its state lives in the resolver's frame.
PARKABLE["messageNew"] = frozenset({"cursors"})
