"""Threads in the API: Query.thread and myThreads, markThreadRead, followThread and unfollowThread, with
their rate limits. schema.py merges this module (graphql/features/) into the roots; Viewer.threadUnread and
unreadThreads are the viewer's (types/viewer.py).
A thread is named by its root's Message id (a reply's id names its root's thread). What a thread is,
and who follows it: docs/guide/threads.md; services/threads.py."""

from __future__ import annotations

import base64
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import Annotated

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...db import Row
from ...edge.ratelimit import declare_limits
from ...engine.registry import PRICING, Bound, Pricing, at_most, count
from ...errors import BadUserInput, conversation_not_found
from ...events.types import THREAD_REPLY, THREAD_UPDATED, ThreadUpdated
from ...services.checks import DEFAULT_PAGE, MAX_PAGE, check_id, check_page_size
from ...services.threads import (
    do_follow,
    do_mark_thread_read,
    read_followed,
    read_thread,
    read_thread_replay,
)
from .. import ids
from ..scalars import Long
from ..types import PageInfo
from ..types.thread import Thread

declare_limits({"markThreadRead": "read", "followThread": "read", "unfollowThread": "read"})
PRICING.declare(
    Pricing(
        lists={
            ("Thread", "replies"): count("first", default=DEFAULT_PAGE, cap=MAX_PAGE),
            ("Thread", "participants"): at_most("max_group_members"),
        },
        pages={("Query", "myThreads"): count("first", default=DEFAULT_PAGE, cap=MAX_PAGE)},
        bounds={"max_group_members": Bound(1000, lambda s: s.max_group_members)},
    )
)


@strawberry.type(
    description="The threads the viewer follows (see Query.myThreads for the order). Cursors are opaque; paging "
    "with after = the previous page's endCursor until hasNextPage is false visits every thread once."
)
class ThreadConnection:
    nodes: list[Thread]
    page_info: PageInfo


def _cursor(at: datetime, conversation_id: int, root_seq: int) -> str:
    raw = f"{at.isoformat()}|{conversation_id}|{root_seq}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _parse_cursor(cursor: str) -> tuple[datetime, int, int]:
    try:
        at, cid, seq = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().split("|")
        when = datetime.fromisoformat(at)
        if when.tzinfo is None or not (0 < int(cid) < 2**63 and 0 < int(seq) < 2**63):
            raise ValueError
        return when.astimezone(UTC), int(cid), int(seq)
    except (ValueError, UnicodeDecodeError, OverflowError):
        raise BadUserInput("after is not a thread cursor") from None


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

    @strawberry.field(
        description="The threads the viewer follows that have a reply, across their conversations, newest activity "
        "first (lastReplyAt, then conversationId, then rootSeq, descending), each with the viewer's unread: at "
        "most `first` (1..200, default 50), after `after` (the previous page's endCursor)."
    )
    async def my_threads(self, info: Info, first: int | None = 50, after: str | None = None) -> ThreadConnection:
        ctx = info.context
        limit = check_page_size(first, "first")
        after_key = None if after is None else _parse_cursor(after)
        found = await read_followed(ctx.database, ctx.viewer_id, after_key, limit + 1)
        page = found[:limit]
        cursors = [_cursor(row["last_reply_at"], cid, row["root_seq"]) for cid, row in page]
        info_ = PageInfo(
            has_next_page=len(found) > limit,
            has_previous_page=after is not None,
            start_cursor=cursors[0] if cursors else None,
            end_cursor=cursors[-1] if cursors else None,
        )
        nodes = [Thread.of(cid, row) for cid, row in page]
        return ThreadConnection(nodes=nodes, page_info=info_)


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


@strawberry.type(
    description="A thread changed for the subscriber (docs/guide/threads.md): a reply in a thread they follow "
    "(change REPLY), a deleted reply in one (DELETE), or their own markThreadRead (READ), followThread (FOLLOW) or "
    "unfollowThread (UNFOLLOW) on any of their devices: their thread state after it. Nobody else gets it."
)
class ThreadUpdatedEvent:
    conversation_id: ID
    root_seq: Long
    root_id: ID = strawberry.field(description="The root's Message id: thread(rootId:) reads the thread whole.")
    change: str = strawberry.field(description="REPLY, READ, FOLLOW, UNFOLLOW or DELETE.")
    last_reply_seq: Long
    last_read_reply_seq: Long
    unread_count: Long
    following: bool
    version: Long = strawberry.field(
        description="The version this change took (Thread.version): resume with ThreadCursor.afterVersion = the "
        "highest one received for the conversation.",
    )

    @classmethod
    def of(cls, own: ThreadUpdated) -> ThreadUpdatedEvent:
        return cls(
            conversation_id=ID(str(own.conversation_id)),
            root_seq=Long(own.root_seq),
            root_id=ID(ids.message_id(own.conversation_id, own.root_seq)),
            change=own.change,
            last_reply_seq=Long(own.last_reply_seq),
            last_read_reply_seq=Long(own.last_read_reply_seq),
            unread_count=Long(own.unread_count),
            following=own.following,
            version=Long(own.version),
        )

    @classmethod
    def replayed(cls, conversation_id: int, row: Row) -> ThreadUpdatedEvent:
        """A thread read by a resumed subscription: its state now, its change the one that took its version."""
        return cls(
            conversation_id=ID(str(conversation_id)),
            root_seq=Long(row["root_seq"]),
            root_id=ID(ids.message_id(conversation_id, row["root_seq"])),
            change=row["last_change"] or THREAD_REPLY,
            last_reply_seq=Long(row["last_reply_seq"]),
            last_read_reply_seq=Long(row["last_read_reply_seq"]),
            unread_count=Long(row["unread_count"]),
            following=row["following"],
            version=Long(row["version"]),
        )


@strawberry.input(description="Where a device stopped in the viewer's threads of a conversation.")
class ThreadCursor:
    conversation_id: ID
    after_version: Long = strawberry.field(
        description="The highest thread version the device holds there (ThreadUpdatedEvent.version, Thread.version, "
        "or sync's lastThreadVersion; 0 for none)."
    )


@strawberry.type
class Subscription:
    @strawberry.subscription(
        description="The viewer's threads, in one conversation or in all of theirs: a reply in a thread they follow, "
        "a deleted reply in one, and their own thread reads and follows from any of their devices "
        "(ThreadUpdatedEvent)."
    )
    async def thread_updated(
        self,
        info: Info,
        conversation_id: ID | None = None,
        cursors: Annotated[
            list[ThreadCursor] | None,
            strawberry.argument(
                description="Resume: first every thread of these conversations whose version is above the cursor, "
                "as it is now (change: the change that took its version), from the database, ascending by version, "
                "then live, with no gap and no duplicate (by conversationId and version). More than "
                "CHATGQL_SUBSCRIBER_BUFFER versions behind in all, or more than CHATGQL_MAX_CATCH_UP in one "
                "conversation: LIMIT_EXCEEDED with resync: true (catch up with sync's afterThreadVersion)."
            ),
        ] = None,
    ) -> AsyncGenerator[ThreadUpdatedEvent, None]:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = None
        if conversation_id is not None:
            cid = check_id(conversation_id, "conversationId")
            if await ctx.fresh_loaders().conversation.load(cid) is None:  # asked afresh: the connection may be old
                raise conversation_not_found(cid)
        parsed = [(check_id(c.conversation_id, "conversationId"), int(c.after_version)) for c in cursors or ()]
        if cid is not None and any(c != cid for c, _ in parsed):
            raise BadUserInput("with conversationId, every cursor must be for that conversation")
        # Registered before the database is read (the order messageNew's resume keeps: subscriptions.py), so a
        # change is in the replay, in the buffer, or both; both is dropped by its version.
        async with ctx.deps.dispatcher.subscribe(viewer, cid, THREAD_UPDATED) as subscription:
            held: dict[int, int] = {}
            if cursors is not None:
                replay = await read_thread_replay(
                    ctx.database,
                    viewer,
                    parsed,
                    bound=ctx.settings.subscriber_buffer,
                    max_cursors=ctx.settings.max_sync_cursors,
                    max_catch_up=ctx.settings.max_catch_up,
                )
                held = replay.held
                for conversation, row in replay.threads:
                    yield ThreadUpdatedEvent.replayed(conversation, row)
            async for event in subscription:
                own = ThreadUpdated.from_wire(event)
                if cursors is not None:
                    if own.version <= held.get(own.conversation_id, 0):
                        continue
                    held[own.conversation_id] = own.version
                yield ThreadUpdatedEvent.of(own)
