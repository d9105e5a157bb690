"""Threads: a thread as its viewer sees it, its replies, markThreadRead, following, the viewer's followed
threads and their totals (docs/guide/threads.md).

A thread is its conversation's: someone not in the conversation gets NOT_FOUND for its root, as for
the conversation, and so does a member for a root older than the history they may read. A message that
is a reply names its root's thread. Each call is one transaction.

Each change of a member's thread state takes their next thread version in the conversation (the lock order:
store/threads.py), so a device catches up with the threads whose version is above the one it holds
(read_thread_sync for sync, read_thread_replay for a resumed threadUpdated).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..db import Connection, Database, Row
from ..errors import conversation_not_found
from ..events.types import (
    THREAD_DELETE,
    THREAD_FOLLOW,
    THREAD_READ,
    THREAD_REPLY,
    THREAD_UNFOLLOW,
    ThreadUpdated,
)
from ..store import outbox, threads
from .checks import check_seq, message_not_found
from .history import check_cursors, replay_ranges, sync_cursors_page


async def _root_txn(conn: Connection, viewer_id: str, conversation_id: int, seq: int) -> int:
    found = await threads.root_for(conn, conversation_id, seq, viewer_id)
    if found is None:
        raise conversation_not_found(conversation_id)
    if found["root_seq"] is None or found["root_seq"] < found["visible_from_seq"]:
        raise message_not_found(conversation_id, seq)
    return found["root_seq"]


def _event(
    conversation_id: int, user_id: str, change: str, row: Mapping[str, Any], following: bool
) -> tuple[str, dict]:
    return ThreadUpdated(
        conversation_id=conversation_id,
        user_id=user_id,
        root_seq=row["root_seq"],
        change=change,
        last_reply_seq=row["last_reply_seq"],
        last_read_reply_seq=row["last_read_reply_seq"],
        unread_count=row["unread_count"],
        following=following,
        version=row["version"],
    ).outbox_row()


async def reply_events_txn(conn: Connection, conversation_id: int, root_seq: int, change: str = THREAD_REPLY) -> None:
    """Tell each follower of the thread (thread.updated, REPLY, or DELETE: their own devices) its state after a
    reply or a delete, at the version it took, in its transaction."""
    rows = await threads.follower_states_txn(conn, conversation_id, root_seq)
    await outbox.append(
        conn, [_event(conversation_id, row["user_id"], change, {**row, "root_seq": root_seq}, True) for row in rows]
    )


async def delete_replies_txn(conn: Connection, conversation_id: int, seqs: Sequence[int]) -> None:
    """The replies among seqs were made tombstones (changes.tombstone_txn, under the conversation's lock): each
    follower of their threads takes a version per thread (DELETE) and is told its state after it."""
    taken = await threads.delete_replies_txn(conn, conversation_id, seqs)
    for root_seq in sorted({root for root, _ in taken}):
        await reply_events_txn(conn, conversation_id, root_seq, THREAD_DELETE)


async def read_thread(database: Database, viewer_id: str, conversation_id: int, seq: int) -> Row:
    """The thread of message seq (its root's when it is a reply) as the viewer sees it (store.threads.threads_of)."""
    async with database.transaction() as conn:
        root = await _root_txn(conn, viewer_id, conversation_id, seq)
        return await threads.thread_of(conn, conversation_id, root, viewer_id)


async def read_replies(
    database: Database, viewer_id: str, conversation_id: int, root_seq: int, after_reply_seq: int, limit: int
) -> list[Row]:
    """A page of the thread's replies (store.threads.reply_page), checked as read_thread is."""
    async with database.transaction() as conn:
        root = await _root_txn(conn, viewer_id, conversation_id, root_seq)
        return await threads.reply_page(conn, conversation_id, root, after_reply_seq, limit)


async def do_mark_thread_read(
    database: Database, viewer_id: str, conversation_id: int, seq: int, reply_seq: int
) -> Row:
    """Raise the viewer's thread watermark to reply_seq (clamped to the thread's last reply; never lowered;
    the conversation's watermark does not move), at the viewer's next thread version, and tell the viewer's
    devices (thread.updated, READ). A read that moves nothing writes nothing. Returns the thread after it."""
    check_seq(reply_seq, "replySeq")
    async with database.transaction() as conn:
        root = await _root_txn(conn, viewer_id, conversation_id, seq)
        # the lock order (store/threads.py): the thread row, the viewer's clock, their thread_member row
        last = await threads.lock_thread_txn(conn, conversation_id, root, create=False)
        read_to = min(reply_seq, last or 0)
        version = await threads.take_version_txn(conn, conversation_id, root, viewer_id, read_to=read_to)
        if version is not None:  # the watermark moves
            await threads.mark_read_txn(conn, conversation_id, root, viewer_id, read_to, version)
        row = await threads.thread_of(conn, conversation_id, root, viewer_id)
        if version is not None:
            await outbox.append(conn, [_event(conversation_id, viewer_id, THREAD_READ, row, row["following"])])
            database.events_written(conn)
        return row


async def do_follow(database: Database, viewer_id: str, conversation_id: int, seq: int, *, follow: bool) -> Row:
    """Follow the thread, or stop following it (a later reply of the viewer follows it again), at the viewer's
    next thread version, and tell the viewer's devices (thread.updated, FOLLOW or UNFOLLOW). Following what
    the viewer follows already (or unfollowing what they do not) writes nothing. Returns the thread after it."""
    async with database.transaction() as conn:
        root = await _root_txn(conn, viewer_id, conversation_id, seq)
        # the lock order (store/threads.py): the thread row (made for a root with no reply yet), the viewer's
        # clock, their thread_member row
        await threads.lock_thread_txn(conn, conversation_id, root, create=True)
        version = await threads.take_version_txn(conn, conversation_id, root, viewer_id, following=follow)
        if version is not None:  # following changes
            await threads.follow_txn(conn, conversation_id, root, viewer_id, follow, version)
        row = await threads.thread_of(conn, conversation_id, root, viewer_id)
        if version is not None:
            change = THREAD_FOLLOW if follow else THREAD_UNFOLLOW
            await outbox.append(conn, [_event(conversation_id, viewer_id, change, row, row["following"])])
            database.events_written(conn)
        return row


async def read_followed(
    database: Database, viewer_id: str, after: tuple[datetime, int, int] | None, limit: int
) -> list[tuple[int, Row]]:
    """A page of the threads the viewer follows, newest activity first (store.threads.followed_page), each as
    (conversation_id, the thread as the viewer sees it)."""
    async with database.transaction() as conn:
        page = await threads.followed_page(conn, viewer_id, after, limit)
        keys = [(row["conversation_id"], row["root_seq"]) for row in page]
        rows = await threads.threads_of(conn, keys, viewer_id) if keys else []
    return [(keys[row["i"] - 1][0], row) for row in rows]


async def read_thread_totals(database: Database, viewer_id: str) -> Row:
    """(thread_unread, unread_threads) over the threads the viewer follows (store.threads.followed_totals)."""
    async with database.connection() as conn:
        return await threads.followed_totals(conn, viewer_id)


@dataclass(frozen=True, slots=True)
class ThreadSync:
    conversation_id: int
    threads: list[Row]  # store.threads.threads_of's rows, version: the one read with last_version
    has_more: bool
    last_version: int


async def _changed(
    conn: Connection, viewer_id: str, cursors: Sequence[tuple[int, int]], limit: int | None
) -> tuple[dict[int, int], dict[int, list[tuple[int, int]]]]:
    """Per conversation: the viewer's clock, and (root_seq, version) of the threads above its cursor."""
    rows = await threads.changed_since(conn, cursors, viewer_id, limit)
    clocks: dict[int, int] = {}
    changed: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for row in rows:
        clocks[row["conversation_id"]] = row["last_version"]
        if row["root_seq"] is not None:
            changed[row["conversation_id"]].append((row["root_seq"], row["version"]))
    for cid, _ in cursors:
        if cid not in clocks:
            raise conversation_not_found(cid)
    return clocks, changed


async def _states(
    conn: Connection, viewer_id: str, changed: Mapping[int, Sequence[tuple[int, int]]]
) -> dict[tuple[int, int], Row]:
    """The threads of changed as the viewer sees them now, each with the version the change read gave it (a
    change committed since is above the client's next cursor, so it comes again)."""
    keys = [(cid, root) for cid, found in changed.items() for root, _ in found]
    if not keys:
        return {}
    versions = {(cid, root): version for cid, found in changed.items() for root, version in found}
    rows = await threads.threads_of(conn, keys, viewer_id)
    return {keys[row["i"] - 1]: {**row, "version": versions[keys[row["i"] - 1]]} for row in rows}  # type: ignore[misc]


async def read_thread_sync(
    database: Database,
    viewer_id: str,
    cursors: Sequence[tuple[int, int]],
    limit: int | None,
    *,
    max_cursors: int,
    max_threads: int | None = None,
) -> list[ThreadSync]:
    """sync's threads: per (conversation_id, after_version), the viewer's threads of the conversation whose
    version is above it (unfollowed ones too: the device learns of the unfollow), ascending by version, at most
    limit (with max_threads, sync's page under that budget, as its messages), each as the viewer sees it now,
    and the viewer's clock there (last_version, 0 for none). Two statements whatever the number of cursors;
    NOT_FOUND for a conversation the viewer is not in."""
    limit = sync_cursors_page(
        limit, cursors, max_cursors=max_cursors, budget=max_threads, within="at once", field="afterThreadVersion"
    )
    if not cursors:
        return []
    async with database.connection() as conn:
        clocks, changed = await _changed(conn, viewer_id, cursors, limit + 1)
        states = await _states(conn, viewer_id, {cid: found[:limit] for cid, found in changed.items()})
    return [
        ThreadSync(
            cid,
            [states[(cid, root)] for root, _ in changed[cid][:limit] if (cid, root) in states],
            len(changed[cid]) > limit,
            clocks[cid],
        )
        for cid, _ in cursors
    ]


@dataclass(frozen=True, slots=True)
class ThreadReplay:
    threads: list[tuple[int, Row]]  # (conversation_id, thread as threads_of reads it), per cursor by version
    held: dict[int, int]  # conversation id -> the version the client holds once these are delivered


async def read_thread_replay(
    database: Database,
    viewer_id: str,
    cursors: Sequence[tuple[int, int]],
    *,
    bound: int,
    max_cursors: int,
    max_catch_up: int,
) -> ThreadReplay:
    """What a resumed threadUpdated delivers before going live: per (conversation_id, after_version), every
    thread of the viewer's there whose version is above it, ascending by version, as the viewer sees it now
    (its last_change is the change to tell). A conversation's versions above the cursor are at most its clock
    less the cursor: more than `bound` in all, or more than max_catch_up in one conversation, is ReplayTooLong
    (resync) before any thread is read. Three statements whatever the number of cursors."""
    check_cursors(cursors, max_cursors, within="in one subscription", field="afterVersion")
    if not cursors:
        return ThreadReplay([], {})
    async with database.connection() as conn:
        clocks, _ = await _changed(conn, viewer_id, cursors, 0)
        ranges = replay_ranges([(c, a, clocks[c]) for c, a in cursors], bound, max_catch_up)
        wanted = [(c, a) for c, a, _ in ranges]
        _, changed = await _changed(conn, viewer_id, wanted, None) if wanted else ({}, {})
        states = await _states(conn, viewer_id, changed)
    held = {c: max(a, clocks[c]) for c, a in cursors}
    for cid, found in changed.items():  # the rows read after the clocks may be newer
        held[cid] = max(held[cid], max(version for _, version in found))
    replay = [
        (cid, states[(cid, root)]) for cid, _ in wanted for root, _ in changed.get(cid, ()) if (cid, root) in states
    ]
    return ThreadReplay(replay, held)
