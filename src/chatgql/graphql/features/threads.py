"""Threads in the API: Query.thread, markThreadRead, followThread and unfollowThread, with their rate
limits. schema.py merges this module (graphql/features/) into the roots.
A thread is named by its root's Message id (a reply's id names its root's thread). What a thread is,
and who follows it: docs/guide/threads.md; services/threads.py."""

from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...db import Row
from ...edge.ratelimit import declare_limits
from ...errors import BadUserInput
from ...services.threads import do_follow, do_mark_thread_read, read_thread
from .. import ids
from ..scalars import Long
from ..types import Message

declare_limits({"markThreadRead": "read", "followThread": "read", "unfollowThread": "read"})


@strawberry.type(description="A thread: the replies to a root message, with their own gap-free replySeq.")
class Thread:
    conversation_id: ID
    root_seq: Long = strawberry.field(description="The root's seq in its conversation.")
    reply_count: int = strawberry.field(description="Its replies that are not deleted.")
    last_reply_seq: Long = strawberry.field(
        description="The thread's own counter: the replySeq of its newest reply (replies are numbered 1, 2, 3... "
        "per thread, gap-free, beside the conversation seq every reply also takes); 0 without a reply."
    )
    last_reply_at: datetime | None
    last_read_reply_seq: Long = strawberry.field(
        description="The viewer's thread watermark (markThreadRead; their own reply reads up to it)."
    )
    unread_count: Long = strawberry.field(description="lastReplySeq - lastReadReplySeq.")
    following: bool = strawberry.field(
        description="The viewer follows it: they wrote its root, replied in it, or followed it (followThread), "
        "and did not unfollow it since."
    )
    participants: list[ID] = strawberry.field(
        description="The root's author, then whoever replied, each once, in the order of their first reply."
    )
    last_reply_message_seq: strawberry.Private[int | None]

    @classmethod
    def of(cls, conversation_id: int, row: Row) -> Thread:
        unread = row["last_reply_seq"] - row["last_read_reply_seq"]
        return cls(
            conversation_id=ID(str(conversation_id)),
            root_seq=Long(row["root_seq"]),
            reply_count=row["reply_count"],
            last_reply_seq=Long(row["last_reply_seq"]),
            last_reply_at=row["last_reply_at"],
            last_read_reply_seq=Long(row["last_read_reply_seq"]),
            unread_count=Long(unread if unread > 0 else 0),
            following=row["following"],
            participants=[ID(p) for p in row["participants"]],
            last_reply_message_seq=row["last_reply"],
        )

    @strawberry.field(description="Its root message.")
    async def root(self, info: Info) -> Message:
        row = await info.context.loaders.message.load((int(self.conversation_id), self.root_seq))
        return Message.from_row(row)

    @strawberry.field(description="Its newest reply; null without one.")
    async def last_reply(self, info: Info) -> Message | None:
        if self.last_reply_message_seq is None:
            return None
        row = await info.context.loaders.message.load((int(self.conversation_id), self.last_reply_message_seq))
        return None if row is None else Message.from_row(row)


def _root(root_id: ID) -> tuple[int, int]:
    """(conversation id, seq) of a thread's root id (a Message id)."""
    parsed = ids.parse(root_id)
    if parsed is None or parsed.type_name != "Message":
        raise BadUserInput("rootId must be a Message id")
    conversation_id, seq = parsed.keys
    return conversation_id, seq


@strawberry.type
class Query:
    @strawberry.field(
        description="The thread of a message (a reply's id names its root's thread), as the viewer sees it. "
        "NOT_FOUND for a conversation the viewer is not in, or no such message."
    )
    async def thread(self, info: Info, root_id: ID) -> Thread:
        cid, seq = _root(root_id)
        return Thread.of(cid, await read_thread(info.context.database, info.context.viewer_id, cid, seq))


@strawberry.type
class Mutation:
    @strawberry.mutation(
        description="Raise the viewer's thread watermark to replySeq (clamped to lastReplySeq; never lowered, a "
        "lower replySeq changes nothing). The conversation's read state does not move; reading a thread does "
        "not follow it."
    )
    async def mark_thread_read(self, info: Info, root_id: ID, reply_seq: Long) -> Thread:
        ctx = info.context
        cid, seq = _root(root_id)
        await ctx.deps.limits.check("markThreadRead", ctx.viewer_id)
        return Thread.of(cid, await do_mark_thread_read(ctx.database, ctx.viewer_id, cid, seq, reply_seq))

    @strawberry.mutation(description="Follow the thread: its unread counts in the viewer's thread totals.")
    async def follow_thread(self, info: Info, root_id: ID) -> Thread:
        ctx = info.context
        cid, seq = _root(root_id)
        await ctx.deps.limits.check("followThread", ctx.viewer_id)
        return Thread.of(cid, await do_follow(ctx.database, ctx.viewer_id, cid, seq, follow=True))

    @strawberry.mutation(
        description="Stop following the thread (a later reply of the viewer, or followThread, follows it again)."
    )
    async def unfollow_thread(self, info: Info, root_id: ID) -> Thread:
        ctx = info.context
        cid, seq = _root(root_id)
        await ctx.deps.limits.check("unfollowThread", ctx.viewer_id)
        return Thread.of(cid, await do_follow(ctx.database, ctx.viewer_id, cid, seq, follow=False))
