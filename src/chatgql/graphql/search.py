"""Query.searchMessages: full-text search of the viewer's messages, a Relay connection of hits."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Annotated

import strawberry
from strawberry import ID
from strawberry.types import Info

from ..errors import BadUserInput
from ..services.checks import MAX_ID, check_id, check_page_size, check_text
from ..services.search import DEFAULT_SEARCH_PAGE, MAX_QUERY_CHARS, HitKey, search_messages
from .scalars import Long
from .types import Message, PageInfo


def hit_cursor(message: Message) -> str:
    raw = f"{message.created_at.isoformat()}|{message.conversation_id}|{message.seq}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def parse_hit_cursor(cursor: str) -> HitKey:
    try:
        at, cid, seq = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().split("|")
        created_at = datetime.fromisoformat(at)
        if created_at.tzinfo is None or not (0 < int(cid) <= MAX_ID and 0 < int(seq) <= MAX_ID):
            raise ValueError
        return created_at.astimezone(UTC), int(cid), int(seq)
    except (ValueError, UnicodeDecodeError, OverflowError):
        raise BadUserInput("after is not a search cursor") from None


@strawberry.type(description="One hit: the message found, with its conversation and seq.")
class MessageSearchEdge:
    cursor: str
    conversation_id: ID
    seq: Long
    node: Message


@strawberry.type(
    description="Messages whose current body matches the search, newest first (createdAt, then conversationId, "
    "then seq, descending; within one conversation that is seq descending). Deleted messages are never found; an "
    "edited one is found by its current body. Cursors are opaque; paging with after = the previous page's "
    "endCursor until hasNextPage is false visits every hit once. hasPreviousPage: some hit is at or newer than "
    "`after`."
)
class MessageSearchConnection:
    edges: list[MessageSearchEdge]
    nodes: list[Message]
    page_info: PageInfo


async def resolve_search_messages(
    info: Info,
    query: Annotated[
        str,
        strawberry.argument(
            description=f"Words to find (at most {MAX_QUERY_CHARS} characters), web-search syntax: "
            '"a phrase", `or`, `-word` to exclude. Words are matched whole and case-insensitively, in any '
            "language, without stemming."
        ),
    ],
    conversation_id: Annotated[
        ID | None, strawberry.argument(description="Only this conversation's messages (the viewer must be a member).")
    ] = None,
    first: Annotated[
        int | None, strawberry.argument(description=f"At most this many hits (1..200, default {DEFAULT_SEARCH_PAGE}).")
    ] = DEFAULT_SEARCH_PAGE,
    after: Annotated[str | None, strawberry.argument(description="The endCursor of the previous page.")] = None,
    prefix: Annotated[
        bool,
        strawberry.argument(
            description="Type-ahead: the query's last word also matches words that start with it (2 characters "
            "or more; a shorter one is matched whole)."
        ),
    ] = False,
) -> MessageSearchConnection:
    _ = info.context.viewer_id  # authenticate before validating input
    cid = None if conversation_id is None else check_id(conversation_id, "conversationId")
    key = None if after is None else parse_hit_cursor(after)
    check_text(query, "query", max_chars=MAX_QUERY_CHARS)  # bad input costs no rate token
    check_page_size(first, "first", default=DEFAULT_SEARCH_PAGE)
    await info.context.deps.limits.check("searchMessages", info.context.viewer_id)
    page = await search_messages(
        info.context.database,
        info.context.viewer_id,
        query,
        first=first,
        after=key,
        conversation_id=cid,
        prefix=prefix,
    )
    nodes = [Message.from_row(row) for row in page.hits]
    edges = [
        MessageSearchEdge(cursor=hit_cursor(node), conversation_id=node.conversation_id, seq=node.seq, node=node)
        for node in nodes
    ]
    return MessageSearchConnection(
        edges=edges,
        nodes=nodes,
        page_info=PageInfo(
            has_next_page=page.has_next,
            has_previous_page=page.has_previous,
            start_cursor=edges[0].cursor if edges else None,
            end_cursor=edges[-1].cursor if edges else None,
        ),
    )
