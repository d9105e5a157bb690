"""Reading history for offline catch-up (sync)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ..db import Connection, Database, Row
from ..errors import BadUserInput, LimitExceeded, conversation_not_found
from ..store import conversations, messages
from .checks import PageRequest, check_page_size, check_seq


@dataclass(frozen=True, slots=True)
class SyncResult:
    conversation_id: int
    messages: list[Row]
    has_more: bool
    last_seq: int
    last_read_seq: int
    too_long: bool = False  # more than max_catch_up behind: messages are the newest page instead


def too_far_behind(after_seq: int, newest_seq: int, max_catch_up: int) -> bool:
    """More than max_catch_up messages between what the client holds and the newest one
    it may get (the seq is gap-free: the difference is the number of messages)."""
    return newest_seq - after_seq > max_catch_up


def replay_ranges(cursors: Sequence[tuple[int, int, int]], bound: int, max_catch_up: int) -> list[tuple[int, int, int]]:
    """The (conversation, after, last) of cursors that have something to replay, once the replay is
    known to be within bounds: more than `bound` in all, or more than max_catch_up in one
    conversation, is ReplayTooLong (a resync) before anything is read. Counters are gap-free, so a
    range holds exactly last - after items (messages by seq, changes by change seq)."""
    ranges = [(cid, after, last) for cid, after, last in cursors if last > after]
    backlog = sum(last - after for _, after, last in ranges)
    if backlog > bound:
        raise ReplayTooLong(backlog, bound)
    for _, after, last in ranges:
        if too_far_behind(after, last, max_catch_up):
            raise ReplayTooLong(last - after, max_catch_up)
    return ranges


def sync_page(limit: int, cursors: int, max_messages: int) -> int:
    """Each cursor's page in a sync of `cursors` cursors under a budget of max_messages in all
    (at least one each): the service answers it, the operation's price counts it."""
    return min(limit, max(1, max_messages // max(1, cursors)))


def sync_cursors_page(
    limit: int | None,
    cursors: Sequence[tuple[int, int]],
    *,
    max_cursors: int,
    budget: int | None,
    within: str,
    field: str,
) -> int:
    """A sync's page for each of its cursors, after checking both (check_page_size, check_cursors): limit, or
    under a budget of that many rows in all (sync_page); each of sync's parts (messages, changes, threads)."""
    limit = check_page_size(limit, "limit")
    check_cursors(cursors, max_cursors, within=within, field=field)
    return limit if budget is None else sync_page(limit, len(cursors), budget)


def check_cursors(cursors: Sequence[tuple[int, int]], max_cursors: int, *, within: str, field: str) -> None:
    """Resume cursors (conversation_id, after): at most max_cursors of them, each conversation once,
    each `after` a valid seq (named `field` in the error)."""
    if len(cursors) > max_cursors:
        raise LimitExceeded(f"at most {max_cursors} cursors {within}")
    if len({cid for cid, _ in cursors}) != len(cursors):
        raise BadUserInput("each conversationId may appear once in cursors")
    for _, after in cursors:
        check_seq(after, field)


def from_visible(cursors: Sequence[tuple[int, int]], visible: dict[int, Row]) -> list[tuple[int, int]]:
    """The message cursors, each raised to just below the first seq the viewer may read there (a member added
    to a group hiding its history reads nothing before their join)."""
    return [(cid, max(after, visible[cid].visible_from_seq - 1)) for cid, after in cursors]


async def visible_conversations(conn: Connection, viewer_id: str, cursors: Sequence[tuple[int, int]]) -> dict[int, Row]:
    """The cursors' conversations as the viewer sees them (store.conversations.for_viewer), by id;
    NOT_FOUND for the first one the viewer is not a member of."""
    visible = {row.id: row for row in await conversations.for_viewer(conn, [c for c, _ in cursors], viewer_id)}
    for cid, _ in cursors:
        if cid not in visible:
            raise conversation_not_found(cid)
    return visible


async def read_sync(
    database: Database,
    viewer_id: str,
    cursors: Sequence[tuple[int, int]],
    limit: int | None,
    *,
    max_cursors: int,
    max_catch_up: int,
    max_messages: int | None = None,
) -> list[SyncResult]:
    """Per (conversation_id, after_seq): the messages after it, at most limit, in
    two SQL statements whatever the number of cursors. Unknown or foreign
    conversations are NOT_FOUND, like everywhere else.

    A cursor more than max_catch_up messages behind its conversation's lastSeq
    gets the newest `limit` messages instead, with too_long set: the client is
    to drop what it holds of that conversation and start again from there.

    With max_messages, the answer holds at most that many messages in all (at least one per
    cursor): each page is min(limit, max_messages // len(cursors)), and hasMore says where more wait."""
    limit = sync_cursors_page(
        limit, cursors, max_cursors=max_cursors, budget=max_messages, within="in one sync", field="afterSeq"
    )
    if not cursors:
        return []
    async with database.connection() as conn:
        visible = await visible_conversations(conn, viewer_id, cursors)
        held = from_visible(cursors, visible)
        too_long = {cid for cid, after in held if too_far_behind(after, visible[cid].last_seq, max_catch_up)}
        # Too far behind: read from limit below lastSeq, the newest page.
        reads = [
            (
                cid,
                max(0, visible[cid].last_seq - limit, visible[cid].visible_from_seq - 1) if cid in too_long else after,
            )
            for cid, after in held
        ]
        rows = await messages.after_many(conn, reads, limit + 1)
    by_conversation: dict[int, list[Row]] = defaultdict(list)
    for row in rows:
        by_conversation[row.conversation_id].append(row)
    results = []
    for cid, _ in cursors:
        found = by_conversation[cid]
        conv = visible[cid]
        results.append(
            SyncResult(cid, found[:limit], len(found) > limit, conv.last_seq, conv.own_read, cid in too_long)
        )
    return results


def far_behind(page: PageRequest, last_seq: int, max_catch_up: int) -> bool:
    """MessageConnection.gapTooLong for a forward page (first/after): more than max_catch_up
    messages between `after` and the newest message the page could reach (lastSeq, or
    `before`). Advice only ("far behind: consider jumping to the newest page"): the page
    answered is the one right after `after` all the same. A backward page: False."""
    if page.from_end:
        return False
    newest = last_seq if page.before is None else min(last_seq, page.before - 1)
    return too_far_behind(page.after, newest, max_catch_up)


class ReplayTooLong(LimitExceeded):
    """A resumable subscription's cursors are too far behind to replay; catch up with sync first."""

    def __init__(self, backlog: int, bound: int) -> None:
        super().__init__(
            f"subscription ended: {backlog} messages to replay, more than {bound}; "
            "catch up with sync or messages(after:) and subscribe again",
            reason="REPLAY_TOO_LONG",
            resync=True,
        )


@dataclass(frozen=True, slots=True)
class Replay:
    messages: list[Row]  # per cursor, in cursor order: seq > afterSeq up to lastSeq, ascending
    held: dict[int, int]  # conversation id -> the highest seq the client holds once these are delivered


async def read_replay(
    database: Database,
    viewer_id: str,
    cursors: Sequence[tuple[int, int]],
    *,
    bound: int,
    max_cursors: int,
    max_catch_up: int,
) -> Replay:
    """What a resumable subscription delivers before going live: per (conversation_id,
    after_seq), every message with after_seq < seq <= the conversation's last_seq.

    The seq is gap-free, so last_seq - after_seq is exactly how many there are:
    when they add up to more than `bound`, or one conversation's are more than
    max_catch_up (sync would answer it with its newest page and tooLong),
    ReplayTooLong (resync) before any message is read. Otherwise the range read is exact (every seq up to last_seq
    is committed). Unknown or foreign conversations are NOT_FOUND, as in sync.
    Two statements whatever the number of cursors.
    """
    check_cursors(cursors, max_cursors, within="in one subscription", field="afterSeq")
    if not cursors:
        return Replay([], {})
    async with database.connection() as conn:
        visible = await visible_conversations(conn, viewer_id, cursors)
        ranges = replay_ranges(
            [(c, a, visible[c].last_seq) for c, a in from_visible(cursors, visible)], bound, max_catch_up
        )
        pages = await messages.pages(conn, [(cid, after, last + 1, last - after, False) for cid, after, last in ranges])
    held = {cid: max(after, visible[cid].last_seq) for cid, after in cursors}
    return Replay([row for page in pages for row in page], held)
