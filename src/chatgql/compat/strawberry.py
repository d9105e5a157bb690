"""Strawberry's non-public API, as chatgql uses it (PINNED["strawberry-graphql"]).

Why the package exists, and how a pin moves: compat/__init__.py, docs/internals/compat.md."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeGuard, cast

import graphql
import strawberry
from strawberry.execution import optimized_is_awaitable
from strawberry.relay.types import GlobalID
from strawberry.scalars import is_scalar
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext, validate_document
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import BaseGraphQLTransportWSHandler
from strawberry.subscriptions.protocols.graphql_ws.handlers import BaseGraphQLWSHandler
from strawberry.types import Info, get_object_definition
from strawberry.types.arguments import convert_arguments
from strawberry.types.base import StrawberryMaybe, StrawberryOptional
from strawberry.types.cast import TYPE_CAST_ATTRIBUTE
from strawberry.types.private import is_private

__all__ = [
    "ExecutionContextBase",
    "core_schema",
    "strawberry_schema_of",
    "custom_context_kwargs",
    "provided_operation_name",
    "set_validation_result",
    "validate_document",
    "is_awaitable",
    "convert_arguments",
    "strawberry_field",
    "is_strawberry_type_check",
    "is_default_resolver",
    "is_strawberry_resolver",
    "is_event_passthrough",
    "has_exception_handlers",
    "resolver_call_shape",
    "plain_arguments",
    "split_arguments",
    "null_stays_null",
    "plain_class",
    "TYPE_CAST_ATTRIBUTE",
    "is_strawberry_resolve_type",
    "interface_type_name",
    "LazyInfo",
    "TransportWSHandlerBase",
    "LegacyWSHandlerBase",
    "forget_cancelled_init_timeout",
    "value_fields",
]


ExecutionContextBase = StrawberryGraphQLCoreExecutionContext
"""Strawberry's graphql-core executor (strawberry.schema.schema, not exported), the base of
acyclic.AcyclicExecutionContext and shared.SharedEventExecutor. Those override graphql-core's
Executor methods `execute_operation(serially)` and `build_per_event_executor(payload)` (one
execution per subscription event shared by its subscribers: speed) and read its `operation`,
`fragment_definitions`, `variable_values.coerced`, `root_value`, `abort_signal`, `is_awaitable`
and `schema`. An upgrade that renames a hook leaves the override uncalled: results are still right,
sharing silently stops (tests/graphql/test_shared_results.py and test_compat.py catch it)."""


def core_schema(schema: strawberry.Schema) -> graphql.GraphQLSchema:
    """The graphql-core schema a Strawberry schema built (`Schema._schema`): what validation and
    graphql-core's execute() take. Used by the direct paths (prepared.py, engine/plan/,
    engine/operation.py). Breaks if Strawberry renames it."""
    return schema._schema


def strawberry_schema_of(core: graphql.GraphQLSchema) -> Any:
    """The Strawberry schema that built a graphql-core schema (`_strawberry_schema`, which Strawberry
    sets on it), or None: how an executor finds chatgql's schema (its planner and shared results).
    If Strawberry stops setting it, events run through graphql-core unshared: slower, not wrong."""
    return getattr(core, "_strawberry_schema", None)


def custom_context_kwargs(schema: strawberry.Schema) -> dict[str, Any]:
    """The keyword arguments Strawberry passes graphql-core's execute() for its execution context
    class (`Schema._get_custom_context_kwargs`): prepared.execute_accepted calls execute() as
    Schema.execute does, without its per-request pipeline (speed: about a fifth of a send's CPU).
    Breaks if the method is renamed or its result changes meaning."""
    return schema._get_custom_context_kwargs(None)


def provided_operation_name(execution_context: Any) -> str | None:
    """The operationName the request carried (`ExecutionContext._provided_operation_name`), None if
    none: `operation_name` is Strawberry's guess when it is absent. engine/operation.ChatOperation refuses a
    document with several operations and no name (exactness: GraphQL's GetOperation rule)."""
    return execution_context._provided_operation_name


def set_validation_result(execution_context: Any, errors: list[graphql.GraphQLError]) -> None:
    """Hand Strawberry the validation errors an extension found (none: valid). Strawberry's
    _run_validation validates only while `pre_execution_errors` is None; engine/operation.ChatOperation
    validates off the event loop and skips documents accepted before (speed). If Strawberry stops
    honouring it, every document is validated twice and in the event loop."""
    execution_context.pre_execution_errors = errors


# strawberry.schema.schema.validate_document (not exported): graphql-core's validate() with the
# rules Strawberry adds, what Strawberry itself runs; validation.py runs it in a worker thread.

is_awaitable = cast("Callable[[Any], TypeGuard[Awaitable[Any]]]", optimized_is_awaitable)
"""strawberry.execution.optimized_is_awaitable (speed: a type check before inspect's), the
is_awaitable Strawberry gives graphql-core; annotated bool, it is the TypeGuard graphql-core asks
for. The direct paths pass the same one so they behave as Strawberry's executor."""

# strawberry.types.arguments.convert_arguments (not exported): what Strawberry's generated
# resolver calls to turn graphql-core's coerced arguments into the resolver's Python values.
# A plan calls it the same way (exactness).


def strawberry_field(field_def: graphql.GraphQLField) -> Any:
    """The StrawberryField a graphql-core field was built from (its `strawberry-definition`
    extension), or None."""
    return (field_def.extensions or {}).get("strawberry-definition")


def is_strawberry_type_check(is_type_of: Any) -> bool:
    """Whether an object type's is_type_of is the one Strawberry builds for a type implementing an
    interface (`GraphQLCoreConverter.from_object.<locals>...`): an isinstance check that never
    reads its info, so a plan can call it with none (speed). Another qualified name: no plan."""
    qualname = getattr(is_type_of, "__qualname__", "")
    return qualname.split(".<locals>")[0] == "GraphQLCoreConverter.from_object"


def value_fields(cls: type) -> dict[str, Any]:
    """The fields of a Strawberry object type that answer an attribute of the object (no resolver), by Python
    name -> Strawberry type; its strawberry.Private attributes left out (`strawberry.types.private.is_private`,
    not exported: the definition's fields include them). What the API checks its types against the records
    of models.py with, on import (graphql/types/)."""
    return {
        f.python_name: f.type
        for f in get_object_definition(cls, strict=True).fields
        if f.base_resolver is None and not is_private(f.type)
    }


def is_default_resolver(field_def: graphql.GraphQLField) -> bool:
    """A field without resolver: Strawberry's `_get_basic_result` (marked `_is_default`), which
    reads the attribute; a plan reads it itself (speed)."""
    return bool(getattr(field_def.resolve, "_is_default", False))


# The names of the functions Strawberry's schema converter makes a resolver field's `resolve`.
_STRAWBERRY_RESOLVERS = frozenset({"_resolver", "_async_resolver"})


def is_strawberry_resolver(field_def: graphql.GraphQLField) -> bool:
    """The field's resolve is Strawberry's generated `_resolver`/`_async_resolver` (get_arguments,
    then the resolver): only then may a plan call the resolver itself, the way they do."""
    return getattr(field_def.resolve, "__name__", None) in _STRAWBERRY_RESOLVERS


def is_event_passthrough(field_def: graphql.GraphQLField) -> bool:
    """A subscription root field's resolve is Strawberry's `lambda event, *_, **__: event`: per
    event, its value is the event itself."""
    return getattr(field_def.resolve, "__name__", None) == "<lambda>"


def has_exception_handlers(schema: strawberry.Schema, field: Any) -> bool:
    """Strawberry's field exception handlers (`schema_converter._get_field_exception_handlers`;
    none in chatgql) change a resolver's call path: such a field is not planned."""
    return bool(schema.schema_converter._get_field_exception_handlers(field))


def resolver_call_shape(field: Any) -> tuple[Any, bool, tuple[str, ...], str | None] | None:
    """(function, pass source positionally, names taking the source, name taking info), or None
    when the resolver is not a plain function Strawberry calls with these (StrawberryResolver's
    self/root/parent/info parameters and wrapped_func, as get_arguments in
    strawberry/schema/schema_converter.py uses them): a plan calls the resolver without building a
    Strawberry Info and a GraphQLResolveInfo per call (speed), with what Strawberry would pass."""
    resolver = field.base_resolver
    if resolver is None or not callable(resolver.wrapped_func):
        return None
    source_names = tuple(p.name for p in (resolver.root_parameter, resolver.parent_parameter) if p is not None)
    info = resolver.info_parameter
    return resolver.wrapped_func, resolver.self_parameter is not None, source_names, info.name if info else None


def null_stays_null(argument: Any) -> bool:
    """Whether Strawberry's convert_argument answers None for an argument given as null: every
    type but a Maybe (Some(None), or an error). A plan then passes a null (an omitted argument's
    default null, mostly) on without convert_arguments' walk (speed: sendMessage's attachments)."""
    type_ = argument.type
    while isinstance(type_, StrawberryOptional) and not isinstance(type_, StrawberryMaybe):
        type_ = type_.of_type
    return not isinstance(type_, StrawberryMaybe)


def plain_arguments(field: Any, scalar_registry: Any, config: Any) -> tuple[tuple[str, str], ...] | None:
    """(GraphQL name, Python name) of each of a field's arguments when Strawberry's
    convert_arguments would pass every one on unchanged (see split_arguments); None when any needs
    converting."""
    pairs, others = split_arguments(field, scalar_registry, config)
    return None if others else pairs


def split_arguments(
    field: Any, scalar_registry: Any, config: Any
) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, Any], ...]]:
    """A field's arguments in two: (GraphQL name, Python name) of those Strawberry's convert_arguments
    passes on unchanged (each a scalar, optional or not, not Maybe, not a GlobalID: what
    convert_arguments does to such an argument is nothing, under the name the schema's name converter
    gives it), and (GraphQL name, StrawberryArgument) of the others. A plan passes the first kind on as
    graphql-core coerced them, without converting each name and walking each type on every call, and
    converts the others only when a request gives them (speed: sendMessage, markRead, inbox, node)."""
    plain, others = [], []
    for argument in field.arguments:
        name = config.name_converter.from_argument(argument)
        type_ = argument.type
        while isinstance(type_, StrawberryOptional) and not isinstance(type_, StrawberryMaybe):
            type_ = type_.of_type
        if isinstance(type_, StrawberryMaybe) or type_ is GlobalID or not is_scalar(type_, scalar_registry):
            others.append((name, argument))
        else:
            plain.append((name, argument.python_name))
    return tuple(plain), tuple(others)


def plain_class(object_type: graphql.GraphQLObjectType) -> type | None:
    """The class a Strawberry object type was defined by (its definition's `origin`, not a
    generic's specialisation: `concrete_of`, `is_graphql_generic`), when an instance of exactly that
    class, not cast (TYPE_CAST_ATTRIBUTE, `__as_strawberry_type__`), can only be that type: what
    Strawberry's is_type_of and an interface's resolve_type answer for it. A plan completes such an
    object without asking them (speed). None otherwise (awaitable or exception classes too:
    graphql-core would treat those otherwise)."""
    definition: Any = (object_type.extensions or {}).get("strawberry-definition")
    origin = getattr(definition, "origin", None)
    if not isinstance(origin, type) or definition.concrete_of is not None or definition.is_graphql_generic:
        return None
    if object_type.is_type_of is not None and not is_strawberry_type_check(object_type.is_type_of):
        return None
    if hasattr(origin, "__await__") or issubclass(origin, BaseException) or hasattr(origin, TYPE_CAST_ATTRIBUTE):
        return None
    return origin


def is_strawberry_resolve_type(interface: graphql.GraphQLInterfaceType) -> bool:
    """Whether an interface's resolve_type is the one Strawberry builds (its qualified name,
    `GraphQLCoreConverter.from_interface.<locals>._get_resolve_type.<locals>.resolve_type`): then
    interface_type_name may answer for it."""
    qualname = getattr(interface.resolve_type, "__qualname__", "")
    return qualname == "GraphQLCoreConverter.from_interface.<locals>._get_resolve_type.<locals>.resolve_type"


def interface_type_name(interface: graphql.GraphQLInterfaceType, cls: type) -> str | None:
    """What Strawberry's resolve_type answers for an uncast instance of exactly cls: the name of
    cls's own definition (`__strawberry_definition__`) when cls implements the interface's class and
    is not generic; else None (then resolve_type itself is asked). Lets node/nodes run by plan."""
    definition = (interface.extensions or {}).get("strawberry-definition")
    origin = getattr(definition, "origin", None)
    own: Any = getattr(cls, "__strawberry_definition__", None)
    if not isinstance(origin, type) or not issubclass(cls, origin) or getattr(own, "origin", None) is not cls:
        return None
    return None if own.is_graphql_generic else own.name


class LazyInfo(Info):
    """A Strawberry Info (isinstance holds) whose graphql-core GraphQLResolveInfo (Info's private
    `_raw_info`) is built by `build_raw_info()` only when something reads it, and whose
    StrawberryField (Info's private `_field`) is given: plan/info.PlanInfo. Buys a plan's resolver
    calls their speed (most read only `context`). Breaks if Info stops reading these two."""

    def __init__(self, field: Any) -> None:  # an Info dataclass's own __init__ is not called
        self._field = field

    def build_raw_info(self) -> graphql.GraphQLResolveInfo:
        raise NotImplementedError

    @property
    def _raw_info(self) -> graphql.GraphQLResolveInfo:  # type: ignore[override]
        raw = self.__dict__.get("_raw")
        if raw is None:
            raw = self.__dict__["_raw"] = self.build_raw_info()
        return raw


TransportWSHandlerBase = BaseGraphQLTransportWSHandler
"""Strawberry's graphql-transport-ws handler, the base of handshake.TransportWSHandler, which
overrides `handle()` and `handle_connection_init(message)` and reads `view`, `context`,
`websocket`, `connection_init_received` and `connection_init_timeout_task` (a per-address cap on
sockets before connection_init: memory), and `handle_message(message)` (a message budget per
socket), `handle_subscribe(message)` (the subscription limit's coded error), reading `operations`,
`max_subscriptions_per_connection` and `connection_acknowledged`. A renamed hook leaves the cap
uncounted. Parked subscriptions (engine/parked.py, memory per idle websocket) rely on
`run_operation(operation)` (the base's, run again at the subscription's end), `cleanup_operation(id)`
(overridden: a parked operation has no task to cancel), `_task_done`, `handle_task_exception`, and
Strawberry's `Operation`: its `task` (None while parked), `completed` (set while parked, so that
the base's `complete` after a run that parked is dropped), `send_next` and `send_operation_message`.
Were `completed` no longer checked, a parked subscription would get a `complete` at its subscribe
(tests/graphql/test_parked.py sees it)."""

LegacyWSHandlerBase = BaseGraphQLWSHandler
"""Strawberry's legacy graphql-ws handler, the base of handshake.LegacyWSHandler (the same hooks
and attributes, `handle_start(message)` and `tasks` for the subscription limit, and its own
connection_init deadline, which Strawberry gives only the other). Parked subscriptions rely on
`handle_async_results(id, query, operation_name, variables)`'s messages (handshake.py's
`_run_parkable` sends the same ones), `tasks` and `subscriptions` by id, `cleanup_operation(id)`
(overridden), `send_data_message(result, id)` and `send_message`."""


def forget_cancelled_init_timeout(handler: Any) -> None:
    """Once connection_init is handled, drop the graphql-transport-ws handler's finished
    `connection_init_timeout_task` instead of keeping it as long as the connection (memory per idle
    websocket). Breaks (keeps it again) if Strawberry renames the two attributes."""
    task = handler.connection_init_timeout_task
    if handler.connection_init_received and task is not None and (task.done() or task.cancelling()):
        handler.connection_init_timeout_task = None
