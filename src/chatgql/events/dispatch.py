"""In-process fanout from the event stream to live subscriptions.

One Dispatcher per API process. It is fed every event once (from the
broadcast bus) and hands each to the subscriptions that should see it:

- a subscription to one conversation, or to all of the viewer's;
- only while the viewer is a member at the time of the event: membership
  comes from a per-process cache (one query per conversation, not per
  subscriber), dropped whenever a member event for that conversation passes.
  For a small conversation the cache holds every member id; for a big one
  (more than CHATGQL_BIG_GROUP_THRESHOLD members) only whether each user
  subscribed in this process is a member: the query is bounded by this
  process's subscribers, never by the group's 100,000 members;
- in a big group a read.updated goes at once only to the reader's own
  readUpdated subscriptions; the conversation's other readUpdated subscribers
  get the newest move at most once per CHATGQL_BIG_GROUP_READ_INTERVAL_SECONDS,
  marked coalesced (ReadCoalescer).

Each subscription has a bounded buffer. A subscriber that falls behind is cut
off with SubscriberOverflow (it resyncs with messages(after:) or sync) and
never slows the others down.

Every event travels with its commit time (the outbox row's created_at; None
when unknown). With a delay bound (CHATGQL_MAX_DELIVERY_DELAY_SECONDS), an
event older than it is never delivered late: when the dispatcher is handed one
(the process is behind) it ends the subscriptions that would have received it
with DeliveryDelayed, without reading anything (so a backlog is dropped fast),
and a subscription whose reader takes one out of its buffer too late (a slow
socket, a busy loop) ends the same way. Both resync with messages(after:).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from ..errors import LimitExceeded, NotFound, banned
from . import types as events

log = logging.getLogger(__name__)

# (conversation id, user ids subscribed here) -> (member_count, member ids): every member's id when
# member_count <= the threshold, else only the members among the ids given; None: no such conversation.
# A loader may add a third item: {user id: the first seq they may read} for the members among those
# ids who may not read the whole history (visible_from_seq > 1).
MemberLoader = Callable[
    [int, list[str]], Awaitable[tuple[int, list[str]] | tuple[int, list[str], dict[str, int]] | None]
]


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


class DeliveryDelayed(LimitExceeded):
    """An event for the subscriber was older than the delay bound: the live path is behind."""

    def __init__(self) -> None:
        super().__init__(
            "subscription ended: events reached this server too late; resync with messages(after:) or sync",
            reason="DELIVERY_DELAYED",
            resync=True,
        )


# An event and its commit time (epoch seconds; None: unknown, never too late).
Stamped = tuple[dict, float | None]


# A subscription's failure once raised (the error itself is not kept: see Subscription.take).
_RAISED = Exception("the subscription ended")


_OF_A_MESSAGE = (events.MESSAGE_NEW, events.MESSAGE_CHANGED)  # the channels whose events carry a message's seq


class _Ended:
    """What Subscription.take() gives once the subscription's failure was raised."""

    __slots__ = ()


ENDED = _Ended()


class Subscription:
    """One live subscription: a bounded buffer, read by async iteration.

    Thousands of these sit idle in a process, so it is kept small: the buffer
    (a deque) and the reader's wake-up future exist only while needed.
    """

    __slots__ = (
        "user_id",
        "conversation_id",
        "event_type",
        "_buffer",
        "_max_delay",
        "_pending",
        "_waiter",
        "_failure",
        "_parked",
    )

    def __init__(
        self, user_id: str, conversation_id: int | None, event_type: str, buffer: int, max_delay: float = 0.0
    ) -> None:
        self.user_id = user_id
        self.conversation_id = conversation_id
        self.event_type = event_type
        self._buffer = buffer
        self._max_delay = max_delay  # 0: no bound
        self._pending: deque[Stamped] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._failure: Exception | None = None
        self._parked: Callable[[], None] | None = None  # see park()

    def offer(self, event: Stamped) -> bool:
        """Buffer (event, commit time); False when this overflowed the buffer and ended the
        subscription. One tuple is shared by every subscription offered it."""
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
            return
        parked = self._parked
        if parked is not None:
            self._parked = None
            parked()

    def park(self, ready: Callable[[], None]) -> None:
        """Have ready() called (once) at the next event or failure, instead of a reader waiting.

        A parked subscription has no reader at all while it is idle (no task, no frames: memory
        per idle websocket, engine/parked.py): whoever parked it reads what came with take()
        when ready() is called."""
        self._parked = ready

    def unpark(self) -> None:
        self._parked = None

    def failing(self) -> bool:
        """Whether the next take() raises: the failure is there, or the next event came too late
        (which fails the subscription now, as take() would)."""
        failure = self._failure
        if failure is not None:
            return failure is not _RAISED
        pending = self._pending
        if pending:
            committed_at = pending[0][1]
            if committed_at is not None and self._max_delay and time.time() - committed_at > self._max_delay:
                self.fail(DeliveryDelayed())
                return True
        return False

    def has_events(self) -> bool:
        return bool(self._pending)

    def pop(self) -> dict | None:
        """The next event, None when there is none: for a reader that asked failing() first."""
        pending = self._pending
        if not pending:
            return None
        event = pending.popleft()[0]
        if not pending:
            self._pending = None
        return event

    def take(self) -> dict | None | _Ended:
        """The next event without waiting: None when there is none yet, ENDED once the failure
        was raised; the failure itself is raised (once)."""
        while True:
            failure = self._failure
            if failure is not None:
                if failure is _RAISED:
                    return ENDED
                # Raised once and not kept: its traceback holds this frame, which holds this
                # subscription; were the error still referred to from here (self._failure, the
                # local), that would be a cycle, frozen with the connection for good (collector.py).
                self._failure = _RAISED
                try:
                    raise failure
                finally:
                    failure = None
            pending = self._pending
            if not pending:
                return None
            event, committed_at = pending.popleft()
            if not pending:
                self._pending = None  # an idle subscription holds no buffer
            if committed_at is not None and self._max_delay and time.time() - committed_at > self._max_delay:
                self.fail(DeliveryDelayed())
                continue
            return event

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> dict:
        while True:
            event = self.take()
            if event is ENDED:
                raise StopAsyncIteration
            if event is not None:
                return event  # type: ignore[return-value]
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

    __slots__ = ("_dispatcher", "_sub", "_interest")

    def __init__(self, dispatcher: Dispatcher, sub: Subscription, interest: Interest | None) -> None:
        self._dispatcher = dispatcher
        self._sub = sub
        self._interest = interest

    @property
    def subscription(self) -> Subscription:
        return self._sub

    async def __aenter__(self) -> Subscription:
        if self._interest is not None:
            await self._interest.want(self._sub.conversation_id)
        self._dispatcher._add(self._sub)
        return self._sub

    async def __aexit__(self, *exc: object) -> None:
        self._dispatcher._remove(self._sub)
        if self._interest is not None:
            await self._interest.release(self._sub.conversation_id)


class Members:
    """What this process knows of one conversation's members.

    complete: every member id is in `ids` (a small conversation). Otherwise
    (a big one) `ids` holds the members among `asked`, the user ids whose
    membership was read; `version` is the dispatcher's subscriber version
    when the subscribed users were last all asked about."""

    __slots__ = ("member_count", "complete", "ids", "late", "asked", "version")

    def __init__(self, member_count: int, complete: bool, ids: set[str], late: dict[str, int] | None = None) -> None:
        self.member_count = member_count
        self.complete = complete
        self.ids = ids
        # members (among ids) who joined a group hiding its history: the first seq each may read
        self.late: dict[str, int] = late if late is not None else {}
        self.asked: set[str] = set()
        self.version = -1


class MembershipCache:
    """conversation id -> Members, LRU-bounded, loaded on first use.

    A conversation of at most whole_up_to members is read whole (one query);
    a bigger one only for the user ids subscribed in this process that were
    not asked about yet. A read that overlapped a forget() (a member event)
    is used for the event that asked, and not kept.
    """

    def __init__(self, load: MemberLoader, whole_up_to: int = 200, max_entries: int = 10_000) -> None:
        self._load = load
        self.whole_up_to = whole_up_to
        self._max = max_entries
        self._entries: OrderedDict[int, Members] = OrderedDict()
        self._generation = 0

    async def members(self, conversation_id: int, subscribed: Callable[[], Iterable[str]], version: int) -> Members:
        """The conversation's Members, knowing about every user subscribed() names (asked only
        when version, the dispatcher's subscriber version, changed since the last time)."""
        found = self._entries.get(conversation_id)
        if found is not None:
            self._entries.move_to_end(conversation_id)
            if found.complete or found.version == version:
                return found
            unknown = [uid for uid in subscribed() if uid not in found.asked]
            if not unknown:
                found.version = version
                return found
        else:
            unknown = list(subscribed())
        generation = self._generation
        loaded = await self._load(conversation_id, unknown)
        count, ids = (loaded[0], loaded[1]) if loaded is not None else (0, [])
        late: dict[str, int] = loaded[2] if loaded is not None and len(loaded) > 2 else {}
        if count <= self.whole_up_to:
            entry = Members(count, True, set(ids), dict(late))
        else:
            entry = found if found is not None and not found.complete else Members(count, False, set())
            entry.member_count = count
            entry.ids.update(ids)
            entry.late.update(late)
            entry.asked.update(unknown)
            entry.version = version
        if generation == self._generation:
            self._entries[conversation_id] = entry
            self._entries.move_to_end(conversation_id)
            if len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return entry

    def cached(self, conversation_id: int, version: int) -> Members | None:
        """members() without a read, when it needs none (the common case); else None."""
        found = self._entries.get(conversation_id)
        if found is not None and (found.complete or found.version == version):
            return found
        return None

    def peek(self, conversation_id: int) -> Members | None:
        """Whatever is known of the conversation, however stale for big groups."""
        return self._entries.get(conversation_id)

    def forget(self, conversation_id: int) -> None:
        self._generation += 1
        self._entries.pop(conversation_id, None)


class ReadCoalescer:
    """Per big conversation: at most one coalesced read.updated per interval.

    The first move is passed on at once; moves that come within the interval
    after a delivery wait, and when it ends the newest of them is passed on,
    with how many moves it stands for. A conversation quiet for a whole
    interval is forgotten.
    """

    def __init__(self, interval: float, deliver: Callable[[int, Stamped], None]) -> None:
        self._interval = interval
        self._deliver = deliver
        self._state: dict[int, list] = {}  # cid -> [pending event or None, moves, timer handle, commit time]

    def add(self, conversation_id: int, event: dict, committed_at: float | None = None) -> None:
        state = self._state.get(conversation_id)
        if state is None:
            state = self._state[conversation_id] = [
                None,
                0,
                asyncio.get_running_loop().call_soon(self._flush, conversation_id),
                None,
            ]
        state[0] = event
        state[1] += 1
        state[3] = committed_at

    def _flush(self, conversation_id: int) -> None:
        state = self._state[conversation_id]
        event, moves = state[0], state[1]
        if event is None:
            del self._state[conversation_id]  # quiet for a whole interval
            return
        state[0], state[1] = None, 0
        state[2] = asyncio.get_running_loop().call_later(self._interval, self._flush, conversation_id)
        self._deliver(conversation_id, ({**event, "coalesced": True, "moves": moves}, state[3]))


class Dispatcher:
    def __init__(
        self,
        membership: MembershipCache,
        buffer: int,
        on_drop: Callable[[], None] = lambda: None,
        interest: Interest | None = None,
        *,
        read_interval: float = 1.0,
        max_delay: float = 0.0,
    ) -> None:
        self._membership = membership
        self._interest = interest
        self._buffer = buffer
        self._on_drop = on_drop
        # Events older than this (seconds since their commit) are not delivered: the
        # subscriptions they were for end with DeliveryDelayed. 0: no bound.
        self.max_delay = max_delay
        # Told of every app-wide ban and lifted ban dispatched here (user id, until or None, banned):
        # the process's ban list.
        self.on_ban: Callable[[str, str | None, bool], None] | None = None
        # conversation id -> user id -> that user's subscriptions to the conversation
        self._by_conversation: dict[int, dict[str, set[Subscription]]] = {}
        self._by_user: dict[str, set[Subscription]] = {}
        self._version = 0  # grows whenever a user is subscribed anew (big groups ask about them)
        self._coalescer = ReadCoalescer(read_interval, self._deliver_coalesced)
        self._tasks: set[asyncio.Task] = set()
        self.dispatched = 0  # events handed to dispatch (heartbeats aside)
        self.shed = 0  # of which too late: not delivered, their subscriptions ended
        self.delayed = 0  # subscriptions ended with DeliveryDelayed here

    @property
    def active(self) -> int:
        return sum(len(s) for by_user in self._by_conversation.values() for s in by_user.values()) + sum(
            len(s) for s in self._by_user.values()
        )

    def subscribe(self, user_id: str, conversation_id: int | None, event_type: str) -> _Registration:
        """`async with dispatcher.subscribe(...) as subscription: async for event in subscription: ...`"""
        sub = Subscription(user_id, conversation_id, event_type, self._buffer, self.max_delay)
        return _Registration(self, sub, self._interest)

    def _add(self, sub: Subscription) -> None:
        cid = sub.conversation_id
        index = self._by_user if cid is None else self._by_conversation.setdefault(cid, {})
        subs = index.get(sub.user_id)
        if subs is None:
            subs = index[sub.user_id] = set()
            self._version += 1
        subs.add(sub)

    def _remove(self, sub: Subscription) -> None:
        cid = sub.conversation_id
        index = self._by_user if cid is None else self._by_conversation.get(cid)
        if index is None:
            return
        subs = index.get(sub.user_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del index[sub.user_id]
                if cid is not None and not index:
                    del self._by_conversation[cid]

    def _subscribed(self, conversation_id: int) -> Callable[[], Iterable[str]]:
        def users() -> Iterable[str]:
            by_conversation = self._by_conversation.get(conversation_id, {})
            yield from by_conversation
            yield from (uid for uid in self._by_user if uid not in by_conversation)

        return users

    async def _members(self, conversation_id: int) -> Members:
        return await self._membership.members(conversation_id, self._subscribed(conversation_id), self._version)

    async def dispatch_many(self, stamped: Iterable[Stamped]) -> None:
        """Hand on a batch of (event, commit time), in order. An event that fails to dispatch ends
        every subscription with the resync error (the others still go): it never raises."""
        for event, committed_at in stamped:
            try:
                await self.dispatch(event, committed_at)
            except Exception:
                log.warning("could not dispatch an event; ending subscriptions", exc_info=True)
                self.interrupt_all()

    async def dispatch(self, event: dict, committed_at: float | None = None) -> None:
        self.dispatched += 1
        events.with_text_user_ids(event)  # an event of before 0014_text_user_ids: its numbers as text
        cid = event["conversationId"]
        kind = event["type"]
        if kind in events.USER_TYPES:
            self._dispatch_user(event, kind, committed_at)
            return
        if kind in (events.MEMBERS_ADDED, events.MEMBER_REMOVED):
            self._membership.forget(cid)
            if kind == events.MEMBER_REMOVED:
                for sub in list(self._by_conversation.get(cid, {}).get(event["userId"], ())):
                    sub.fail(NotFound(f"conversation {cid} not found", conversationId=str(cid)))
            return
        left = skip = None
        if kind == events.TYPING:
            skip = event["userId"]  # the typer's own devices know
        elif kind == events.CONVERSATION_UPDATED and event["change"] in events.MEMBER_OUT:
            self._membership.forget(cid)  # before its member.removed: the members are read afresh
            left = event["memberId"]
        if cid not in self._by_conversation and not self._by_user:
            return
        kind = events.CHANNELS.get(kind, kind)  # the change kinds share one channel (messageChanged)
        if committed_at is not None and self.max_delay and time.time() - committed_at > self.max_delay:
            self._shed(cid, kind)
            return
        members = self._membership.cached(cid, self._version) or await self._members(cid)
        stamped = (event, committed_at)
        if kind in events.OWN_TYPES:  # the member's own devices only
            if event["userId"] in members.ids:
                self._offer_user(cid, event["userId"], kind, stamped)
            return
        if kind == events.READ_UPDATED and members.member_count > self._membership.whole_up_to:
            # A big group: the reader's own devices now, everyone else coalesced.
            reader = event["userId"]
            if reader in members.ids:
                self._offer_user(cid, reader, kind, stamped)
            self._coalescer.add(cid, event, committed_at)
            return
        if left is not None:  # the one who left (or was banned) is told too, on every device
            self._offer_user(cid, left, kind, stamped)
            skip = left
        if members.late and kind in _OF_A_MESSAGE:
            # a message from before a member's join to a group that hid it (a change of it, or the message itself
            # when the members were read after the join committed): not theirs to see
            seq = event["seq"]
            hidden = {uid for uid, first in members.late.items() if seq < first}
            if hidden:
                self._deliver(cid, kind, stamped, members, skip=skip, hidden=hidden)
                return
        self._deliver(cid, kind, stamped, members, skip=skip)

    def _dispatch_user(self, event: dict, kind: str, committed_at: float | None) -> None:
        """A user's own event (events.UserEvent): to their all-conversations subscriptions of its kind. A ban
        ends every subscription of theirs at once; a ban and a lifted ban tell on_ban (the process's ban list)."""
        user_id = event["userId"]
        if kind == events.USER_UNBANNED:
            if self.on_ban is not None:
                self.on_ban(user_id, None, False)
            return
        if kind == events.USER_BANNED:
            until = event.get("until")
            if self.on_ban is not None:
                self.on_ban(user_id, until, True)
            for by_user in (*self._by_conversation.values(), self._by_user):
                for sub in list(by_user.get(user_id, ())):
                    sub.fail(banned(until))
            return
        for sub in self._by_user.get(user_id, ()):
            if sub.event_type == kind:
                self._offer(sub, (event, committed_at))

    def _shed(self, cid: int, kind: str) -> None:
        """An event too old to deliver: end the subscriptions that would have received it, without
        reading anything (a process far behind drops its backlog at this cost per event). Who
        may be a member when the membership is not known here: every all-conversations one."""
        self.shed += 1
        ended = 0
        for subs in self._by_conversation.get(cid, {}).values():
            for sub in subs:
                if sub.event_type == kind and sub._failure is None:
                    sub.fail(DeliveryDelayed())
                    ended += 1
        if self._by_user:
            known = self._membership.peek(cid)
            for uid, subs in self._by_user.items():
                # not a member, as far as this process knows (a big group's answer covers whom it asked about)
                if known is not None and uid not in known.ids and (known.complete or uid in known.asked):
                    continue
                for sub in subs:
                    if sub.event_type == kind and sub._failure is None:
                        sub.fail(DeliveryDelayed())
                        ended += 1
        self.delayed += ended

    def _offer_user(self, cid: int, user_id: str, kind: str, stamped: Stamped) -> None:
        for subs in (self._by_conversation.get(cid, {}).get(user_id, ()), self._by_user.get(user_id, ())):
            for sub in subs:
                if sub.event_type == kind:
                    self._offer(sub, stamped)

    def _deliver(
        self,
        cid: int,
        kind: str,
        stamped: Stamped,
        members: Members,
        skip: str | None = None,
        hidden: set[str] | None = None,
    ) -> None:
        ids = members.ids if not hidden else members.ids - hidden
        offer = self._offer
        for uid, subs in self._by_conversation.get(cid, {}).items():
            if uid in ids and uid != skip:
                for sub in subs:
                    if sub.event_type == kind:
                        offer(sub, stamped)
        by_user = self._by_user
        if not by_user:
            return
        # Walk whichever side is smaller: the members known here or the subscribed users.
        if len(ids) <= len(by_user):
            pairs: Iterable = ((uid, by_user.get(uid, ())) for uid in ids)
        else:
            pairs = ((uid, subs) for uid, subs in by_user.items() if uid in ids)
        for uid, subs in pairs:
            if uid == skip:
                continue
            for sub in subs:
                if sub.event_type == kind:
                    offer(sub, stamped)

    def _deliver_coalesced(self, cid: int, stamped: Stamped) -> None:
        """A coalesced read.updated, to every readUpdated subscriber of the conversation but the
        reader it carries (who had theirs at once)."""
        if cid not in self._by_conversation and not self._by_user:
            return

        async def deliver() -> None:
            try:
                members = await self._members(cid)
            except Exception:
                log.warning("could not read the members of a big group; ending subscriptions", exc_info=True)
                self.interrupt_all()
                return
            self._deliver(cid, events.READ_UPDATED, stamped, members, skip=stamped[0]["userId"])

        task = asyncio.create_task(deliver())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _offer(self, sub: Subscription, stamped: Stamped) -> None:
        if not sub.offer(stamped):
            self._on_drop()

    def interrupt_all(self) -> None:
        """The stream broke: every subscriber may have missed events; end them all."""
        for by_user in self._by_conversation.values():
            for subs in by_user.values():
                for sub in subs:
                    sub.fail(StreamInterrupted())
        for subs in self._by_user.values():
            for sub in subs:
                sub.fail(StreamInterrupted())
