"""A thread as its viewer sees it (Query.thread, myThreads, sync's threads): the type, apart from the threads
feature's module (graphql/features/threads.py) so that sync's ConversationSync can answer it."""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...db import Row
from ...services.checks import check_page_size, check_seq_cursor
from ...services.threads import read_replies
from ..scalars import Long
from .message import Message


@strawberry.type(description="A thread: the replies to a root message, with their own gap-free replySeq.")
class Thread:
    conversation_id: ID
    root_seq: Long = strawberry.field(description="The root's seq in its conversation.")
    reply_count: int = strawberry.field(description="Its replies that are not deleted.")
    last_reply_seq: Long = strawberry.field(
        description="The thread's own counter: the replySeq of its newest reply (replies are numbered 1, 2, 3... "
        "per thread, gap-free, beside the conversation seq every reply also takes); 0 without a reply."
    )
    last_reply_at: datetime | None = strawberry.field(
        description="When its newest reply was sent (deleting it does not move this): the order of myThreads."
    )
    last_read_reply_seq: Long = strawberry.field(
        description="The viewer's thread watermark (markThreadRead; their own reply reads up to it)."
    )
    unread_count: Long = strawberry.field(
        description="lastReplySeq - lastReadReplySeq, less the deleted replies above lastReadReplySeq."
    )
    first_unread_reply_seq: Long | None = strawberry.field(
        description="The replySeq of the viewer's first unread reply (the first above lastReadReplySeq that is not "
        "deleted); null when none."
    )
    following: bool = strawberry.field(
        description="The viewer follows it: they wrote its root, replied in it, or followed it (followThread), "
        "and did not unfollow it since."
    )
    participants: list[ID] = strawberry.field(
        description="The root's author, then whoever replied, each once, in the order of their first reply."
    )
    version: Long = strawberry.field(
        description="The viewer's version of this thread: every change of their state of it (a reply while they "
        "follow it, a deleted reply, their markThreadRead, followThread, unfollowThread) takes their next thread "
        "version in the conversation; 0 when none did. sync(afterThreadVersion:) answers the threads above a version."
    )
    last_reply_message_seq: strawberry.Private[int | None]

    @classmethod
    def of(cls, conversation_id: int, row: Row) -> Thread:
        first_unread = row["first_unread_reply_seq"]
        return cls(
            conversation_id=ID(str(conversation_id)),
            root_seq=Long(row["root_seq"]),
            reply_count=row["reply_count"],
            last_reply_seq=Long(row["last_reply_seq"]),
            last_reply_at=row["last_reply_at"],
            last_read_reply_seq=Long(row["last_read_reply_seq"]),
            unread_count=Long(row["unread_count"]),
            first_unread_reply_seq=None if first_unread is None else Long(first_unread),
            following=row["following"],
            participants=[ID(p) for p in row["participants"]],
            version=Long(row["version"]),
            last_reply_message_seq=row["last_reply"],
        )

    @strawberry.field(description="Its root message.")
    async def root(self, info: Info) -> Message:
        row = await info.context.loaders.message.load((int(self.conversation_id), self.root_seq))
        return Message.from_row(row)

    @strawberry.field(
        description="Its replies in replySeq order, tombstones of deleted ones included: at most `first` (1..200, "
        'default 50) with replySeq > `after` (a replySeq in decimal; "0" or none: from the first). Page with after '
        "= the last one's replySeq until fewer than `first` come back."
    )
    async def replies(self, info: Info, first: int | None = 50, after: str | None = None) -> list[ThreadReply]:
        limit = check_page_size(first, "first")
        after_seq = check_seq_cursor(after, "after") or 0
        if after_seq >= self.last_reply_seq:
            return []
        ctx = info.context
        rows = await read_replies(
            ctx.database, ctx.viewer_id, int(self.conversation_id), self.root_seq, after_seq, limit
        )
        return [ThreadReply(reply_seq=Long(row["reply_seq"]), message=Message.from_row(row)) for row in rows]

    @strawberry.field(description="Its newest reply that is not deleted; null without one.")
    async def last_reply(self, info: Info) -> Message | None:
        if self.last_reply_message_seq is None:
            return None
        row = await info.context.loaders.message.load((int(self.conversation_id), self.last_reply_message_seq))
        return None if row is None else Message.from_row(row)


@strawberry.type(description="A reply in its thread: its replySeq there, and the message.")
class ThreadReply:
    reply_seq: Long
    message: Message
