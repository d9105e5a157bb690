"""Running a plan: graphql-core's execution algorithm, minus the per-field interpretation.

The functions here mirror graphql-core 3.3's Executor (execute_fields,
execute_fields_serially, complete_value and its list/leaf/object cases,
handle_field_error, CollectedErrors) step for step, in the same order, with
the same coroutines gathered at the same points (gather_with_cancel for
siblings, engine/gather.py's, which graphql-core's executor uses too; a single
awaitable awaited directly). That is what keeps the answer
identical, including the order of errors and which errors survive non-null
propagation, and what keeps DataLoader batching as it was: every field of every
item of a list is started before anything is awaited, so loaders see the whole
list at once. What they do not do is look anything up per field: the field
definition, resolver, argument values, serialiser and nullability were decided
when the plan was compiled (compile.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from graphql import GraphQLError, located_error
from graphql.pyutils import Path, Undefined, inspect, is_iterable
from orjson import Fragment

from ...compat import graphql_core as graphql_compat
from ...compat import strawberry as strawberry_compat
from ...compat.strawberry import is_awaitable
from ..gather import gather_with_cancel
from .info import resolve_info

_background: set[asyncio.Future] = set()  # settling awaitables abandoned by an error (see settle)


class Run:
    """One execution of a plan: context, coerced variables, collected errors."""

    __slots__ = ("schema", "plan", "context", "variables", "errors", "_error_positions")

    def __init__(self, schema: Any, plan: Any, context: Any, variables: Any) -> None:
        self.schema = schema  # graphql-core's GraphQLSchema
        self.plan = plan
        self.context = context
        self.variables = variables  # graphql-core VariableValues
        self.errors: list[GraphQLError] = []
        self._error_positions: set[Path | None] = set()

    def add_error(self, error: GraphQLError, path: Path | None) -> None:
        """graphql-core's CollectedErrors.add: nothing below a position already nulled."""
        positions = self._error_positions
        at = path
        while at is not None:
            if at in positions:
                return
            at = at.prev
        if None in positions:
            return
        positions.add(path)
        self.errors.append(error)

    def field_error(self, raw: Exception, field: Any, path: Path, non_null: bool) -> None:
        """graphql-core's handle_field_error: raise towards the nearest nullable parent, or record."""
        error = located_error(raw, field.nodes, path.as_list())
        if non_null:
            raise error
        self.add_error(error, path)


def settle(awaitables: list[Awaitable[Any]]) -> None:
    """Let sibling awaitables of a failed field finish in the background (Executor.settle_in_background)."""
    future = asyncio.gather(*awaitables, return_exceptions=True)
    _background.add(future)
    future.add_done_callback(_background.discard)


FieldRunner = Callable[[Run, Any, "Path | None"], Any]


def execute_fields(run: Run, fields: tuple, source: Any, path: Path | None) -> Any:
    """Executor.execute_fields: every field started, awaitables gathered together."""
    results: dict[str, Any] = {}
    awaitable_keys: list[str] = []
    try:
        for key, runner, _ in fields:
            result = runner(run, source, path)
            results[key] = result
            if is_awaitable(result):
                awaitable_keys.append(key)
    except Exception:
        if awaitable_keys:
            settle([results[key] for key in awaitable_keys])
        raise
    if not awaitable_keys:
        return results
    return _gather_fields(results, awaitable_keys)


async def _gather_fields(results: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    if len(keys) == 1:
        key = keys[0]
        results[key] = await results[key]
    else:
        awaited = await gather_with_cancel(*(results[key] for key in keys))
        results.update(zip(keys, awaited, strict=True))
    return results


def execute_fields_serially(run: Run, fields: tuple, source: Any, path: Path | None) -> Any:
    """Executor.execute_fields_serially (mutations): each root field finishes before the next starts."""
    results: dict[str, Any] = {}
    for index, (key, runner, _) in enumerate(fields):
        result = runner(run, source, path)
        if is_awaitable(result):
            return _serially_from(run, fields, index, result, results, source, path)
        results[key] = result
    return results


async def _serially_from(
    run: Run, fields: tuple, index: int, pending: Any, results: dict, source: Any, path: Path | None
) -> dict[str, Any]:
    results[fields[index][0]] = await pending
    for key, runner, _ in fields[index + 1 :]:
        result = runner(run, source, path)
        if is_awaitable(result):
            result = await result
        results[key] = result
    return results


# --- completion: one function per output type, built at compile time --------------------------
# A completer takes (run, result, path) and returns the completed value or an awaitable of it;
# it raises where graphql-core's complete_value raises.

Completer = Callable[[Run, Any, Path], Any]


# An object completer may carry `fast = (cls, execute)` (object_completer): for a value of exactly
# type cls that is not cast (strawberry_compat.plain_class), completing it is execute(run, value, path), and
# execute returns a dict or a coroutine. Its callers (list items, field results) use that to skip
# the questions whose answers the type already gives (awaitable? an exception? null? is_type_of?).
_CAST = strawberry_compat.TYPE_CAST_ATTRIBUTE


def non_null_completer(inner: Completer, parent: str, field_name: str) -> Completer:
    message = f"Cannot return null for non-nullable field {parent}.{field_name}."

    def complete(run: Run, result: Any, path: Path) -> Any:
        if isinstance(result, Exception):
            raise result
        if result is None or result is Undefined:
            raise TypeError(message)
        return inner(run, result, path)

    fast = getattr(inner, "fast", None)
    if fast is not None:
        complete.fast = fast  # type: ignore[attr-defined]  # a value of that class is not null
    return complete


def leaf_completer(leaf_type: Any) -> Completer:
    coerce = leaf_type.coerce_output_value

    def complete(run: Run, result: Any, path: Path) -> Any:
        if isinstance(result, Exception):
            raise result
        if result is None or result is Undefined:
            return None
        coerced = coerce(result)
        if coerced is Undefined or coerced is None:
            raise TypeError(
                f"Expected `{inspect(leaf_type)}.coerce_output_value({inspect(result)})`"
                f" to return non-nullable value, returned: {inspect(coerced)}"
            )
        return coerced

    return complete


def object_completer(
    execute: Callable[[Run, Any, Path], Any], object_type: Any = None, plain_class: type | None = None
) -> Completer:
    """execute: the object's fields (codegen.object_executor: execute_fields, unrolled).
    object_type: given when it has an is_type_of (Strawberry gives one to every type that
    implements an interface, e.g. Node): asked first, as complete_object_value does.
    plain_class: strawberry_compat.plain_class of the type, or None (then no fast path)."""
    completer = _object_completer(execute, object_type)
    if plain_class is not None:
        completer.fast = (plain_class, execute)  # type: ignore[attr-defined]
    return completer


def _object_completer(execute: Callable[[Run, Any, Path], Any], object_type: Any) -> Completer:
    is_type_of = None if object_type is None else object_type.is_type_of

    def complete(run: Run, result: Any, path: Path) -> Any:
        if isinstance(result, Exception):
            raise result
        if result is None or result is Undefined:
            return None
        return execute(run, result, path)

    if is_type_of is None:
        return complete

    def complete_checked(run: Run, result: Any, path: Path) -> Any:
        if isinstance(result, Exception):
            raise result
        if result is None or result is Undefined:
            return None
        # Strawberry's is_type_of is an isinstance check that never reads info (compile.py refuses others).
        if not is_type_of(result, None):
            raise GraphQLError(f"Expected value of type '{object_type.name}' but got: {inspect(result)}.")
        return execute(run, result, path)

    return complete_checked


def abstract_completer(
    abstract: Any, completers: dict[str, Completer], known: dict[type, Any], field: Any, details: list
) -> Completer:
    """complete_abstract_value for an interface: which object type the value is, then that type's
    completer (object_completer: is_type_of, then its fields). completers: per possible type's
    name. known: class -> its type's fields' executor, for the classes whose answer the plan knows
    (strawberry_compat.interface_type_name; only for a value of exactly that class, not cast). Any other
    value asks the interface's resolve_type as graphql-core does, with the field's resolve info,
    and graphql-core's checks of its answer (graphql_compat.ensure_valid_runtime_type)."""
    resolve_type = abstract.resolve_type

    def complete(run: Run, result: Any, path: Path) -> Any:
        if isinstance(result, Exception):
            raise result
        if result is None or result is Undefined:
            return None
        execute = known.get(type(result))
        if execute is not None and getattr(result, _CAST, None) is None:
            return execute(run, result, path)
        info = resolve_info(run, field, path)
        runtime = resolve_type(result, info, abstract)
        if is_awaitable(runtime):
            return _complete_resolved_later(run, runtime, result, path, info)
        object_type = graphql_compat.ensure_valid_runtime_type(run.schema, runtime, abstract, details, info, result)
        return completers[object_type.name](run, result, path)

    async def _complete_resolved_later(run: Run, runtime: Any, result: Any, path: Path, info: Any) -> Any:
        name = await runtime
        object_type = graphql_compat.ensure_valid_runtime_type(run.schema, name, abstract, details, info, result)
        completed = completers[object_type.name](run, result, path)
        if is_awaitable(completed):
            return await completed
        return completed

    return complete


def list_completer(item: Completer, item_non_null: bool, field: Any) -> Completer:
    """complete_list_value / complete_iterable_value / complete_list_item_value."""
    fast = getattr(item, "fast", None)
    if fast is not None:
        return _object_list_completer(item, item_non_null, field, *fast)
    message = f"Expected Iterable, but did not find one for field '{field.parent_name}.{field.field_name}'."

    def complete(run: Run, result: Any, path: Path) -> Any:
        if isinstance(result, Exception):
            raise result
        if result is None or result is Undefined:
            return None
        if not is_iterable(result):
            raise GraphQLError(message)
        completed: list[Any] = []
        awaitable_indices: list[int] = []
        iterator = iter(result)
        index = 0
        try:
            for value in iterator:
                item_path = Path(path, index, None)
                if type(value) is Fragment:  # an item's answer, already encoded (compile.PREBUILT)
                    completed.append(value)
                elif is_awaitable(value):
                    completed.append(_complete_awaitable_item(run, item, value, item_path, item_non_null, field))
                    awaitable_indices.append(index)
                else:
                    try:
                        done = item(run, value, item_path)
                        if is_awaitable(done):
                            completed.append(_await_item(run, done, item_path, item_non_null, field))
                            awaitable_indices.append(index)
                        else:
                            completed.append(done)
                    except Exception as raw:
                        run.field_error(raw, field, item_path, item_non_null)
                        completed.append(None)
                index += 1
        except Exception:
            pending = [completed[i] for i in awaitable_indices]
            pending.extend(v for v in iterator if is_awaitable(v))
            if pending:
                settle(pending)
            raise
        if not awaitable_indices:
            return completed
        return _gather_items(completed, awaitable_indices)

    return complete


def _object_list_completer(item: Completer, item_non_null: bool, field: Any, cls: type, execute: Any) -> Completer:
    """list_completer for a list of objects: an item of exactly the object's class (a page's
    nodes) is completed by its fields' executor straight away; any other item as list_completer
    does. The same steps in the same order, minus the questions the item's type answers."""
    message = f"Expected Iterable, but did not find one for field '{field.parent_name}.{field.field_name}'."

    def complete(run: Run, result: Any, path: Path) -> Any:
        if isinstance(result, Exception):
            raise result
        if result is None or result is Undefined:
            return None
        if not is_iterable(result):
            raise GraphQLError(message)
        completed: list[Any] = []
        awaitable_indices: list[int] = []
        iterator = iter(result)
        index = 0
        try:
            for value in iterator:
                item_path = Path(path, index, None)
                if type(value) is cls and getattr(value, _CAST, None) is None:
                    try:
                        done = execute(run, value, item_path)
                    except Exception as raw:
                        run.field_error(raw, field, item_path, item_non_null)
                        completed.append(None)
                    else:
                        if type(done) is dict:
                            completed.append(done)
                        else:
                            completed.append(_await_item(run, done, item_path, item_non_null, field))
                            awaitable_indices.append(index)
                elif type(value) is Fragment:  # an item's answer, already encoded (compile.PREBUILT)
                    completed.append(value)
                elif is_awaitable(value):
                    completed.append(_complete_awaitable_item(run, item, value, item_path, item_non_null, field))
                    awaitable_indices.append(index)
                else:
                    try:
                        done = item(run, value, item_path)
                        if is_awaitable(done):
                            completed.append(_await_item(run, done, item_path, item_non_null, field))
                            awaitable_indices.append(index)
                        else:
                            completed.append(done)
                    except Exception as raw:
                        run.field_error(raw, field, item_path, item_non_null)
                        completed.append(None)
                index += 1
        except Exception:
            pending = [completed[i] for i in awaitable_indices]
            pending.extend(v for v in iterator if is_awaitable(v))
            if pending:
                settle(pending)
            raise
        if not awaitable_indices:
            return completed
        return _gather_items(completed, awaitable_indices)

    return complete


async def _gather_items(completed: list[Any], indices: list[int]) -> list[Any]:
    if len(indices) == 1:
        index = indices[0]
        completed[index] = await completed[index]
    else:
        awaited = await gather_with_cancel(*(completed[i] for i in indices))
        for index, value in zip(indices, awaited, strict=True):
            completed[index] = value
    return completed


async def _await_item(run: Run, done: Any, path: Path, non_null: bool, field: Any) -> Any:
    try:
        return await done
    except Exception as raw:
        run.field_error(raw, field, path, non_null)
        return None


async def _complete_awaitable_item(
    run: Run, item: Completer, value: Any, path: Path, non_null: bool, field: Any
) -> Any:
    try:
        completed = item(run, await value, path)
        if is_awaitable(completed):
            completed = await completed
    except Exception as raw:
        run.field_error(raw, field, path, non_null)
        return None
    return completed


# --- fields -----------------------------------------------------------------------------------


def field_runner(field: Any, resolve: Callable[[Run, Any, Path], Any], complete: Completer) -> FieldRunner:
    """Executor.execute_field for one planned field: resolve, then complete, errors located here."""
    key, parent_name, non_null = field.key, field.parent_name, field.non_null
    fast = getattr(complete, "fast", None)
    if fast is not None:
        return _object_field_runner(field, resolve, complete, *fast)

    def run_field(run: Run, source: Any, parent_path: Path | None) -> Any:
        path = Path(parent_path, key, parent_name)
        try:
            result = resolve(run, source, path)
            if is_awaitable(result):
                return _complete_awaitable(run, field, complete, result, path, non_null)
            completed = complete(run, result, path)
            if is_awaitable(completed):
                return _await_completed(run, field, completed, path, non_null)
            return completed
        except Exception as raw:
            run.field_error(raw, field, path, non_null)
            return None

    return run_field


def _object_field_runner(
    field: Any, resolve: Callable[[Run, Any, Path], Any], complete: Completer, cls: type, execute: Any
) -> FieldRunner:
    """field_runner for a field of an object type: a result of exactly the object's class goes
    to its fields' executor straight away (see _object_list_completer)."""
    key, parent_name, non_null = field.key, field.parent_name, field.non_null

    def run_field(run: Run, source: Any, parent_path: Path | None) -> Any:
        path = Path(parent_path, key, parent_name)
        try:
            result = resolve(run, source, path)
            if type(result) is cls and getattr(result, _CAST, None) is None:
                completed = execute(run, result, path)
                if type(completed) is dict:
                    return completed
                return _await_completed(run, field, completed, path, non_null)
            if type(result) is Fragment:  # the object's answer, already encoded (compile.PREBUILT)
                return result
            if is_awaitable(result):
                return _complete_awaitable(run, field, complete, result, path, non_null)
            completed = complete(run, result, path)
            if is_awaitable(completed):
                return _await_completed(run, field, completed, path, non_null)
            return completed
        except Exception as raw:
            run.field_error(raw, field, path, non_null)
            return None

    return run_field


async def _complete_awaitable(
    run: Run, field: Any, complete: Completer, result: Any, path: Path, non_null: bool
) -> Any:
    try:
        completed = complete(run, await result, path)
        if is_awaitable(completed):
            completed = await completed
    except Exception as raw:
        run.field_error(raw, field, path, non_null)
        completed = None
    return completed


async def _await_completed(run: Run, field: Any, completed: Any, path: Path, non_null: bool) -> Any:
    try:
        return await completed
    except Exception as raw:
        run.field_error(raw, field, path, non_null)
        return None


def attribute_leaf_runner(field: Any, exact_types: frozenset[type], coerce: Any, slow: FieldRunner) -> FieldRunner:
    """A field without resolver whose value is a scalar or enum: read the attribute; a value of a
    type the serialiser returns unchanged (str for String/ID, bool for Boolean) is the answer as
    it is; any other value goes through the serialiser; anything unusual (None for a non-null
    field, an exception, a serialiser that refuses) takes the general way (`slow`)."""
    name, nullable = field.python_name, not field.non_null

    def run_field(run: Run, source: Any, parent_path: Path | None) -> Any:
        try:
            value = getattr(source, name)
        except Exception:
            return slow(run, source, parent_path)
        if type(value) in exact_types:
            return value
        if value is None:
            return None if nullable else slow(run, source, parent_path)
        if coerce is not None and not isinstance(value, BaseException):
            try:
                coerced = coerce(value)
            except Exception:
                return slow(run, source, parent_path)
            if coerced is not None and coerced is not Undefined:
                return coerced
        return slow(run, source, parent_path)

    return run_field


def typename_runner(name: str) -> FieldRunner:
    return lambda run, source, parent_path: name
