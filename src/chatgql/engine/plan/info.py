"""The `info` a planned resolver call receives.

Strawberry builds, per resolver call, a graphql-core GraphQLResolveInfo and a
Strawberry Info around it. chatgql's resolvers mostly read `info.context`;
a few read `info.selected_fields` (the inbox, to preload last messages) or
`info.path`. PlanInfo is a Strawberry Info (isinstance holds) whose context is
a plain attribute, and whose GraphQLResolveInfo is built only when something
else is asked for, from the same pieces graphql-core would have used;
selected_fields is computed once per plan and assignment of the variables it
reads.
"""

from __future__ import annotations

from typing import Any

from graphql import GraphQLResolveInfo
from graphql.pyutils import Path
from strawberry.types.nodes import convert_selections

from ...compat.strawberry import LazyInfo, is_awaitable


class PlanInfo(LazyInfo):
    def __init__(self, run: Any, field: Any, path: Path) -> None:  # noqa: D107
        super().__init__(field.strawberry_field)
        self._run = run
        self._plan_field = field
        self._path = path

    @property
    def context(self) -> Any:
        return self._run.context

    @property
    def path(self) -> Path:
        return self._path

    @property
    def selected_fields(self) -> list[Any]:
        """Strawberry's answer, kept by the plan per assignment of the variables it reads
        (compile.FieldPlan.selected_fields): the same list each time, not to be modified."""
        return self._plan_field.selected_fields(
            self._run.variables.coerced, lambda: convert_selections(self._raw_info, self._plan_field.nodes)
        )

    @property
    def prebuilt(self) -> Any:
        """What the field's prebuilder made of this plan's selection (compile.PREBUILT), or None."""
        return self._plan_field.prebuilt

    def build_raw_info(self) -> GraphQLResolveInfo:
        """What graphql-core would have built for this field."""
        return resolve_info(self._run, self._plan_field, self._path)


def resolve_info(run: Any, field: Any, path: Path) -> GraphQLResolveInfo:
    """The GraphQLResolveInfo graphql-core would pass for this field, from the plan's pieces."""
    return GraphQLResolveInfo(
        field.field_name,
        field.nodes,
        field.return_type,
        field.parent_type,
        path,
        run.schema,
        run.plan.fragment_definitions,
        None,
        run.plan.operation,
        run.variables.coerced,  # what Strawberry's resolve info carries
        run.context,
        is_awaitable,
        None,
        None,  # type: ignore[arg-type]  # graphql-core's async helpers: plans run no graphql-core executor
    )
