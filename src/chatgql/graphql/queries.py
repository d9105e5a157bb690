"""Query root."""

from __future__ import annotations

from typing import Annotated, Any, cast

import strawberry
from orjson import Fragment
from strawberry import ID
from strawberry.types import Info

from ..db import Row
from ..engine.registry import PrebuiltNodes, prebuilt_page
from ..errors import conversation_not_found
from ..services.changes import read_changes
from ..services.checks import check_id, check_page_size
from ..services.history import read_sync, sync_page
from ..services.threads import read_thread_sync
from ..store import conversations
from .nodes import load_node, load_nodes
from .prebuilt import INBOX_NODE, reads_lifecycle, reads_settings
from .scalars import Long
from .search import MessageSearchConnection, resolve_search_messages
from .types import (
    Conversation,
    ConversationConnection,
    ConversationEdge,
    ConversationSync,
    InboxFilter,
    Message,
    MessageChange,
    MessageConnection,
    Node,
    PageAfter,
    PageBefore,
    PageFirst,
    PageInfo,
    PageLast,
    SyncCursor,
    Viewer,
    inbox_cursor,
    load_message_page,
    parse_inbox_cursor,
    selections_at,
    selects_only,
)
from .types.thread import Thread


async def load_conversation(info: Info, conversation_id: int) -> Conversation:
    """The conversation as the viewer sees it; NOT_FOUND when missing or not a member."""
    row = await info.context.loaders.conversation.load(conversation_id)
    if row is None:
        raise conversation_not_found(conversation_id)
    return Conversation.from_row(row)


async def _prebuilt_inbox(
    info: Info,
    prebuilt: PrebuiltNodes,
    limit: int,
    keyset: conversations.InboxKey | None,
    wanted: conversations.InboxFilter,
    after: str | None,
) -> ConversationConnection:
    """An inbox page whose nodes PostgreSQL built as JSON (engine/prebuilt.py), under nodes and edges."""
    async with info.context.database.connection() as conn:
        rows = await conversations.inbox_page_json(
            conn,
            info.context.viewer_id,
            limit + 1,
            keyset,
            wanted,
            prebuilt.objects,
            settings=reads_settings(prebuilt),
            lifecycle=reads_lifecycle(prebuilt),
        )
    page = rows[:limit]
    nodes: list[Any] = [] if prebuilt.nodes is None else [Fragment(row[f"node_{prebuilt.nodes}"]) for row in page]
    connection = _inbox_connection(nodes, page, len(rows) > limit, after)
    if prebuilt.edge_nodes is not None:
        column = f"node_{prebuilt.edge_nodes}"
        connection.prebuilt_edges = [
            ConversationEdge(
                cursor=inbox_cursor(row["activity_at"], row["id"], row["pinned_at"]),
                node=cast("Conversation", Fragment(row[column])),
            )
            for row in page
        ]
    return connection


def _inbox_connection(nodes: list[Any], page: list[Row], more: bool, after: str | None) -> ConversationConnection:
    """An inbox page of nodes (Conversations, or their answers as PostgreSQL built them) and their rows."""
    return ConversationConnection(
        nodes=nodes,
        activity=[row["activity_at"] for row in page],
        page_info=PageInfo(
            has_next_page=more,
            has_previous_page=after is not None,
            start_cursor=inbox_cursor(page[0]["activity_at"], page[0]["id"], page[0]["pinned_at"]) if page else None,
            end_cursor=inbox_cursor(page[-1]["activity_at"], page[-1]["id"], page[-1]["pinned_at"]) if page else None,
        ),
    )


@strawberry.type
class Query:
    @strawberry.field
    def viewer(self, info: Info) -> Viewer:
        return Viewer(user_id=ID(str(info.context.viewer_id)))

    @strawberry.field
    async def conversation(self, info: Info, id: ID) -> Conversation:
        _ = info.context.viewer_id  # authenticate before validating input
        return await load_conversation(info, check_id(id, "id"))

    @strawberry.field(
        description="The viewer's conversations (see ConversationConnection for the order); `filter` "
        "(additive): by default every conversation that is not archived.",
        metadata=prebuilt_page(INBOX_NODE),
    )
    async def inbox(
        self,
        info: Info,
        first: int | None = 20,
        after: str | None = strawberry.UNSET,
        only: Annotated[InboxFilter | None, strawberry.argument(name="filter")] = strawberry.UNSET,
    ) -> ConversationConnection:
        limit = check_page_size(first, "first", default=20)
        after = None if after is strawberry.UNSET else after
        keyset = parse_inbox_cursor(after) if after is not None else None
        wanted = conversations.DEFAULT_INBOX
        if only is not strawberry.UNSET and only is not None:
            wanted = conversations.InboxFilter(
                archived=only.archived,
                unread_only=bool(only.unread_only),
                pinned=only.pinned,
                muted=only.muted,
            )
        prebuilt: PrebuiltNodes | None = getattr(info, "prebuilt", None)  # a plan's, for its selection (prebuilt.py)
        if prebuilt is not None:
            return await _prebuilt_inbox(info, prebuilt, limit, keyset, wanted, after)
        below = info.selected_fields[0].selections
        nodes = selections_at(below, "nodes") + selections_at(below, "edges", "node")
        previews = [found for node in nodes for found in selections_at(node, "lastMessage")]
        # Only the columns the selection needs (speed: fewer to decode per row): the membership's
        # settings, the last message's lifecycle, when a field that reads them is selected.
        settings = not all(selects_only(node, Conversation.PLAIN_FIELDS) for node in nodes)
        lifecycle = not all(selects_only(preview, Message.PLAIN_FIELDS) for preview in previews)
        async with info.context.database.connection() as conn:
            if previews:  # every conversation's lastMessage comes in the same statement as the page
                rows = await conversations.inbox_page_with_last_messages(
                    conn, info.context.viewer_id, limit + 1, keyset, wanted, settings=settings, lifecycle=lifecycle
                )
            else:
                rows = await conversations.inbox_page(
                    conn, info.context.viewer_id, limit + 1, keyset, wanted, settings=settings
                )
        page, more = rows[:limit], len(rows) > limit
        found = [Conversation.from_row(row, settings) for row in page]
        if previews:
            for node, row in zip(found, page, strict=True):
                node.preloaded_last_message = Message.last_in_inbox_row(node.id, row, lifecycle)
        return _inbox_connection(found, page, more, after)

    @strawberry.field(
        description="A page of one conversation's history, adjacent to its cursor whatever the distance "
        "(see the arguments and MessageConnection)."
    )
    async def messages(
        self,
        info: Info,
        conversation_id: ID,
        first: PageFirst = strawberry.UNSET,
        after: PageAfter = strawberry.UNSET,
        last: PageLast = strawberry.UNSET,
        before: PageBefore = strawberry.UNSET,
    ) -> MessageConnection:
        _ = info.context.viewer_id
        conversation = await load_conversation(info, check_id(conversation_id, "conversationId"))
        return await load_message_page(
            info,
            int(conversation.id),
            conversation.last_seq,
            first,
            after,
            last,
            before,
            visible_from=conversation.visible_from_seq,
        )

    search_messages: MessageSearchConnection = strawberry.field(
        resolver=resolve_search_messages,
        description="Full-text search of the messages of the viewer's conversations, or of one of them "
        "(see MessageSearchConnection for the order).",
    )

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
            max_messages=info.context.settings.max_sync_messages,
            max_catch_up=info.context.settings.max_catch_up,
        )
        answers = [
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
        change_cursors = [(cid, c.after_change_seq) for (cid, _), c in zip(parsed, cursors, strict=True)]
        asked = [(cid, after) for cid, after in change_cursors if after is not None]
        if asked:
            pages = await read_changes(
                info.context.database,
                info.context.viewer_id,
                asked,
                # the same page as the messages' (priced alike): the budget shared by every cursor
                sync_page(check_page_size(limit, "limit"), len(parsed), info.context.settings.max_sync_messages),
                max_cursors=info.context.settings.max_sync_cursors,
                max_catch_up=info.context.settings.max_catch_up,
            )
            by_id = {p.conversation_id: p for p in pages}
            for answer in answers:
                page = by_id.get(int(answer.conversation_id))
                if page is not None:
                    answer.changes = [MessageChange.from_row(row) for row in page.changes]
                    answer.last_change_seq = Long(page.last_change_seq)
                    answer.changes_have_more = page.has_more
                    answer.changes_too_long = page.too_long
        thread_cursors = [
            (cid, c.after_thread_version)
            for (cid, _), c in zip(parsed, cursors, strict=True)
            if c.after_thread_version is not None
        ]
        if thread_cursors:
            synced = await read_thread_sync(
                info.context.database,
                info.context.viewer_id,
                thread_cursors,
                limit,
                max_cursors=info.context.settings.max_sync_cursors,
                max_threads=info.context.settings.max_sync_messages,  # the budget the page is priced at, as above
            )
            by_cid = {t.conversation_id: t for t in synced}
            for answer in answers:
                found = by_cid.get(int(answer.conversation_id))
                if found is not None:
                    answer.threads = [Thread.of(found.conversation_id, row) for row in found.threads]
                    answer.last_thread_version = Long(found.last_version)
                    answer.threads_have_more = found.has_more
        return answers
