"""Threads: a thread as its viewer sees it, markThreadRead, following (docs/guide/threads.md).

A thread is its conversation's: someone not in the conversation gets NOT_FOUND for its root, as for
the conversation. A message that is a reply names its root's thread. Each call is one transaction.
"""

from __future__ import annotations

from ..db import Connection, Database, Row
from ..errors import conversation_not_found
from ..store import membership, threads
from .changes import message_not_found
from .checks import check_seq


async def _root_txn(conn: Connection, viewer_id: str, conversation_id: int, seq: int) -> int:
    if not await membership.is_member(conn, conversation_id, viewer_id):
        raise conversation_not_found(conversation_id)
    root = await threads.root_of(conn, conversation_id, seq)
    if root is None:
        raise message_not_found(conversation_id, seq)
    return root


async def read_thread(database: Database, viewer_id: str, conversation_id: int, seq: int) -> Row:
    """The thread of message seq (its root's when it is a reply) as the viewer sees it (store.threads.thread_of)."""
    async with database.transaction() as conn:
        root = await _root_txn(conn, viewer_id, conversation_id, seq)
        return await threads.thread_of(conn, conversation_id, root, viewer_id)


async def do_mark_thread_read(
    database: Database, viewer_id: str, conversation_id: int, seq: int, reply_seq: int
) -> Row:
    """Raise the viewer's thread watermark to reply_seq (clamped to the thread's last reply; never lowered;
    the conversation's watermark does not move). Returns the thread after it."""
    check_seq(reply_seq, "replySeq")
    async with database.transaction() as conn:
        root = await _root_txn(conn, viewer_id, conversation_id, seq)
        await threads.mark_read_txn(conn, conversation_id, root, viewer_id, reply_seq)
        return await threads.thread_of(conn, conversation_id, root, viewer_id)


async def do_follow(database: Database, viewer_id: str, conversation_id: int, seq: int, *, follow: bool) -> Row:
    """Follow the thread, or stop following it (a later reply of the viewer follows it again). Returns the
    thread after it."""
    async with database.transaction() as conn:
        root = await _root_txn(conn, viewer_id, conversation_id, seq)
        await threads.follow_txn(conn, conversation_id, root, viewer_id, follow)
        return await threads.thread_of(conn, conversation_id, root, viewer_id)
