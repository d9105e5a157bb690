"""graphql-core's non-public API, as chatgql uses it (PINNED["graphql-core"]).

Why the package exists, and how a pin moves: compat/__init__.py, docs/internals/compat.md."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import graphql
from graphql.execution.collect_fields import FragmentDetails, collect_fields, collect_subfields
from graphql.execution.executor import Executor
from graphql.type.definition import GraphQLResolveInfoHelpers

__all__ = [
    "FragmentDetails",
    "collect_fields",
    "collect_subfields",
    "use_gather_with_cancel",
    "break_async_helpers_cycle",
    "ensure_valid_runtime_type",
]


# graphql.execution.collect_fields (FragmentDetails, collect_fields, collect_subfields), not exported by
# graphql.execution: the executor's own field collection (response-name grouping, fragment type
# conditions, @skip/@include). A plan (engine/plan/) is compiled from their output, so its grouping
# and order are graphql-core's by construction: exactness. An upgrade may rename the module or change
# the positional signature (schema, fragments, variables, type, operation/selection, hide-suggestions).


def use_gather_with_cancel(gather_with_cancel: Callable[..., Any]) -> None:
    """Have graphql-core's executor gather sibling fields and list items with chatgql's
    gather_with_cancel (engine/gather.py: a cancelled request leaves no coroutine
    unawaited). executor.py imports graphql-core's by name and looks it up as a module
    global at each gather: replaced there. Breaks if graphql-core moves its gathering
    elsewhere or stops calling it by that name (tests/test_compat.py checks the name is
    there; tests/adversarial/test_cancelled.py the effect)."""
    from graphql.execution import executor

    executor.gather_with_cancel = gather_with_cancel


def break_async_helpers_cycle(executor: Any) -> None:
    """Rebuild an executor's `async_helpers` (its gather_async_work and track_async_work bound
    methods) so they reach the executor through weak references (engine/acyclic.py).

    Buys memory: the tuple of bound methods is a cycle executor -> helpers -> method -> executor,
    so every operation's executor and ~25 containers waited for the collector (6,000 objects per
    young pass in a 2,000-subscription soak). Breaks if graphql-core renames the attribute or the
    methods, or starts keeping them elsewhere too (the executor then lives until a full pass)."""
    executor.async_helpers = GraphQLResolveInfoHelpers(
        gather=_WeakMethod(executor, "gather_async_work"), track=_WeakMethod(executor, "track_async_work")
    )


class _WeakMethod:
    """executor.<name>(...) through a weak reference to the executor. Slotted, and both helpers share
    one weakref.ref (CPython hands out the same one for a referent without a callback): ~150 bytes
    per executor, where a weakref.WeakMethod and a closure each took ~1.2 KB (memory per subscription,
    whose executor lives as long as it does)."""

    __slots__ = ("_executor", "_name")

    def __init__(self, executor: Any, name: str) -> None:
        self._executor = weakref.ref(executor)
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        executor = self._executor()
        assert executor is not None  # the executor outlives every call of its helpers
        return getattr(executor, self._name)(*args, **kwargs)


class _ExecutorSchema:
    """What Executor.ensure_valid_runtime_type reads of its executor: the schema."""

    __slots__ = ("schema",)

    def __init__(self, schema: graphql.GraphQLSchema) -> None:
        self.schema = schema


def ensure_valid_runtime_type(
    schema: graphql.GraphQLSchema, runtime_type_name: Any, return_type: Any, field_details: list, info: Any, result: Any
) -> graphql.GraphQLObjectType:
    """graphql-core's own check of what resolve_type answered (Executor.ensure_valid_runtime_type,
    called with a stand-in `self` holding only the schema, all it reads of self): the object type,
    or its GraphQLError with graphql-core's words (exactness for values a plan cannot type itself)."""
    return Executor.ensure_valid_runtime_type(
        _ExecutorSchema(schema),  # type: ignore[arg-type]
        runtime_type_name,
        return_type,
        field_details,
        info,
        result,
    )
