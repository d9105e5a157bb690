"""Query root."""

from __future__ import annotations

import strawberry
from strawberry import ID
from strawberry.types import Info

from ..errors import conversation_not_found
from ..services.checks import check_id, check_page_size
from ..services.history import read_sync
from ..store import conversations
from .nodes import load_node, load_nodes
from .scalars import Long
from .types import (
    Conversation,
    ConversationConnection,
    ConversationSync,
    Message,
    MessageConnection,
    Node,
    PageInfo,
    SyncCursor,
    Viewer,
    inbox_cursor,
    load_message_page,
    parse_inbox_cursor,
    selects,
)


async def load_conversation(info: Info, conversation_id: int) -> Conversation:
    """The conversation as the viewer sees it; NOT_FOUND when missing or not a member."""
    row = await info.context.loaders.conversation.load(conversation_id)
    if row is None:
        raise conversation_not_found(conversation_id)
    return Conversation.from_row(row)


@strawberry.type
class Query:
    @strawberry.field
    def viewer(self, info: Info) -> Viewer:
        return Viewer(user_id=ID(str(info.context.viewer_id)))

    @strawberry.field
    async def conversation(self, info: Info, id: ID) -> Conversation:
        _ = info.context.viewer_id  # authenticate before validating input
        return await load_conversation(info, check_id(id, "id"))

    @strawberry.field
    async def inbox(
        self, info: Info, first: int | None = 20, after: str | None = strawberry.UNSET
    ) -> ConversationConnection:
        limit = check_page_size(first, "first", default=20)
        after = None if after is strawberry.UNSET else after
        keyset = parse_inbox_cursor(after) if after is not None else None
        below = info.selected_fields[0].selections
        previews = selects(below, "nodes", "lastMessage") or selects(below, "edges", "node", "lastMessage")
        # With lastMessage asked for, every conversation's comes in the same statement as the page.
        read_page = conversations.inbox_page_with_last_messages if previews else conversations.inbox_page
        async with info.context.database.connection() as conn:
            rows = await read_page(conn, info.context.viewer_id, limit + 1, keyset)
        page, more = rows[:limit], len(rows) > limit
        nodes = [Conversation.from_row(row) for row in page]
        if previews:
            for node, row in zip(nodes, page, strict=True):
                node.preloaded_last_message = Message.last_in_inbox_row(node.id, row)
        return ConversationConnection(
            nodes=nodes,
            activity=[row["activity_at"] for row in page],
            page_info=PageInfo(
                has_next_page=more,
                has_previous_page=after is not None,
                start_cursor=inbox_cursor(page[0].activity_at, page[0].id) if page else None,
                end_cursor=inbox_cursor(page[-1].activity_at, page[-1].id) if page else None,
            ),
        )

    @strawberry.field
    async def messages(
        self,
        info: Info,
        conversation_id: ID,
        first: int | None = strawberry.UNSET,
        after: str | None = strawberry.UNSET,
        last: int | None = strawberry.UNSET,
        before: str | None = strawberry.UNSET,
    ) -> MessageConnection:
        _ = info.context.viewer_id
        conversation = await load_conversation(info, check_id(conversation_id, "conversationId"))
        return await load_message_page(info, int(conversation.id), conversation.last_seq, first, after, last, before)

    @strawberry.field(
        description="The object with this global id (Node.id), or null when there is none the viewer may see."
    )
    async def node(self, info: Info, id: ID) -> Node | None:
        _ = info.context.viewer_id
        return await load_node(info, id)

    @strawberry.field(description="node(id:) for each id, in order (at most 200).")
    async def nodes(self, info: Info, ids: list[ID]) -> list[Node | None]:
        _ = info.context.viewer_id
        return await load_nodes(info, ids)

    @strawberry.field(
        description="Catch-up after being offline: per conversation, what came after the seq the client holds."
    )
    async def sync(self, info: Info, cursors: list[SyncCursor], limit: int | None = 100) -> list[ConversationSync]:
        _ = info.context.viewer_id
        parsed = [(check_id(c.conversation_id, "conversationId"), c.after_seq) for c in cursors]
        results = await read_sync(
            info.context.database,
            info.context.viewer_id,
            parsed,
            limit,
            max_cursors=info.context.settings.max_sync_cursors,
            max_catch_up=info.context.settings.max_catch_up,
        )
        return [
            ConversationSync(
                conversation_id=ID(str(r.conversation_id)),
                messages=[Message.from_row(row) for row in r.messages],
                has_more=r.has_more,
                last_seq=Long(r.last_seq),
                last_read_seq=Long(r.last_read_seq),
                too_long=r.too_long,
            )
            for r in results
        ]
