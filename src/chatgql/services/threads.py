"""Threads: a thread as its viewer sees it, its replies, markThreadRead, following, the viewer's followed
threads and their totals (docs/guide/threads.md).

A thread is its conversation's: someone not in the conversation gets NOT_FOUND for its root, as for
the conversation, and so does a member for a root older than the history they may read. A message that
is a reply names its root's thread. Each call is one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..db import Connection, Database, Row
from ..errors import conversation_not_found
from ..events.types import THREAD_FOLLOW, THREAD_READ, THREAD_REPLY, THREAD_UNFOLLOW, ThreadUpdated
from ..store import outbox, threads
from .changes import message_not_found
from .checks import check_seq


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
    ).outbox_row()


async def reply_events_txn(conn: Connection, conversation_id: int, root_seq: int) -> None:
    """Tell each follower of the thread (thread.updated, REPLY: their own devices) its state after a reply,
    in the reply's transaction."""
    rows = await threads.follower_states_txn(conn, conversation_id, root_seq)
    await outbox.append(
        conn,
        [_event(conversation_id, row["user_id"], THREAD_REPLY, {**row, "root_seq": root_seq}, True) for row in rows],
    )


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
    the conversation's watermark does not move), and tell the viewer's devices (thread.updated, READ). Returns
    the thread after it."""
    check_seq(reply_seq, "replySeq")
    async with database.transaction() as conn:
        root = await _root_txn(conn, viewer_id, conversation_id, seq)
        await threads.mark_read_txn(conn, conversation_id, root, viewer_id, reply_seq)
        row = await threads.thread_of(conn, conversation_id, root, viewer_id)
        await outbox.append(conn, [_event(conversation_id, viewer_id, THREAD_READ, row, row["following"])])
        database.events_written(conn)
        return row


async def do_follow(database: Database, viewer_id: str, conversation_id: int, seq: int, *, follow: bool) -> Row:
    """Follow the thread, or stop following it (a later reply of the viewer follows it again), and tell the
    viewer's devices (thread.updated, FOLLOW or UNFOLLOW). Returns the thread after it."""
    async with database.transaction() as conn:
        root = await _root_txn(conn, viewer_id, conversation_id, seq)
        await threads.follow_txn(conn, conversation_id, root, viewer_id, follow)
        row = await threads.thread_of(conn, conversation_id, root, viewer_id)
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
