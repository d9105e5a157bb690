"""What the operation's price (engine/cost.py) knows of the API's fields, declared in the registry.

- a String whose length the server bounds costs its bound: a message body
  CHATGQL_MAX_BODY_CHARS, a title CHATGQL_MAX_TITLE_CHARS;
- a page of messages `first`/`last` (default 50, at most 200), a page of the
  inbox `first` (default 20) and of searchMessages `first` (default 20), on
  their `nodes` and `edges`; `members(first:)` and `seenBy(first:)` their
  page, capped by CHATGQL_MEMBERS_PAGE_MAX; `nodes(ids:)` the ids given;
  `sync` its cursors times `limit`; a message's `attachments`, `reactions` and
  `mentions` the most a message can hold (CHATGQL_MAX_ATTACHMENTS,
  ..._REACTIONS_PER_MESSAGE, and for mentions CHATGQL_MAX_GROUP_MEMBERS: an
  everyone-mention lists every member).
"""

from __future__ import annotations

from graphql import FieldNode

from ..engine.registry import PRICING, Arguments, Bound, Pricing, at_most, count, first_or_last, length
from ..services.checks import DEFAULT_PAGE, MAX_PAGE
from ..services.history import sync_page
from ..services.search import DEFAULT_SEARCH_PAGE
from .nodes import MAX_NODES

_sync_cursors = length("cursors", cap="max_sync_cursors")
_sync_limit = count("limit", default=100, cap=MAX_PAGE)


def _sync_page(walk: Arguments, node: FieldNode) -> int:
    """Each ConversationSync's messages."""
    return sync_page(_sync_limit(walk, node), _sync_cursors(walk, node), walk.bound("max_sync_messages"))


_seen_by = count("first", default=100, cap="members_page_max")
_message_page = first_or_last(default=DEFAULT_PAGE, cap=MAX_PAGE)

PRICING.declare(
    Pricing(
        strings={("Message", "body"): "body_chars", ("Conversation", "title"): "title_chars"},
        lists={
            ("Conversation", "members"): count("first", default="members_page_max", cap="members_page_max"),
            ("Conversation", "bans"): count("first", default="members_page_max", cap="members_page_max"),
            ("Message", "seenBy"): _seen_by,
            ("Message", "reactedBy"): _seen_by,
            ("Message", "replies"): count("first", default=DEFAULT_PAGE, cap=MAX_PAGE),
            ("Message", "attachments"): at_most("max_attachments"),
            ("Message", "reactions"): at_most("max_reactions"),
            ("Message", "mentions"): at_most("max_mentions"),
            ("Query", "nodes"): length("ids", cap=MAX_NODES),
            ("Query", "sync"): _sync_cursors,
            ("Mutation", "markDeliveredMany"): length("items", cap="max_sync_cursors"),
        },
        pages={
            ("Query", "messages"): _message_page,
            ("Conversation", "messages"): _message_page,
            ("Query", "inbox"): count("first", default=20, cap=MAX_PAGE),
            ("Query", "searchMessages"): count("first", default=DEFAULT_SEARCH_PAGE, cap=MAX_PAGE),
            ("Query", "sync"): _sync_page,
        },
        page_lists={"nodes", "edges"},
        page_items={("ConversationSync", "messages"), ("ConversationSync", "changes"), ("ConversationSync", "threads")},
        bounds={
            "body_chars": Bound(4000, lambda s: s.max_body_chars),
            "title_chars": Bound(200, lambda s: s.max_title_chars),
            "members_page_max": Bound(1000, lambda s: s.members_page_max),
            "max_sync_cursors": Bound(500, lambda s: s.max_sync_cursors),
            "max_sync_messages": Bound(300, lambda s: s.max_sync_messages),
            "max_attachments": Bound(10, lambda s: s.max_attachments),
            "max_reactions": Bound(20, lambda s: s.max_reactions_per_message),
            # an everyone-mention lists every member of the group
            "max_mentions": Bound(1000, lambda s: max(s.max_mentions, s.max_group_members)),
        },
        hint="smaller pages (first, last, seenBy(first:), members(first:), sync limit) or fewer aliases",
    )
)
