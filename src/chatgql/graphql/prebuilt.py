"""An inbox page's nodes as JSON that PostgreSQL builds, for the selections that read only columns.

The inbox is the first page every client loads, and most of its CPU was Python's per row: decoding
each column, a Conversation and a Message object per row, then completing their fields one by one and
encoding them again (bench/results/perf-send.md). When every field a page's nodes select is a value of
the page's own row (Conversation.from_row's, Message.last_in_inbox_row's), the statement builds each
node's answer itself (json_build_object, keys in the answer's order) and the plan passes the text
through (orjson.Fragment), under `nodes` and under `edges { node }` alike. Anything else (memberCount,
members, unreadMentions, a message's reactions...) and the page is built the ordinary way.

Only a plan runs it (plan/compile.py PREBUILT): the plan collected the selection once, with @skip and
@include decided and fragments merged, so what it prebuilt holds for every run of that plan. The
differential tests (tests/graphql/plan/test_planner_differential.py) hold the two ways to the same
answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from strawberry.utils.str_converters import to_camel_case

from ..engine.plan.compile import Selection
from ..store.conversations import INBOX_JSON_VALUES, LAST_MESSAGE_JSON_VALUES, JsonObject, JsonText
from .types import Conversation, Message

# A node's fields: GraphQL name -> the value of the inbox row that answers it, named as the field
# (store.conversations.INBOX_JSON_VALUES, LAST_MESSAGE_JSON_VALUES).
_CONVERSATION = {to_camel_case(name): name for name in INBOX_JSON_VALUES}
_MESSAGE = {to_camel_case(name): name for name in LAST_MESSAGE_JSON_VALUES}


@dataclass(frozen=True, slots=True)
class InboxNodes:
    """What store.conversations.inbox_page_json builds a page's nodes of: `nodes` (node_0) and
    `edges { node }` (node_1 when both are selected) as each selects them."""

    objects: tuple[JsonObject, ...]
    nodes: int | None  # which of objects answers `nodes`; None: not selected
    edge_nodes: int | None  # which answers `edges { node }` (edges without node: 0, never read); None: no edges
    settings: bool  # reads the membership's settings columns
    lifecycle: bool  # reads the last message's lifecycle columns


def inbox_nodes(selection: Selection) -> InboxNodes | None:
    """Query.inbox's prebuilder: its nodes as JSON, or None when they select anything else."""
    nodes = edges = None
    for name, _, below in selection.fields().values():
        if name == "nodes" and nodes is None:
            nodes = below
        elif name == "edges" and edges is None:
            edges = below
        elif name not in ("pageInfo", "__typename"):  # a second nodes or edges (aliased): the ordinary way
            return None
    edge_node = None
    if edges is not None:
        for name, _, below in edges.fields().values():
            if name == "node" and edge_node is None:
                edge_node = below
            elif name not in ("cursor", "__typename"):
                return None
    conversation_names: set[str] = set()
    message_names: set[str] = set()
    objects = []
    for found in (nodes, edge_node):
        if found is not None:
            built = _object(found, "Conversation", _CONVERSATION, conversation_names, message_names)
            if built is None:
                return None
            objects.append(built)
    if not objects:
        return None
    return InboxNodes(
        objects=tuple(objects),
        nodes=None if nodes is None else 0,
        edge_nodes=None if edges is None else (0 if edge_node is None else len(objects) - 1),
        settings=not conversation_names <= Conversation.PLAIN_FIELDS,
        lifecycle=not message_names <= Message.PLAIN_FIELDS,
    )


def _object(
    selection: Selection, type_name: str, values: dict[str, str], names: set[str], message_names: set[str] | None
) -> JsonObject | None:
    """The object's keys and values; None when a field is not one of values (or takes arguments).
    names: the GraphQL names it selects, added to; message_names: lastMessage's (None: no lastMessage)."""
    built: list[tuple[str, str | JsonText | JsonObject]] = []
    for key, (name, has_arguments, below) in selection.fields().items():
        if has_arguments:
            return None
        names.add(name)
        if name == "__typename":
            built.append((key, JsonText(type_name)))
        elif name == "lastMessage" and message_names is not None:
            inner = _object(below, "Message", _MESSAGE, message_names, None)
            if inner is None:
                return None
            built.append((key, inner))
        elif name in values:
            built.append((key, values[name]))
        else:
            return None
    if not 0 < len(built) <= 50:  # json_build_object's 100 arguments
        return None
    return tuple(built)
