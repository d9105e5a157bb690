"""The viewer: who is asking, and their totals."""

from __future__ import annotations

import asyncio
from datetime import datetime

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...services.blocks import blocked_page
from ...services.checks import check_member_page
from ...services.membership import private_receipts_of
from ...services.threads import read_thread_totals
from .. import ids
from ..scalars import Long
from .common import Node, given


@strawberry.type(description="A user the viewer blocked (Viewer.blockedUsers).")
class BlockedUser:
    user_id: ID
    blocked_at: datetime


@strawberry.type
class Viewer(Node):
    user_id: ID
    # threadUnread and unreadThreads: one read for both
    thread_totals: strawberry.Private[asyncio.Task | None] = None

    @strawberry.field(description="Globally unique and stable; opaque.")
    def id(self) -> ID:
        return ID(ids.viewer_id(str(self.user_id)))

    @strawberry.field(description="The viewer's default for private read receipts (updateViewerSettings).")
    async def private_receipts(self, info: Info) -> bool:
        return await private_receipts_of(info.context.database, str(self.user_id))

    @strawberry.field(
        description="The users the viewer blocked (blockUser), ascending by id in text order: at most `first` "
        "(default 50, capped by CHATGQL_MEMBERS_PAGE_MAX), after `after`; page with after = the last userId."
    )
    async def blocked_users(
        self, info: Info, first: int | None = 50, after: ID | None = strawberry.UNSET
    ) -> list[BlockedUser]:
        after_id, limit = check_member_page(first, given(after), default=50, cap=info.context.settings.members_page_max)
        rows = await blocked_page(info.context.database, str(self.user_id), after_id, limit)
        return [BlockedUser(user_id=ID(row["blocked_id"]), blocked_at=row["created_at"]) for row in rows]

    @strawberry.field(description="Sum of unreadCount over the viewer's conversations that are not muted.")
    async def total_unread(self, info: Info) -> Long:
        return (await info.context.loaders.viewer_totals.load(str(self.user_id))).total_unread

    @strawberry.field(
        description="Sum of unreadMentions over the viewer's conversations; muted ones count too unless "
        "CHATGQL_MUTED_MENTIONS_COUNT is false."
    )
    async def total_unread_mentions(self, info: Info) -> int:
        key = (str(self.user_id), info.context.settings.muted_mentions_count)
        return await info.context.loaders.total_unread_mentions.load(key)

    @strawberry.field(description="How many of the viewer's conversations that are not muted have unreadCount > 0.")
    async def unread_conversations(self, info: Info) -> int:
        return (await info.context.loaders.viewer_totals.load(str(self.user_id))).unread_conversations

    async def _thread_totals(self, info: Info) -> tuple[int, int]:
        if self.thread_totals is None:
            self.thread_totals = asyncio.ensure_future(read_thread_totals(info.context.database, str(self.user_id)))
        row = await self.thread_totals
        return row["thread_unread"], row["unread_threads"]

    @strawberry.field(
        description="Sum of unreadCount over the threads the viewer follows (Query.myThreads), in every conversation, "
        "muted ones too."
    )
    async def thread_unread(self, info: Info) -> Long:
        return Long((await self._thread_totals(info))[0])

    @strawberry.field(description="How many of the threads the viewer follows have unreadCount > 0.")
    async def unread_threads(self, info: Info) -> int:
        return (await self._thread_totals(info))[1]
