"""Per-request DataLoaders: each batches one kind of read into one SQL statement.

Built per HTTP request, and per subscription event over websockets, so
nothing is cached across events.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Awaitable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, cast

from strawberry.dataloader import DataLoader

from ..db import Database, Row
from ..services.checks import PageRequest
from ..store import blocks, changes, conversations, delivery, mentions, messages, reactions
from ..store.reads import first_unread


@dataclass(frozen=True, slots=True)
class PageKey:
    conversation_id: int
    page: PageRequest


@dataclass(frozen=True, slots=True)
class SeenKey:
    """Who has seen message seq of a conversation (its sender does not count)."""

    conversation_id: int
    seq: int
    sender_id: str


@dataclass(frozen=True, slots=True)
class Seen:
    count: int  # seenByCount: members other than the sender whose watermark >= seq
    everyone: bool  # seen: there is another member, and every other member's watermark >= seq


@dataclass(frozen=True, slots=True)
class DeliveredKey:
    """Who has message seq delivered (its sender does not count), in conversations of at most
    whole_up_to members (the big-group threshold: above it, no answer)."""

    conversation_id: int
    seq: int
    sender_id: str
    whole_up_to: int


@dataclass(frozen=True, slots=True)
class SeenByKey:
    conversation_id: int
    seq: int
    sender_id: str
    after: str  # user id, exclusive ("": from the first)
    limit: int


@dataclass(frozen=True, slots=True)
class ReactedByKey:
    conversation_id: int
    seq: int
    emoji: str
    after: str  # user id, exclusive ("": from the first)
    limit: int


@dataclass(frozen=True, slots=True)
class MemberPageKey:
    conversation_id: int
    after: str  # user id, exclusive ("": from the first)
    limit: int


class EventReads:
    """Reads shared by every subscriber of one subscription event.

    Every subscriber of a message.new event asks the same questions (seen,
    seenByCount, seenBy depend on the message and the members' watermarks, not
    on who asks; a read.updated event's member row likewise), so the event
    holds one set of these loaders for all of them: one statement per kind of
    question per event, not one per subscriber. Loads are awaited through
    asyncio.shield (_Loader), so a subscriber that goes away mid-read does not
    cancel it for the others. It lives as long as the event (subscriptions.py),
    so nothing is cached across events.
    """

    __slots__ = ("seen", "seen_by", "member", "delivered", "mentions", "_reads")

    def __init__(self, database: Database) -> None:
        reads = self._reads = _SharedReads(database)
        self.delivered = _Loader(reads.load_delivered)
        self.mentions = _Loader(reads.load_mentions)
        self.seen = _Loader(reads.load_seen)
        self.seen_by = _Loader(reads.load_seen_by)
        self.member = _Loader(reads.load_members)

    def expect_seen(self, keys: Sequence[SeenKey]) -> None:
        """Messages whose seen fields may be asked one after another (a replay): the first seen load
        reads them all in the same statement, and later loads find their answers ready."""
        self._reads.expected.extend(keys)


class _Loader(DataLoader):
    """A DataLoader whose pending loads are awaited through asyncio.shield.

    When a non-null field fails, graphql-core cancels its sibling fields'
    tasks. A cancelled task cancels the future it is waiting on, and a
    DataLoader hands the same future to every field that loads the same key:
    fields elsewhere in the request then failed with CancelledError and the
    request answered HTTP 500 (found by tests/graphql/plan/test_planner_differential.py,
    with graphql-core's executor and with plans alike). Shielded, a cancelled
    field leaves the shared load alone.
    """

    def load(self, key: Any) -> Awaitable[Any]:
        future = cast("asyncio.Future[Any]", super().load(key))  # typed Awaitable; a Future
        return future if future.done() else asyncio.shield(future)


class Loaders:
    def __init__(self, database: Database, viewer_id: str, shared: EventReads | None = None) -> None:
        """shared: a subscription event's shared reads (EventReads), instead of this request's own."""
        # The loaders call a _Reads' methods, not this object's: a loader holding a bound method
        # of the Loaders that holds it would make every request's loaders a reference cycle.
        reads = self._reads = _Reads(database, viewer_id)
        self.conversation = _Loader(reads._load_conversations)
        self.member_count = _Loader(reads._load_member_counts)
        self.member_page = _Loader(reads.load_member_pages)
        if shared is None:
            shared = EventReads(database)
        self.seen_reads = shared
        self.seen = shared.seen
        self.seen_by = shared.seen_by
        self.member = shared.member
        self.delivered = shared.delivered
        self.mentions = shared.mentions
        self.unread_mentions = _Loader(reads.load_unread_mentions)
        self.total_unread_mentions = _Loader(reads.load_total_unread_mentions)
        self.first_unread = _Loader(reads.load_first_unread)
        self.message = _Loader(reads._load_messages)
        self.message_page = _Loader(reads._load_message_pages)
        self.viewer_totals = _Loader(reads._load_viewer_totals)
        self.edit_history = _Loader(reads._load_edit_histories)
        self.reactions = _Loader(reads._load_reactions)
        self.reacted_by = _Loader(reads._load_reacted_by)
        self.replies = _Loader(reads._load_replies)
        self.attachments = _Loader(reads._load_attachments)
        self.blocked_by_viewer = _Loader(reads._load_blocked_by_viewer)

    def forget_conversation(self, conversation_id: int) -> None:
        """Drop what this request cached about a conversation it just changed."""
        for loader in (self.conversation, self.member_count, self.unread_mentions, self.first_unread):
            with suppress(KeyError):
                loader.clear(conversation_id)
        # keyed by more than the conversation: what a request cached about it goes as a whole
        for keyed in (self.member_page, self.seen, self.seen_by, self.member, self.delivered, self.mentions):
            keyed.clear_all()


class _SharedReads:
    """Batch functions whose answers do not depend on who asks (EventReads)."""

    __slots__ = ("_database", "expected", "_ready")

    def __init__(self, database: Database) -> None:
        self._database = database
        self.expected: list[SeenKey] = []  # read along with the next seen load (EventReads.expect_seen)
        self._ready: dict[SeenKey, Seen] = {}  # what that read answered for keys not asked yet

    async def load_seen(self, keys: Sequence[SeenKey]) -> list[Seen]:
        missing = [key for key in keys if key not in self._ready]
        if missing:
            asking = set(missing)
            asked = missing + [key for key in self.expected if key not in asking and key not in self._ready]
            self.expected = []
            self._ready.update(zip(asked, await self._read_seen(asked), strict=True))
        answers = [self._ready[key] for key in keys]
        for key in keys:
            self._ready.pop(key, None)
        return answers

    async def _read_seen(self, keys: Sequence[SeenKey]) -> list[Seen]:
        """One statement for every key: see store.conversations.SEEN_STATE_SQL."""
        ranges: dict[int, tuple[int, int]] = {}
        for key in keys:
            lo, hi = ranges.get(key.conversation_id, (key.seq, key.seq))
            ranges[key.conversation_id] = (min(lo, key.seq), max(hi, key.seq))
        senders = sorted({(key.conversation_id, key.sender_id) for key in keys})
        async with self._database.connection() as conn:
            rows = await conversations.seen_state(conn, [(cid, lo, hi) for cid, (lo, hi) in ranges.items()], senders)
        buckets: dict[int, list[tuple[int, int]]] = defaultdict(list)
        lowest: dict[int, list[tuple[int, str]]] = defaultdict(list)
        sender_marks: dict[tuple[int, str], int] = {}
        for row in rows:
            cid, kind, u, a, b = row["cid"], row["kind"], row["u"], row["a"], row["b"]
            if kind == "h":
                buckets[cid].append((a, b))
            elif kind == "l":
                lowest[cid].append((b, u))
            else:
                sender_marks[(cid, u)] = b
        # readers[cid]: (ascending watermarks, members at or above each): a count is one bisect
        readers: dict[int, tuple[list[int], list[int]]] = {}
        for cid, found in buckets.items():
            found.sort()
            above, total = [], 0
            for _, n in reversed(found):
                total += n
                above.append(total)
            above.reverse()
            readers[cid] = ([w for w, _ in found], above)
        answers = []
        for key in keys:
            marks, above = readers.get(key.conversation_id, ([], []))
            i = bisect_left(marks, key.seq)
            count = above[i] if i < len(above) else 0
            if sender_marks.get((key.conversation_id, key.sender_id), -1) >= key.seq:
                count -= 1
            others = sorted(lowest.get(key.conversation_id, ()))
            low = next((w for w, uid in others if uid != key.sender_id), None)
            answers.append(Seen(count, low is not None and low >= key.seq))
        return answers

    async def load_delivered(self, keys: Sequence[DeliveredKey]) -> list[Seen | None]:
        """(deliveredCount, delivered) per key as a Seen; None for a big group. One statement: the
        members' delivered marks of the conversations (each at most the threshold's members)."""
        async with self._database.connection() as conn:
            rows = await delivery.delivered_marks(
                conn, sorted({k.conversation_id for k in keys}), max(k.whole_up_to for k in keys)
            )
        marks: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for row in rows:
            marks[row["conversation_id"]].append((row["user_id"], row["delivered"]))
        answers: list[Seen | None] = []
        for key in keys:
            members = marks.get(key.conversation_id)
            if members is None:
                answers.append(None)
                continue
            others = [mark for uid, mark in members if uid != key.sender_id]
            count = sum(mark >= key.seq for mark in others)
            answers.append(Seen(count, bool(others) and count == len(others)))
        return answers

    async def load_mentions(self, keys: Sequence[tuple[int, int]]) -> list[list[str]]:
        """The user ids each (conversation_id, seq) mentions, ascending: one statement."""
        async with self._database.connection() as conn:
            rows = await mentions.of_messages(conn, keys)
        found: dict[tuple[int, int], list[str]] = defaultdict(list)
        for row in rows:
            found[(row["conversation_id"], row["seq"])].append(row["user_id"])
        return [found.get(key, []) for key in keys]

    async def load_seen_by(self, keys: Sequence[SeenByKey]) -> list[list[str]]:
        async with self._database.connection() as conn:
            rows = await conversations.seen_by_pages(
                conn, [(k.conversation_id, k.seq, k.sender_id, k.after, k.limit) for k in keys]
            )
        found: list[list[str]] = [[] for _ in keys]
        for row in rows:
            found[row["i"] - 1].append(row["user_id"])
        return found

    async def load_members(self, keys: Sequence[tuple[int, str]]) -> list[Row | None]:
        """Membership rows by (conversation_id, user_id); None where not a member."""
        async with self._database.connection() as conn:
            rows = await conversations.member_rows(conn, keys)
        by_key = {(row["conversation_id"], row["user_id"]): row for row in rows}
        return [by_key.get(key) for key in keys]


class _Reads:
    """The batch functions behind one request's loaders."""

    __slots__ = ("_database", "_viewer_id")

    def __init__(self, database: Database, viewer_id: str) -> None:
        self._database = database
        self._viewer_id = viewer_id

    async def _load_conversations(self, ids: Sequence[int]) -> list[Row | None]:
        """Conversations as the viewer sees them (None where not a member)."""
        async with self._database.connection() as conn:
            rows = await conversations.for_viewer(conn, ids, self._viewer_id)
        by_id = {row["id"]: row for row in rows}
        return [by_id.get(cid) for cid in ids]

    async def _load_blocked_by_viewer(self, user_ids: Sequence[str]) -> list[bool]:
        """Whether the viewer blocked each of these users."""
        async with self._database.connection() as conn:
            found = await blocks.blocked_by(conn, self._viewer_id, user_ids)
        return [uid in found for uid in user_ids]

    async def _load_member_counts(self, ids: Sequence[int]) -> list[int]:
        async with self._database.connection() as conn:
            counts = await conversations.member_counts(conn, ids)
        return [counts.get(cid, 0) for cid in ids]

    async def load_member_pages(self, keys: Sequence[MemberPageKey]) -> list[list[Row]]:
        async with self._database.connection() as conn:
            rows = await conversations.member_pages(conn, [(k.conversation_id, k.after, k.limit) for k in keys])
        pages: list[list[Row]] = [[] for _ in keys]
        for row in rows:
            pages[row["i"] - 1].append(row)
        return pages

    async def _load_messages(self, keys: Sequence[tuple[int, int]]) -> list[Row | None]:
        async with self._database.connection() as conn:
            rows = await messages.by_keys(conn, keys, self._viewer_id)
        by_key = {(row["conversation_id"], row["seq"]): row for row in rows}
        return [by_key.get(key) for key in keys]

    async def _load_message_pages(self, keys: Sequence[PageKey]) -> list[list[Row]]:
        """Pages fetched with one extra row (to tell whether more exist), ascending."""
        async with self._database.connection() as conn:
            found = await messages.pages(
                conn,
                [(k.conversation_id, k.page.after, k.page.before, k.page.limit + 1, k.page.from_end) for k in keys],
            )
        return found

    async def _load_edit_histories(self, keys: Sequence[tuple[int, int]]) -> list[list[Row]]:
        """Previous bodies by (conversation_id, seq), oldest first (a message's reader is a member)."""
        async with self._database.connection() as conn:
            rows = await changes.edit_histories(conn, keys)
        found: dict[tuple[int, int], list[Row]] = defaultdict(list)
        for row in rows:
            found[(row["conversation_id"], row["seq"])].append(row)
        return [found[key] for key in keys]

    async def _load_reactions(self, keys: Sequence[tuple[int, int]]) -> list[list[Row]]:
        """Per message: (emoji, count, mine) rows, mine for this request's viewer."""
        async with self._database.connection() as conn:
            rows = await reactions.summaries(conn, keys, self._viewer_id)
        found: dict[tuple[int, int], list[Row]] = defaultdict(list)
        for row in rows:
            found[(row["conversation_id"], row["seq"])].append(row)
        return [found[key] for key in keys]

    async def _load_attachments(self, keys: Sequence[tuple[int, int]]) -> list[list[Row]]:
        async with self._database.connection() as conn:
            rows = await messages.attachments(conn, keys)
        found: dict[tuple[int, int], list[Row]] = defaultdict(list)
        for row in rows:
            found[(row["conversation_id"], row["seq"])].append(row)
        return [found[key] for key in keys]

    async def _load_replies(self, keys: Sequence[tuple[int, int, int, int]]) -> list[list[Row]]:
        """(conversation_id, reply_to_seq, after_seq, limit) -> the replies, ascending."""
        async with self._database.connection() as conn:
            rows = await messages.reply_pages(conn, keys, self._viewer_id)
        found: list[list[Row]] = [[] for _ in keys]
        for row in rows:
            found[row["i"] - 1].append(row)
        return found

    async def _load_reacted_by(self, keys: Sequence[ReactedByKey]) -> list[list[str]]:
        async with self._database.connection() as conn:
            rows = await reactions.reacted_by_pages(
                conn, [(k.conversation_id, k.seq, k.emoji, k.after, k.limit) for k in keys]
            )
        found: list[list[str]] = [[] for _ in keys]
        for row in rows:
            found[row["i"] - 1].append(row["user_id"])
        return found

    async def load_unread_mentions(self, ids: Sequence[int]) -> list[int]:
        """The viewer's unread mentions per conversation (0 where not a member): one statement."""
        async with self._database.connection() as conn:
            rows = await mentions.unread_counts(conn, self._viewer_id, ids)
        counts = {row["conversation_id"]: row["unread_mentions"] for row in rows}
        return [counts.get(cid, 0) for cid in ids]

    async def load_first_unread(self, ids: Sequence[int]) -> list[int | None]:
        """The viewer's first unread message per conversation (None where none, or not a member)."""
        async with self._database.connection() as conn:
            rows = await first_unread(conn, self._viewer_id, ids)
        found = {row["conversation_id"]: row["first_unread_seq"] for row in rows}
        return [found.get(cid) for cid in ids]

    async def load_total_unread_mentions(self, keys: Sequence[tuple[str, bool]]) -> list[int]:
        """(user_id, count_muted) -> unread mentions over all of the user's conversations."""
        async with self._database.connection() as conn:
            return [await mentions.total_unread(conn, uid, count_muted=muted) for uid, muted in keys]

    async def _load_viewer_totals(self, user_ids: Sequence[str]) -> list[Row]:
        async with self._database.connection() as conn:
            return [await conversations.viewer_totals(conn, uid) for uid in user_ids]
