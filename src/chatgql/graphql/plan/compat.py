"""The planner's uses of graphql-core's and Strawberry's non-public API, in one place.

Each one buys exactness more than speed: the plan must group, skip and call
exactly as the executor it replaces does, and the surest way is to call the
same code. Both libraries are pinned exactly in pyproject.toml, and
tests/test_planner_differential.py (which compares every answer against
graphql-core's executor) fails if an upgrade changes what these do;
test_planner_pins_the_versions_it_was_written_for fails on any upgrade.

- graphql.execution.collect_fields.collect_fields / collect_subfields: the
  executor's own field collection (response-name grouping, fragment type
  conditions, @skip/@include). A plan is compiled from their output, so its
  grouping and order are graphql-core's by construction.
- graphql.execution.collect_fields.FragmentDetails: what collect_fields takes
  for each fragment.
- StrawberryResolver's self/root/parent/info parameters and wrapped_func, the
  schema converter's exception handlers, and strawberry.types.arguments'
  convert_arguments: to call a resolver the way Strawberry's generated
  `_resolver` does (get_arguments in strawberry/schema/schema_converter.py),
  without building a Strawberry Info and a GraphQLResolveInfo per call.
- What convert_arguments does to an argument whose type is a scalar (optional or not, not
  Maybe, not a GlobalID): nothing, under the name the schema's name converter gives it
  (plain_arguments). A plan passes such arguments on as graphql-core coerced them, without
  converting each name to camelCase and walking the type on every call.
- The names of a field's resolver functions as Strawberry builds them
  (`_get_basic_result` marked `_is_default`, `_resolver`, `_async_resolver`,
  and `lambda event, *_, **__: event` for a subscription's root field): only
  those shapes are planned, anything else falls back.
- The qualified name of the is_type_of Strawberry gives a type that implements
  an interface (`GraphQLCoreConverter.from_object.<locals>...`): an isinstance
  check that never reads its info, so a plan can call it with none.
- strawberry.types.cast.TYPE_CAST_ATTRIBUTE (`__as_strawberry_type__`), and an object type's
  definition (`origin`, `concrete_of`) in its extensions: an instance of exactly the class a
  type was defined by, not cast to another, is that type (what Strawberry's is_type_of and an
  interface's resolve_type answer for it), so a plan completes it without asking them
  (plain_class, cast_of).
- The qualified name of the resolve_type Strawberry gives an interface
  (`GraphQLCoreConverter.from_interface.<locals>._get_resolve_type.<locals>.resolve_type`), and
  what it answers for an instance of exactly a class that implements the interface, not cast:
  that class's own definition's name (interface_type_name). A plan answers that without calling it.
- graphql-core's Executor.ensure_valid_runtime_type, called with a stand-in `self` holding only
  the schema (all it reads of self): the checks and error messages for what resolve_type
  answered, graphql-core's own (ensure_valid_runtime_type).
- strawberry.types.Info's `_raw_info` and `_field`: info.PlanInfo is an Info
  whose `_raw_info` is built on demand (see info.py).
"""

from __future__ import annotations

from typing import Any

import graphql
import strawberry
from graphql.execution.collect_fields import FragmentDetails, collect_fields, collect_subfields
from graphql.execution.executor import Executor
from strawberry.relay.types import GlobalID
from strawberry.scalars import is_scalar
from strawberry.types.arguments import convert_arguments
from strawberry.types.base import StrawberryMaybe, StrawberryOptional
from strawberry.types.cast import TYPE_CAST_ATTRIBUTE

GRAPHQL_CORE_VERSION = "3.3.2"
STRAWBERRY_VERSION = "0.341.2"

__all__ = [
    "FragmentDetails",
    "collect_fields",
    "collect_subfields",
    "convert_arguments",
    "strawberry_field",
    "resolver_call_shape",
    "has_exception_handlers",
    "is_default_resolver",
    "versions",
    "plain_class",
    "plain_arguments",
    "is_strawberry_resolve_type",
    "interface_type_name",
    "ensure_valid_runtime_type",
    "TYPE_CAST_ATTRIBUTE",
]


def versions() -> tuple[str, str]:
    """(graphql-core, strawberry) as installed."""
    from importlib.metadata import version

    return graphql.__version__, version("strawberry-graphql")


def strawberry_field(field_def: graphql.GraphQLField) -> Any:
    """The StrawberryField a graphql-core field was built from, or None."""
    return (field_def.extensions or {}).get("strawberry-definition")


def is_strawberry_type_check(is_type_of: Any) -> bool:
    """Whether an object type's is_type_of is the one Strawberry builds (isinstance; info unused)."""
    qualname = getattr(is_type_of, "__qualname__", "")
    return qualname.split(".<locals>")[0] == "GraphQLCoreConverter.from_object"


def plain_class(object_type: graphql.GraphQLObjectType) -> type | None:
    """The class a Strawberry object type was defined by, when an instance of exactly that class
    (not cast, see TYPE_CAST_ATTRIBUTE) can only be that type: not a generic's specialisation, not
    awaitable, not an exception (graphql-core would raise it). None otherwise."""
    definition: Any = (object_type.extensions or {}).get("strawberry-definition")
    origin = getattr(definition, "origin", None)
    if not isinstance(origin, type) or definition.concrete_of is not None or definition.is_graphql_generic:
        return None
    if object_type.is_type_of is not None and not is_strawberry_type_check(object_type.is_type_of):
        return None
    if hasattr(origin, "__await__") or issubclass(origin, BaseException) or hasattr(origin, TYPE_CAST_ATTRIBUTE):
        return None
    return origin


def plain_arguments(field: Any, scalar_registry: Any, config: Any) -> tuple[tuple[str, str], ...] | None:
    """(GraphQL name, Python name) of each of a field's arguments when convert_arguments would pass
    every one on unchanged (each a scalar, optional or not); None when any needs converting."""
    pairs = []
    for argument in field.arguments:
        type_ = argument.type
        while isinstance(type_, StrawberryOptional) and not isinstance(type_, StrawberryMaybe):
            type_ = type_.of_type
        if isinstance(type_, StrawberryMaybe) or type_ is GlobalID or not is_scalar(type_, scalar_registry):
            return None
        pairs.append((config.name_converter.from_argument(argument), argument.python_name))
    return tuple(pairs)


def is_strawberry_resolve_type(interface: graphql.GraphQLInterfaceType) -> bool:
    """Whether an interface's resolve_type is the one Strawberry builds (no custom resolve_type)."""
    qualname = getattr(interface.resolve_type, "__qualname__", "")
    return qualname == "GraphQLCoreConverter.from_interface.<locals>._get_resolve_type.<locals>.resolve_type"


def interface_type_name(interface: graphql.GraphQLInterfaceType, cls: type) -> str | None:
    """What Strawberry's resolve_type answers for an uncast instance of exactly cls: the name of
    cls's own definition when cls implements the interface's class and is not generic; else None
    (then resolve_type itself is asked)."""
    definition = (interface.extensions or {}).get("strawberry-definition")
    origin = getattr(definition, "origin", None)
    own: Any = getattr(cls, "__strawberry_definition__", None)
    if not isinstance(origin, type) or not issubclass(cls, origin) or getattr(own, "origin", None) is not cls:
        return None
    return None if own.is_graphql_generic else own.name


class _ExecutorSchema:
    """What Executor.ensure_valid_runtime_type reads of its executor: the schema."""

    __slots__ = ("schema",)

    def __init__(self, schema: graphql.GraphQLSchema) -> None:
        self.schema = schema


def ensure_valid_runtime_type(
    schema: graphql.GraphQLSchema, runtime_type_name: Any, return_type: Any, field_details: list, info: Any, result: Any
) -> graphql.GraphQLObjectType:
    """graphql-core's check of what resolve_type answered: the object type, or its GraphQLError."""
    return Executor.ensure_valid_runtime_type(
        _ExecutorSchema(schema),  # type: ignore[arg-type]
        runtime_type_name,
        return_type,
        field_details,
        info,
        result,
    )


def is_default_resolver(field_def: graphql.GraphQLField) -> bool:
    """A field without resolver: Strawberry's `_get_basic_result`, which reads the attribute."""
    return bool(getattr(field_def.resolve, "_is_default", False))


def has_exception_handlers(schema: strawberry.Schema, field: Any) -> bool:
    """Strawberry's field exception handlers (none in chatgql) change a resolver's call path."""
    return bool(schema.schema_converter._get_field_exception_handlers(field))


def resolver_call_shape(field: Any) -> tuple[Any, bool, tuple[str, ...], str | None] | None:
    """(function, pass source positionally, names taking the source, name taking info), or None
    when the resolver is not a plain function Strawberry calls with these (see get_arguments)."""
    resolver = field.base_resolver
    if resolver is None or not callable(resolver.wrapped_func):
        return None
    source_names = tuple(p.name for p in (resolver.root_parameter, resolver.parent_parameter) if p is not None)
    info = resolver.info_parameter
    return resolver.wrapped_func, resolver.self_parameter is not None, source_names, info.name if info else None
