"""What an operation's answer may come to, priced before it runs.

limits.py counts what a document is made of (fields, aliases, depth); a field
costs the same there whether it answers one value or 200,000. This module
prices what the fields multiply into: an operation's cost is an upper
estimate of its answer's size in bytes, from the schema and the request's
arguments (variables included), before any resolver runs:

- a field costs its response name and punctuation, plus its value;
- a scalar costs a fixed size (an ID or a Long 20, a DateTime 32, ...); a
  String whose length the server bounds costs its bound (a message body
  CHATGQL_MAX_BODY_CHARS, a title CHATGQL_MAX_TITLE_CHARS), others 64;
- an object costs the sum of the fields selected on it; fragments count where
  they are spread, every type condition of an abstract type in full (an
  upper bound: an item is one of them);
- a list costs the most items it can answer times one item: a page of
  messages `first`/`last` (default 50, at most 200), a page of the inbox
  `first` (default 20) and of searchMessages `first` (default 20), on their
  `nodes` and `edges`; `members(first:)` and
  `seenBy(first:)` their page, capped by CHATGQL_MEMBERS_PAGE_MAX;
  `nodes(ids:)` the ids given; `sync` its cursors times `limit`; a message's
  `attachments`, `reactions` and `mentions` the most a message can hold
  (CHATGQL_MAX_ATTACHMENTS, ..._REACTIONS_PER_MESSAGE, and for mentions
  CHATGQL_MAX_GROUP_MEMBERS: an everyone-mention lists every member); a list
  this module does not know, 100 items;
- `__schema` and `__type` subtrees cost nothing here (introspection is off in
  production and has a depth rule of its own).

An argument given by a variable is read from the request's variables; one
missing or of the wrong type counts its cap (coercion refuses it anyway). The
walk visits every selection with fragments expanded: the operation limits
(limits.py) bound that to CHATGQL_MAX_SELECTIONS, and they are checked first.
A document's price is kept per document for the variables it read (the
planner's fast path asks for it on every request).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLEnumType,
    GraphQLError,
    GraphQLList,
    GraphQLNonNull,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    ListValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    VariableNode,
    get_named_type,
    get_operation_ast,
)

from ..services.checks import DEFAULT_PAGE, MAX_PAGE
from ..services.history import sync_page
from ..services.search import DEFAULT_SEARCH_PAGE
from ..settings import Settings
from .nodes import MAX_NODES

_SCALARS = {"ID": 20, "Long": 20, "Int": 11, "Float": 24, "Boolean": 5, "DateTime": 32, "UUID": 38, "String": 64}
_ENUM = 16
_FIELD = 4  # quotes, colon and comma around a response name
_UNKNOWN_LIST = 100
_INTROSPECTION_ROOTS = frozenset({"__schema", "__type"})
_CONNECTION_LISTS = frozenset({"nodes", "edges"})


@dataclass(frozen=True)
class CostLimits:
    """The bounds (CHATGQL_MAX_OPERATION_COST, ..._SUBSCRIPTION_EVENT_COST, ..._SOCKET_EVENT_COST)
    and what the price reads from the settings."""

    max_cost: int = 8_000_000  # one operation; a batch's operations in all
    max_event_cost: int = 100_000  # one event of one subscription
    max_socket_event_cost: int = 1_000_000  # one event of every subscription of a websocket, summed
    body_chars: int = 4000
    title_chars: int = 200
    members_page_max: int = 1000
    max_sync_cursors: int = 500
    max_sync_messages: int = 300
    max_attachments: int = 10
    max_reactions: int = 20
    max_mentions: int = 1000  # an everyone-mention lists every member of the group

    @classmethod
    def of(cls, settings: Settings) -> CostLimits:
        return cls(
            max_cost=settings.max_operation_cost,
            max_event_cost=settings.max_subscription_event_cost,
            max_socket_event_cost=settings.max_socket_event_cost,
            body_chars=settings.max_body_chars,
            title_chars=settings.max_title_chars,
            members_page_max=settings.members_page_max,
            max_sync_cursors=settings.max_sync_cursors,
            max_sync_messages=settings.max_sync_messages,
            max_attachments=settings.max_attachments,
            max_reactions=settings.max_reactions_per_message,
            max_mentions=max(settings.max_mentions, settings.max_group_members),
        )


class _Walk:
    """One pricing of one operation; records the variables it read."""

    def __init__(
        self,
        schema: GraphQLSchema,
        fragments: Mapping[str, FragmentDefinitionNode],
        variables: Mapping[str, Any],
        limits: CostLimits,
    ) -> None:
        self.schema = schema
        self.fragments = fragments
        self.variables = variables
        self.limits = limits
        self.read: dict[str, None] = {}
        self.strings = {("Message", "body"): limits.body_chars, ("Conversation", "title"): limits.title_chars}

    def selection_set(self, selection_set: SelectionSetNode | None, parent: Any, page: int | None) -> int:
        """The cost of the fields selected on an object of type parent; page: the page size of the
        connection it is, for its nodes and edges."""
        if selection_set is None or parent is None:
            return 2
        total = 2
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                total += self.field(selection, parent, page)
            elif isinstance(selection, InlineFragmentNode):
                condition = selection.type_condition
                on = self.schema.get_type(condition.name.value) if condition is not None else parent
                total += self.selection_set(selection.selection_set, on, page) - 2
            elif isinstance(selection, FragmentSpreadNode):
                fragment = self.fragments.get(selection.name.value)
                if fragment is not None:
                    on = self.schema.get_type(fragment.type_condition.name.value)
                    total += self.selection_set(fragment.selection_set, on, page) - 2
        return total

    def field(self, node: FieldNode, parent: Any, page: int | None) -> int:
        name = node.name.value
        key = len((node.alias or node.name).value) + _FIELD
        if name in _INTROSPECTION_ROOTS:
            return key
        if name == "__typename":
            return key + _SCALARS["String"]
        definition = getattr(parent, "fields", {}).get(name)
        if definition is None:
            return key  # validation refuses it
        parent_name = parent.name
        size_rule = _LIST_SIZES.get((parent_name, name))
        inner_page = _PAGES.get((parent_name, name))
        return key + self.value(
            definition.type,
            node,
            parent_name,
            page=inner_page(self, node) if inner_page is not None else None,
            items=size_rule(self, node)
            if size_rule is not None
            else (page if _takes_page(parent_name, name) else None),
        )

    def value(self, type_: Any, node: FieldNode, parent_name: str, *, page: int | None, items: int | None) -> int:
        if isinstance(type_, GraphQLNonNull):
            type_ = type_.of_type
        if isinstance(type_, GraphQLList):
            count = _UNKNOWN_LIST if items is None else items
            # Items of a list of lists (none in this schema) count as unknown lists.
            return 2 + count * (1 + self.value(type_.of_type, node, parent_name, page=page, items=None))
        named = get_named_type(type_)
        if node.selection_set is not None:
            return self.selection_set(node.selection_set, named, page)
        if isinstance(named, GraphQLEnumType):
            return _ENUM
        bound = self.strings.get((parent_name, node.name.value))
        if bound is not None:
            return bound + 2
        return _SCALARS.get(named.name, _SCALARS["String"])

    # --- arguments ---------------------------------------------------------------------------

    def argument(self, node: FieldNode, name: str) -> tuple[bool, Any]:
        """(given, value) of an argument: a literal's value, a variable's (missing: not given)."""
        for argument in node.arguments or ():
            if argument.name.value != name:
                continue
            value = argument.value
            if isinstance(value, VariableNode):
                variable = value.name.value
                self.read[variable] = None
                if variable not in self.variables:
                    return False, None
                return True, self.variables[variable]
            if isinstance(value, IntValueNode):
                return True, int(value.value)
            if isinstance(value, ListValueNode):
                return True, [None] * len(value.values)
            return True, _OTHER
        return False, None

    def count(self, node: FieldNode, name: str, *, default: int, cap: int) -> int:
        """An Int argument as a number of items: its default when absent or null, at most cap."""
        given, value = self.argument(node, name)
        if not given or value is None:
            return min(default, cap)
        if isinstance(value, bool) or not isinstance(value, int):
            return cap
        return max(0, min(value, cap))

    def length(self, node: FieldNode, name: str, *, cap: int) -> int:
        """A list argument's length, at most cap (a single value coerces to a list of one)."""
        given, value = self.argument(node, name)
        if not given or value is None:
            return 0
        if isinstance(value, list):
            return min(len(value), cap)
        return 1 if value is not _OTHER else cap


_OTHER = object()  # a literal that is neither an Int nor a list


def _message_page(walk: _Walk, node: FieldNode) -> int:
    given_first, first = walk.argument(node, "first")
    if given_first and first is not None:
        return walk.count(node, "first", default=DEFAULT_PAGE, cap=MAX_PAGE)
    return walk.count(node, "last", default=DEFAULT_PAGE, cap=MAX_PAGE)


def _inbox_page(walk: _Walk, node: FieldNode) -> int:
    return walk.count(node, "first", default=20, cap=MAX_PAGE)


def _search_page(walk: _Walk, node: FieldNode) -> int:
    return walk.count(node, "first", default=DEFAULT_SEARCH_PAGE, cap=MAX_PAGE)


def _members(walk: _Walk, node: FieldNode) -> int:
    cap = walk.limits.members_page_max
    return walk.count(node, "first", default=cap, cap=cap)


def _seen_by(walk: _Walk, node: FieldNode) -> int:
    cap = walk.limits.members_page_max
    return walk.count(node, "first", default=100, cap=cap)


def _nodes(walk: _Walk, node: FieldNode) -> int:
    return walk.length(node, "ids", cap=MAX_NODES)


def _sync(walk: _Walk, node: FieldNode) -> int:
    return walk.length(node, "cursors", cap=walk.limits.max_sync_cursors)


def _attachments(walk: _Walk, node: FieldNode) -> int:
    return walk.limits.max_attachments


def _reactions(walk: _Walk, node: FieldNode) -> int:
    return walk.limits.max_reactions


def _mentions(walk: _Walk, node: FieldNode) -> int:
    return walk.limits.max_mentions


def _delivered_many(walk: _Walk, node: FieldNode) -> int:
    return walk.length(node, "items", cap=walk.limits.max_sync_cursors)


def _sync_limit(walk: _Walk, node: FieldNode) -> int:
    limit = walk.count(node, "limit", default=100, cap=MAX_PAGE)
    return sync_page(limit, _sync(walk, node), walk.limits.max_sync_messages)


# (type, field) -> how many items the field's list answers at most
_LIST_SIZES: dict[tuple[str, str], Callable[[_Walk, FieldNode], int]] = {
    ("Conversation", "members"): _members,
    ("Message", "seenBy"): _seen_by,
    ("Message", "reactedBy"): _seen_by,
    ("Message", "replies"): lambda walk, node: walk.count(node, "first", default=DEFAULT_PAGE, cap=MAX_PAGE),
    ("Message", "attachments"): _attachments,
    ("Message", "reactions"): _reactions,
    ("Message", "mentions"): _mentions,
    ("Query", "nodes"): _nodes,
    ("Query", "sync"): _sync,
    ("Mutation", "markDeliveredMany"): _delivered_many,
}
# (type, field) -> the page size of the connection it answers (its nodes and edges lists)
_PAGES: dict[tuple[str, str], Callable[[_Walk, FieldNode], int]] = {
    ("Query", "messages"): _message_page,
    ("Conversation", "messages"): _message_page,
    ("Query", "inbox"): _inbox_page,
    ("Query", "searchMessages"): _search_page,
    ("Query", "sync"): _sync_limit,  # each ConversationSync's messages
}
_CONNECTION_ITEMS = {
    ("ConversationSync", "messages"),
    ("ConversationSync", "changes"),
}  # lists that take their page from the field above


def _takes_page(parent_name: str, name: str) -> bool:
    return name in _CONNECTION_LISTS or (parent_name, name) in _CONNECTION_ITEMS


def price(
    schema: GraphQLSchema,
    operation: OperationDefinitionNode,
    fragments: Mapping[str, FragmentDefinitionNode],
    variables: Mapping[str, Any] | None,
    limits: CostLimits,
) -> tuple[int, tuple[str, ...]]:
    """(cost, the variables the price read) of one operation."""
    root = schema.get_root_type(operation.operation)
    walk = _Walk(schema, fragments, variables or {}, limits)
    return walk.selection_set(operation.selection_set, root, None), tuple(walk.read)


class CostCache:
    """Prices per document object and operationName, for the values of the variables they read."""

    def __init__(self, limits: CostLimits, maxsize: int = 1024) -> None:
        self.limits = limits
        self._maxsize = maxsize
        # id(document), operationName -> (document, variables read, {their values: cost})
        self._entries: OrderedDict[tuple[int, str | None], tuple[DocumentNode, tuple[str, ...], dict]] = OrderedDict()

    def cost(
        self, schema: GraphQLSchema, document: DocumentNode, operation_name: str | None, variables: Any
    ) -> tuple[int, str] | None:
        """(cost, operation type) of the operation a request runs; None when it names none."""
        variables = variables if isinstance(variables, dict) else {}
        key = (id(document), operation_name)
        entry = self._entries.get(key)
        if entry is not None and entry[0] is document:
            self._entries.move_to_end(key)
            _, read, known = entry
            found = known.get(_read_values(variables, read))
            if found is not None:
                return found
        operation = get_operation_ast(document, operation_name)
        if operation is None:
            return None
        fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
        cost, read = price(schema, operation, fragments, variables, self.limits)
        found = (cost, operation.operation.value)
        if entry is None or entry[0] is not document:
            entry = self._entries[key] = (document, read, {})
            if len(self._entries) > self._maxsize:
                self._entries.popitem(last=False)
        known = entry[2]
        if len(known) < 64:  # a document asked with ever new page sizes is priced each time
            known[_read_values(variables, read)] = found
        return found


def _read_values(variables: dict, read: tuple[str, ...]) -> tuple:
    """What the price reads of these variables (_hashable). A mutation's price reads none, mostly: ()
    without a generator's making (bench/results/micro.md)."""
    return tuple([_hashable(variables.get(name, _MISSING)) for name in read]) if read else ()


_MISSING = object()


def _hashable(value: Any) -> Any:
    """What the price reads of a variable's value: a list by its length, a number as it is."""
    if isinstance(value, list):
        return ("list", len(value))
    if isinstance(value, bool | int) or value is None or value is _MISSING:
        return (type(value).__name__, value)
    return ("other",)


def over_cost(cost: int, limit: int, what: str = "operation") -> GraphQLError:
    """LIMIT_EXCEEDED for an operation (or batch, or subscription) whose price is over its bound."""
    return GraphQLError(
        f"the {what} could answer up to {cost:,} bytes, more than the {limit:,} allowed: ask for smaller "
        "pages (first, last, seenBy(first:), members(first:), sync limit) or fewer aliases",
        extensions={"code": "LIMIT_EXCEEDED", "limit": "cost", "cost": cost, "maxCost": limit},
    )
