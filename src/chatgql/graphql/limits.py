"""Limits on what one GraphQL document may ask for (a public endpoint's doors).

Depth, aliases and fields are counted over the operation with fragments
expanded (a fragment used twice counts twice); introspection selections
(__schema, __type) are not counted. Exceeding one is LIMIT_EXCEEDED, before
anything executes.
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
    ValidationContext,
    ValidationRule,
)


@dataclass(frozen=True)
class OperationLimits:
    max_depth: int
    max_aliases: int
    max_fields: int


class _Exceeded(Exception):
    def __init__(self, what: str, limit: int) -> None:
        self.what = what
        self.limit = limit


class _Counter:
    def __init__(self, limits: OperationLimits, fragments: dict[str, FragmentDefinitionNode]) -> None:
        self.limits = limits
        self.fragments = fragments
        self.aliases = 0
        self.fields = 0

    def walk(self, selection_set: SelectionSetNode | None, depth: int, visiting: frozenset[str]) -> None:
        if selection_set is None:
            return
        for selection in selection_set.selections:
            if isinstance(selection, FieldNode):
                if selection.name.value.startswith("__"):
                    continue
                self.fields += 1
                if selection.alias is not None:
                    self.aliases += 1
                if depth + 1 > self.limits.max_depth:
                    raise _Exceeded("depth", self.limits.max_depth)
                if self.fields > self.limits.max_fields:
                    raise _Exceeded("fields", self.limits.max_fields)
                if self.aliases > self.limits.max_aliases:
                    raise _Exceeded("aliases", self.limits.max_aliases)
                self.walk(selection.selection_set, depth + 1, visiting)
            elif isinstance(selection, InlineFragmentNode):
                self.walk(selection.selection_set, depth, visiting)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                fragment = self.fragments.get(name)
                if fragment is not None and name not in visiting:  # cycles are another rule's error
                    self.walk(fragment.selection_set, depth, visiting | {name})


def limits_rule(limits: OperationLimits) -> type[ValidationRule]:
    class OperationLimitsRule(ValidationRule):
        def __init__(self, context: ValidationContext) -> None:
            super().__init__(context)

        def enter_document(self, node: DocumentNode, *_args: object) -> None:
            fragments = {d.name.value: d for d in node.definitions if isinstance(d, FragmentDefinitionNode)}
            for definition in node.definitions:
                if not isinstance(definition, OperationDefinitionNode):
                    continue
                try:
                    _Counter(limits, fragments).walk(definition.selection_set, 0, frozenset())
                except _Exceeded as exceeded:
                    self.report_error(
                        GraphQLError(
                            f"the operation exceeds the maximum {exceeded.what} of {exceeded.limit}",
                            definition,
                            extensions={"code": "LIMIT_EXCEEDED", "limit": exceeded.what},
                        )
                    )

    return OperationLimitsRule
