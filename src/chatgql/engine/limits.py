"""What one GraphQL document may ask for, sized up before anything else looks at it.

A document is priced as if every fragment were written out where it is
spread: fields, aliases, depth, and every selection (fields, spreads and
inline fragments) it expands to. Everything counts, `__typename` and
introspection included, except depth inside an introspection subtree
(`__schema`, `__type`): the standard introspection query nests `ofType`
nine levels deep, and introspection has a depth rule of its own
(graphql-core's MaxIntrospectionDepthRule, added when introspection is on).

Pricing is linear in the document's size, whatever its fragment structure:
each fragment is priced once, from the fragments it spreads, in an order
computed without recursion over the fragment graph, and a spread adds the
memoised price of its fragment. A 756-byte chain of fragments that each
spread the previous one twice expands to 2^n selections; it is priced in
microseconds and refused. (The previous version walked every spread each
time it was used: 1 s of CPU for depth 18.)

`check_document` runs before validation (operation.ChatOperation): a document
that is over a limit is refused with LIMIT_EXCEEDED without validation ever
seeing it, because some of GraphQL's validation rules are super-linear in
the size they are given (OverlappingFieldsCanBeMerged compares every pair of
fields that share a response name: 500 copies of `viewer { totalUnread }`
took 0.7 s). Within the limits, validation's work is bounded too.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
)

_INTROSPECTION_ROOTS = frozenset({"__schema", "__type"})


@dataclass(frozen=True)
class OperationLimits:
    max_depth: int
    max_aliases: int
    max_fields: int
    max_selections: int = 2000  # fields, spreads and inline fragments, expanded


@dataclass(frozen=True, slots=True)
class Cost:
    """The price of a selection set with its fragments expanded."""

    fields: int = 0
    aliases: int = 0
    depth: int = 0  # a field is one level; introspection subtrees add none
    selections: int = 0

    def over(self, limits: OperationLimits) -> tuple[str, int] | None:
        """(what, limit) of the first limit this cost exceeds, or None."""
        if self.selections > limits.max_selections:
            return "selections", limits.max_selections
        if self.fields > limits.max_fields:
            return "fields", limits.max_fields
        if self.aliases > limits.max_aliases:
            return "aliases", limits.max_aliases
        if self.depth > limits.max_depth:
            return "depth", limits.max_depth
        return None


_FREE = Cost()


class _Pricer:
    def __init__(self, fragments: dict[str, FragmentDefinitionNode]) -> None:
        self.fragments = fragments
        self.priced: dict[str, Cost] = {}

    def price_fragments(self) -> None:
        """Every fragment's cost, each computed once, dependencies first (iterative:
        a chain of hundreds of fragments must not reach Python's recursion limit).
        A spread that closes a cycle costs nothing here: NoFragmentCycles refuses it."""
        spreads = {name: _spread_names(fragment.selection_set) for name, fragment in self.fragments.items()}
        state: dict[str, int] = {}  # 1: on the stack, 2: priced
        for root in self.fragments:
            if root in state:
                continue
            stack = [(root, iter(spreads[root]))]
            state[root] = 1
            while stack:
                name, pending = stack[-1]
                for child in pending:
                    if child in self.fragments and child not in state:
                        state[child] = 1
                        stack.append((child, iter(spreads[child])))
                        break
                else:
                    stack.pop()
                    self.priced[name] = self.price(self.fragments[name].selection_set)
                    state[name] = 2

    def price(self, selection_set: SelectionSetNode | None, introspection: bool = False) -> Cost:
        """The cost of a selection set, fragments it spreads already priced (nesting
        depth is bounded by the parser's own recursion limit)."""
        if selection_set is None:
            return _FREE
        fields = aliases = depth = selections = 0
        for selection in selection_set.selections:
            selections += 1
            if isinstance(selection, FieldNode):
                inside = introspection or selection.name.value in _INTROSPECTION_ROOTS
                child = self.price(selection.selection_set, inside)
                fields += 1 + child.fields
                aliases += (selection.alias is not None) + child.aliases
                selections += child.selections
                if not inside:
                    depth = max(depth, 1 + child.depth)
            else:
                if isinstance(selection, InlineFragmentNode):
                    child = self.price(selection.selection_set, introspection)
                elif isinstance(selection, FragmentSpreadNode):
                    child = self.priced.get(selection.name.value, _FREE)
                else:  # pragma: no cover - the parser makes no other kind
                    continue
                fields += child.fields
                aliases += child.aliases
                selections += child.selections
                if not introspection:
                    depth = max(depth, child.depth)
        return Cost(fields, aliases, depth, selections)


def _spread_names(selection_set: SelectionSetNode | None) -> list[str]:
    """The fragments a selection set spreads, at any depth, each once."""
    names: dict[str, None] = {}
    pending = [selection_set] if selection_set is not None else []
    while pending:
        for selection in pending.pop().selections:
            if isinstance(selection, FragmentSpreadNode):
                names[selection.name.value] = None
            elif isinstance(selection, (FieldNode, InlineFragmentNode)) and selection.selection_set is not None:
                pending.append(selection.selection_set)
    return list(names)


def check_document(document: DocumentNode, limits: OperationLimits) -> GraphQLError | None:
    """LIMIT_EXCEEDED for the first definition over a limit, or None.

    Every operation is checked, not only the one a request selects, and every
    fragment, used or not, is held to the size limits (selections, fields):
    validation walks them all. A fragment's depth and aliases count where it
    is spread (the standard introspection query's fragments are deep, and
    only ever spread inside __schema)."""
    fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
    pricer = _Pricer(fragments)
    pricer.price_fragments()
    for definition in document.definitions:
        if isinstance(definition, OperationDefinitionNode):
            cost = pricer.price(definition.selection_set)
        elif isinstance(definition, FragmentDefinitionNode):
            cost = pricer.priced.get(definition.name.value, _FREE)
            cost = Cost(fields=cost.fields, selections=cost.selections)
        else:
            continue
        exceeded = cost.over(limits)
        if exceeded is not None:
            what, limit = exceeded
            return GraphQLError(
                f"the operation exceeds the maximum {what} of {limit}",
                definition,
                extensions={"code": "LIMIT_EXCEEDED", "limit": what},
            )
    return None
