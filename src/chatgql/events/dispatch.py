"""In-process fanout from the event stream to live subscriptions.

One Dispatcher per API process. It is fed every event once (from the
broadcast bus) and hands each to the subscriptions that should see it:

- a subscription to one conversation, or to all of the viewer's;
- only while the viewer is a member at the time of the event: membership
  comes from a per-process cache (one query per conversation, not per
  subscriber), dropped whenever a member event for that conversation passes.

Each subscription has a bounded buffer. A subscriber that falls behind is cut
off with SubscriberOverflow (it resyncs with messages(after:) or sync) and
never slows the others down.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, defaultdict, deque
from collections.abc import Awaitable, Callable
from typing import Protocol

from ..errors import LimitExceeded, NotFound
from . import types as events

log = logging.getLogger(__name__)

MemberLoader = Callable[[int], Awaitable[frozenset[int]]]


class SubscriberOverflow(LimitExceeded):
    """The subscriber fell too far behind; it must resync from its last seq."""

    def __init__(self) -> None:
        super().__init__(
            "subscription ended: the client fell behind; resync with messages(after:) or sync",
            reason="SUBSCRIBER_TOO_SLOW",
            resync=True,
        )


class StreamInterrupted(LimitExceeded):
    """The process lost its event stream; events may have been missed."""

    def __init__(self) -> None:
        super().__init__(
            "subscription ended: the event stream was interrupted; resync with messages(after:) or sync",
            reason="STREAM_INTERRUPTED",
            resync=True,
        )


class Subscription:
    """One live subscription: a bounded buffer, read by async iteration.

    Thousands of these sit idle in a process, so it is kept small: the buffer
    (a deque) and the reader's wake-up future exist only while needed.
    """

    __slots__ = ("user_id", "conversation_id", "event_type", "_buffer", "_pending", "_waiter", "_failure")

    def __init__(self, user_id: int, conversation_id: int | None, event_type: str, buffer: int) -> None:
        self.user_id = user_id
        self.conversation_id = conversation_id
        self.event_type = event_type
        self._buffer = buffer
        self._pending: deque[dict] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._failure: Exception | None = None

    def offer(self, event: dict) -> bool:
        """Buffer event; False when this overflowed the buffer and ended the subscription."""
        if self._failure is not None:
            return True
        pending = self._pending
        if pending is None:
            pending = self._pending = deque()
        elif len(pending) >= self._buffer:
            self.fail(SubscriberOverflow())
            return False
        pending.append(event)
        self._wake()
        return True

    def fail(self, error: Exception) -> None:
        """End the subscription with error after what is already buffered is dropped."""
        if self._failure is not None:
            return
        self._failure = error
        self._pending = None
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> dict:
        while True:
            if self._failure is not None:
                raise self._failure
            pending = self._pending
            if pending:
                event = pending.popleft()
                if not pending:
                    self._pending = None  # an idle subscription holds no buffer
                return event
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                if self._waiter is waiter:
                    self._waiter = None


class Interest(Protocol):
    """Told which conversations live subscriptions need (None: all of a viewer's): the bus."""

    async def want(self, conversation_id: int | None) -> None: ...

    async def release(self, conversation_id: int | None) -> None: ...


class _Registration:
    """`async with dispatcher.subscribe(...) as sub`: sub receives events inside the block."""

    __slots__ = ("_index", "_key", "_sub", "_interest")

    def __init__(
        self, index: dict[int, set[Subscription]], key: int, sub: Subscription, interest: Interest | None
    ) -> None:
        self._index = index
        self._key = key
        self._sub = sub
        self._interest = interest

    async def __aenter__(self) -> Subscription:
        if self._interest is not None:
            await self._interest.want(self._sub.conversation_id)
        self._index[self._key].add(self._sub)
        return self._sub

    async def __aexit__(self, *exc: object) -> None:
        subs = self._index.get(self._key)
        if subs is not None:
            subs.discard(self._sub)
            if not subs:
                del self._index[self._key]
        if self._interest is not None:
            await self._interest.release(self._sub.conversation_id)


class MembershipCache:
    """conversation id -> member ids, LRU-bounded, loaded on first use."""

    def __init__(self, load: MemberLoader, max_entries: int = 10_000) -> None:
        self._load = load
        self._max = max_entries
        self._entries: OrderedDict[int, frozenset[int]] = OrderedDict()

    async def members(self, conversation_id: int) -> frozenset[int]:
        found = self._entries.get(conversation_id)
        if found is not None:
            self._entries.move_to_end(conversation_id)
            return found
        found = await self._load(conversation_id)
        self._entries[conversation_id] = found
        if len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return found

    def forget(self, conversation_id: int) -> None:
        self._entries.pop(conversation_id, None)


class Dispatcher:
    def __init__(
        self,
        membership: MembershipCache,
        buffer: int,
        on_drop: Callable[[], None] = lambda: None,
        interest: Interest | None = None,
    ) -> None:
        self._membership = membership
        self._interest = interest
        self._buffer = buffer
        self._on_drop = on_drop
        self._by_conversation: dict[int, set[Subscription]] = defaultdict(set)
        self._by_user: dict[int, set[Subscription]] = defaultdict(set)

    @property
    def active(self) -> int:
        return sum(len(s) for s in self._by_conversation.values()) + sum(len(s) for s in self._by_user.values())

    def subscribe(self, user_id: int, conversation_id: int | None, event_type: str) -> _Registration:
        """`async with dispatcher.subscribe(...) as subscription: async for event in subscription: ...`"""
        sub = Subscription(user_id, conversation_id, event_type, self._buffer)
        if conversation_id is None:
            return _Registration(self._by_user, user_id, sub, self._interest)
        return _Registration(self._by_conversation, conversation_id, sub, self._interest)

    async def dispatch(self, event: dict) -> None:
        cid = event["conversationId"]
        if event["type"] in (events.MEMBERS_ADDED, events.MEMBER_REMOVED):
            self._membership.forget(cid)
            if event["type"] == events.MEMBER_REMOVED:
                for sub in list(self._by_conversation.get(cid, ())):
                    if sub.user_id == event["userId"]:
                        sub.fail(NotFound(f"conversation {cid} not found", conversationId=str(cid)))
            return
        kind = event["type"]
        specific = [s for s in self._by_conversation.get(cid, ()) if s.event_type == kind]
        if not specific and not self._by_user:
            return
        members = await self._membership.members(cid)
        for sub in specific:
            if sub.user_id in members:
                self._offer(sub, event)
        # Walk whichever side is smaller: the members or the subscribed users.
        if len(members) <= len(self._by_user):
            pairs = ((uid, self._by_user.get(uid, ())) for uid in members)
        else:
            pairs = ((uid, subs) for uid, subs in self._by_user.items() if uid in members)
        for _, subs in pairs:
            for sub in subs:
                if sub.event_type == kind:
                    self._offer(sub, event)

    def _offer(self, sub: Subscription, event: dict) -> None:
        if not sub.offer(event):
            self._on_drop()

    def interrupt_all(self) -> None:
        """The stream broke: every subscriber may have missed events; end them all."""
        for index in (self._by_conversation, self._by_user):
            for subs in index.values():
                for sub in subs:
                    sub.fail(StreamInterrupted())
