"""What an operation's answer may come to, priced before it runs.

limits.py counts what a document is made of (fields, aliases, depth); a field
costs the same there whether it answers one value or 200,000. This module
prices what the fields multiply into: an operation's cost is an upper
estimate of its answer's size in bytes, from the schema and the request's
arguments (variables included), before any resolver runs:

- a field costs its response name and punctuation, plus its value;
- a scalar costs a fixed size (an ID or a Long 20, a DateTime 32, ...); a
  String whose length the server bounds costs its bound (the API declares
  which: registry.PRICING.strings), others 64;
- an object costs the sum of the fields selected on it; fragments count where
  they are spread, every type condition of an abstract type in full (an
  upper bound: an item is one of them);
- a list costs the most items it can answer times one item, as the API
  declares it (registry.PRICING: a field's own rule, or the page of the
  connection it is in); a list it is not told of, 100 items;
- `__schema` and `__type` subtrees cost nothing here (introspection is off in
  production and has a depth rule of its own).

What the API prices its fields by (page sizes, list bounds, the settings they
read) is in graphql/pricing.py.

An argument given by a variable is read from the request's variables; one
missing or of the wrong type counts its cap (coercion refuses it anyway). The
walk visits every selection with fragments expanded: the operation limits
(limits.py) bound that to CHATGQL_MAX_SELECTIONS, and they are checked first.
A document's price is kept per document for the variables it read (the
planner's fast path asks for it on every request).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
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

from ..settings import Settings
from .registry import PRICING, Pricing

_SCALARS = {"ID": 20, "Long": 20, "Int": 11, "Float": 24, "Boolean": 5, "DateTime": 32, "UUID": 38, "String": 64}
_ENUM = 16
_FIELD = 4  # quotes, colon and comma around a response name
_UNKNOWN_LIST = 100
_INTROSPECTION_ROOTS = frozenset({"__schema", "__type"})


def _default_bounds() -> dict[str, int]:
    return {name: bound.default for name, bound in PRICING.bounds.items()}


@dataclass(frozen=True)
class CostLimits:
    """The bounds (CHATGQL_MAX_OPERATION_COST, ..._SUBSCRIPTION_EVENT_COST, ..._SOCKET_EVENT_COST)
    and what the price reads from the settings (registry.PRICING.bounds, by name)."""

    max_cost: int = 8_000_000  # one operation; a batch's operations in all
    max_event_cost: int = 100_000  # one event of one subscription
    max_socket_event_cost: int = 1_000_000  # one event of every subscription of a websocket, summed
    bounds: Mapping[str, int] = field(default_factory=_default_bounds)

    @classmethod
    def of(cls, settings: Settings) -> CostLimits:
        return cls(
            max_cost=settings.max_operation_cost,
            max_event_cost=settings.max_subscription_event_cost,
            max_socket_event_cost=settings.max_socket_event_cost,
            bounds={name: bound.read(settings) for name, bound in PRICING.bounds.items()},
        )


class _Walk:
    """One pricing of one operation; records the variables it read."""

    def __init__(
        self,
        schema: GraphQLSchema,
        fragments: Mapping[str, FragmentDefinitionNode],
        variables: Mapping[str, Any],
        limits: CostLimits,
        pricing: Pricing,
    ) -> None:
        self.schema = schema
        self.fragments = fragments
        self.variables = variables
        self.limits = limits
        self.pricing = pricing
        self.read: dict[str, None] = {}

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
        pricing = self.pricing
        size_rule = pricing.lists.get((parent_name, name))
        inner_page = pricing.pages.get((parent_name, name))
        takes_page = name in pricing.page_lists or (parent_name, name) in pricing.page_items
        return key + self.value(
            definition.type,
            node,
            parent_name,
            page=inner_page(self, node) if inner_page is not None else None,
            items=size_rule(self, node) if size_rule is not None else (page if takes_page else None),
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
        bound = self.pricing.strings.get((parent_name, node.name.value))
        if bound is not None:
            return self.bound(bound) + 2
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

    def bound(self, name: str) -> int:
        """A bound of registry.PRICING.bounds, as this process has it."""
        return self.limits.bounds[name]


_OTHER = object()  # a literal that is neither an Int nor a list


def price(
    schema: GraphQLSchema,
    operation: OperationDefinitionNode,
    fragments: Mapping[str, FragmentDefinitionNode],
    variables: Mapping[str, Any] | None,
    limits: CostLimits,
) -> tuple[int, tuple[str, ...]]:
    """(cost, the variables the price read) of one operation."""
    root = schema.get_root_type(operation.operation)
    walk = _Walk(schema, fragments, variables or {}, limits, PRICING)
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
        f"the {what} could answer up to {cost:,} bytes, more than the {limit:,} allowed: ask for {PRICING.hint}",
        extensions={"code": "LIMIT_EXCEEDED", "limit": "cost", "cost": cost, "maxCost": limit},
    )
