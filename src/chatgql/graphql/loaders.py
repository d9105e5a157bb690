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
from ..store import conversations, messages


@dataclass(frozen=True, slots=True)
class PageKey:
    conversation_id: int
    page: PageRequest


class Roster:
    """A conversation's members and their watermarks; answers "seen by" questions."""

    __slots__ = ("rows", "_watermarks", "_by_user")

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows  # ascending user_id
        self._watermarks = sorted(row["last_read_seq"] for row in rows)  # by key: see types.Message.from_row
        self._by_user = {row["user_id"]: row["last_read_seq"] for row in rows}

    def member(self, user_id: int) -> Row | None:
        for row in self.rows:
            if row.user_id == user_id:
                return row
        return None

    def others(self, sender_id: int) -> int:
        return len(self.rows) - (sender_id in self._by_user)

    def seen_by_count(self, seq: int, sender_id: int) -> int:
        count = len(self._watermarks) - bisect_left(self._watermarks, seq)
        if self._by_user.get(sender_id, -1) >= seq:
            count -= 1
        return count

    def seen_by(self, seq: int, sender_id: int, first: int) -> list[int]:
        seen: list[int] = []
        for row in self.rows:
            if len(seen) >= first:
                break
            if row.user_id != sender_id and row.last_read_seq >= seq:
                seen.append(row.user_id)
        return seen


class EventRosters:
    """Rosters for one subscription event, read once for all of its subscribers.

    Every subscriber of a message.new event asks the same roster question
    (seen, seenByCount, seenBy depend on the conversation's members and the
    message, not on who asks), so one read per conversation per event answers
    them all: one statement per event instead of one per subscriber. Each
    subscriber awaits the read through asyncio.shield, so a subscriber that goes
    away mid-read does not cancel it for the others. It lives as long as the
    event (subscriptions.py), so nothing is cached across events.
    """

    __slots__ = ("_database", "_reads")

    def __init__(self, database: Database) -> None:
        self._database = database
        self._reads: dict[int, asyncio.Future[Roster]] = {}

    def load(self, conversation_id: int) -> asyncio.Future[Roster]:
        """The roster (what a DataLoader's load answers: an awaitable)."""
        read = self._reads.get(conversation_id)
        if read is None:
            read = self._reads[conversation_id] = asyncio.ensure_future(self._read(conversation_id))
        return asyncio.shield(read)

    async def _read(self, conversation_id: int) -> Roster:
        async with self._database.connection() as conn:
            return Roster(await conversations.members_of(conn, [conversation_id]))


class _Loader(DataLoader):
    """A DataLoader whose pending loads are awaited through asyncio.shield.

    When a non-null field fails, graphql-core cancels its sibling fields'
    tasks. A cancelled task cancels the future it is waiting on, and a
    DataLoader hands the same future to every field that loads the same key:
    fields elsewhere in the request then failed with CancelledError and the
    request answered HTTP 500 (found by tests/test_planner_differential.py,
    with graphql-core's executor and with plans alike). Shielded, a cancelled
    field leaves the shared load alone.
    """

    def load(self, key: Any) -> Awaitable[Any]:
        future = cast("asyncio.Future[Any]", super().load(key))  # typed Awaitable; a Future
        return future if future.done() else asyncio.shield(future)


class Loaders:
    def __init__(self, database: Database, viewer_id: int, roster: EventRosters | None = None) -> None:
        """roster: a subscription event's shared rosters (EventRosters), instead of this request's own."""
        # The loaders call a _Reads' methods, not this object's: a loader holding a bound method
        # of the Loaders that holds it would make every request's loaders a reference cycle.
        reads = self._reads = _Reads(database, viewer_id)
        self.conversation = _Loader(reads._load_conversations)
        self.member_count = _Loader(reads._load_member_counts)
        self.roster: DataLoader | EventRosters = roster if roster is not None else _Loader(reads._load_rosters)
        self.message = _Loader(reads._load_messages)
        self.message_page = _Loader(reads._load_message_pages)
        self.viewer_totals = _Loader(reads._load_viewer_totals)

    def forget_conversation(self, conversation_id: int) -> None:
        """Drop what this request cached about a conversation it just changed."""
        for loader in (self.conversation, self.member_count, self.roster):
            if isinstance(loader, DataLoader):
                with suppress(KeyError):
                    loader.clear(conversation_id)


class _Reads:
    """The batch functions behind one request's loaders."""

    __slots__ = ("_database", "_viewer_id")

    def __init__(self, database: Database, viewer_id: int) -> None:
        self._database = database
        self._viewer_id = viewer_id

    async def _load_conversations(self, ids: Sequence[int]) -> list[Row | None]:
        """Conversations as the viewer sees them (None where not a member)."""
        async with self._database.connection() as conn:
            rows = await conversations.for_viewer(conn, ids, self._viewer_id)
        by_id = {row["id"]: row for row in rows}
        return [by_id.get(cid) for cid in ids]

    async def _load_member_counts(self, ids: Sequence[int]) -> list[int]:
        async with self._database.connection() as conn:
            counts = await conversations.member_counts(conn, ids)
        return [counts.get(cid, 0) for cid in ids]

    async def _load_rosters(self, ids: Sequence[int]) -> list[Roster]:
        async with self._database.connection() as conn:
            rows = await conversations.members_of(conn, ids)
        grouped: dict[int, list[Row]] = defaultdict(list)
        for row in rows:
            grouped[row["conversation_id"]].append(row)
        return [Roster(grouped[cid]) for cid in ids]

    async def _load_messages(self, keys: Sequence[tuple[int, int]]) -> list[Row | None]:
        async with self._database.connection() as conn:
            rows = await messages.by_keys(conn, keys)
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

    async def _load_viewer_totals(self, user_ids: Sequence[int]) -> list[Row]:
        async with self._database.connection() as conn:
            return [await conversations.viewer_totals(conn, uid) for uid in user_ids]
