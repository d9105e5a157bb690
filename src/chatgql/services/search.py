"""Full-text search of the messages of the viewer's conversations (store.search)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from ..db import Database, Row
from ..errors import BadUserInput, conversation_not_found
from ..store import membership, search
from .checks import check_page_size, check_text

MAX_QUERY_CHARS = 200
DEFAULT_SEARCH_PAGE = 20
MIN_PREFIX_CHARS = 2  # a shorter last word is matched whole: one letter would expand to most of the index
_LAST_WORD = re.compile(r"(?:^|[\s(])(\w+)\s*$")  # a last word not negated (-word) nor inside a phrase ("...")

HitKey = tuple[datetime, int, int]  # (created_at, conversation_id, seq) of a hit: where a page ends


@dataclass(frozen=True, slots=True)
class SearchPage:
    hits: list[Row]  # store.messages.MESSAGE_COLUMNS, newest first
    has_next: bool  # older hits follow
    has_previous: bool  # hits at or newer than `after` exist


def _split_prefix(text: str) -> tuple[str, str | None]:
    """(the text websearch_to_tsquery reads, the last word to match as a prefix or None), for prefix search."""
    found = _LAST_WORD.search(text)
    if found is None or len(found.group(1)) < MIN_PREFIX_CHARS or text.count('"') % 2:
        return text, None
    return text[: found.start(1)], found.group(1)


async def search_messages(
    database: Database,
    viewer_id: str,
    query: str,
    *,
    first: int | None,
    after: HitKey | None = None,
    conversation_id: int | None = None,
    prefix: bool = False,
) -> SearchPage:
    """The viewer's messages whose current body matches query (websearch syntax, 'simple' words), newest
    first, at most `first` (1..200, default 20) older than the hit `after`; in one conversation when given
    (NOT_FOUND when the viewer is not a member, as every read). With prefix, the last word also matches
    longer words (type-ahead). BAD_USER_INPUT: a blank query, one over MAX_QUERY_CHARS, one with no words."""
    query = check_text(query, "query", max_chars=MAX_QUERY_CHARS)
    limit = check_page_size(first, "first", default=DEFAULT_SEARCH_PAGE)
    if after is not None and conversation_id is not None and after[1] != conversation_id:
        raise BadUserInput("after is a cursor of another conversation's search")
    text, last = _split_prefix(query) if prefix else (query, None)
    async with database.connection() as conn:
        tsquery = await search.parse_query(conn, text, last)
        if not tsquery:
            raise BadUserInput("query has no words to search for", reason="NO_SEARCH_TERMS")
        rows = await search.hits(conn, viewer_id, tsquery, limit + 1, after, conversation_id)
        if (
            conversation_id is not None
            and not rows
            and not await membership.is_member(conn, conversation_id, viewer_id)
        ):
            raise conversation_not_found(conversation_id)
        newer = after is not None and await search.any_hit_from(conn, viewer_id, tsquery, after, conversation_id)
    return SearchPage(rows[:limit], len(rows) > limit, newer)
