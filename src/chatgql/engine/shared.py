"""One execution per subscription event and document, not one per subscriber.

Every subscriber of an event runs the same selection set on the same event.
When that selection reads only the event itself and what is read once per
event for all its subscribers (seen, seenByCount and seenBy: loaders.EventReads),
and nothing that depends on who is asking (see
Sharing, derived by the schema from its Subscription type: a field without a resolver, or a
resolver marked PER_EVENT, engine/registry.py), the first subscriber's result is reused by the others holding
the same document and variables. Any other selection (a directive other than
@include/@skip, a field not sharable) is executed per subscriber as before, as
is any result that carries errors.
Either way an event is executed by plan when the planner has one for the
operation (engine/plan/, Planner.execute_event), else by graphql-core.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any, NamedTuple, cast

from graphql import (
    ExecutionResult,
    FieldNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    OperationType,
    SelectionSetNode,
)
from strawberry.types.base import StrawberryOptional, get_object_definition
from strawberry.types.private import is_private
from strawberry.utils.str_converters import to_camel_case

from ..compat import strawberry as strawberry_compat
from .acyclic import AcyclicExecutionContext
from .registry import PER_EVENT_KEY


class Sharing(NamedTuple):
    """Fields, by parent type, whose value is the same for every subscriber of an event (sharable),
    and the type each sharable object field leads to (child): derived from the types (a new field is
    sharable, or not, by its definition). The schema derives it from its Subscription type."""

    sharable: dict[str, frozenset[str]]
    child: dict[tuple[str, str], str]


def derive(root: type) -> Sharing:
    """Sharing from root (Subscription) down: a type's sharable fields are its fields without a
    resolver (read from the object an event built, the same for every subscriber) and the resolvers
    marked PER_EVENT (engine/registry.py); an object field among them leads to its type."""
    sharable: dict[str, frozenset[str]] = {}
    child: dict[tuple[str, str], str] = {}
    todo = [root]
    while todo:
        cls = todo.pop()
        definition = get_object_definition(cls, strict=True)
        if definition.name in sharable:
            continue
        names = set()
        for f in definition.fields:
            if is_private(f.type) or (f.base_resolver is not None and not f.metadata.get(PER_EVENT_KEY)):
                continue
            name = f.graphql_name or to_camel_case(f.python_name)
            names.add(name)
            target = f.type.of_type if isinstance(f.type, StrawberryOptional) else f.type
            if get_object_definition(target) is not None:
                child[(definition.name, name)] = get_object_definition(target, strict=True).name
                todo.append(cast(type, target))
        sharable[definition.name] = frozenset(names)
    return Sharing(sharable, child)


VARIABLE_ONLY_DIRECTIVES = frozenset({"include", "skip"})  # their value is part of the key


def _sharable(
    selection_set: SelectionSetNode | None, type_name: str, fragments: dict[str, Any], sharing: Sharing, depth: int = 0
) -> bool:
    if selection_set is None or depth > 8:
        return selection_set is None
    allowed = sharing.sharable.get(type_name)
    if allowed is None:
        return False
    for node in selection_set.selections:
        if any(d.name.value not in VARIABLE_ONLY_DIRECTIVES for d in node.directives or ()):
            return False
        if isinstance(node, FieldNode):
            name = node.name.value
            if name == "__typename":
                continue
            if name not in allowed:
                return False
            child = sharing.child.get((type_name, name))
            if (child is None) != (node.selection_set is None):
                return False
            if child is not None and not _sharable(node.selection_set, child, fragments, sharing, depth + 1):
                return False
        elif isinstance(node, InlineFragmentNode):
            if node.type_condition is not None and node.type_condition.name.value != type_name:
                return False
            if not _sharable(node.selection_set, type_name, fragments, sharing, depth + 1):
                return False
        elif isinstance(node, FragmentSpreadNode):
            fragment = fragments.get(node.name.value)
            if fragment is None or fragment.type_condition.name.value != type_name:
                return False
            if not _sharable(fragment.selection_set, type_name, fragments, sharing, depth + 1):
                return False
        else:
            return False
    return True


class SharedResults:
    """Recent event results: (event, operation, variables) -> ExecutionResult, LRU-bounded.

    Entries hold the event and the operation node, so the ids in their keys
    cannot be reused by other objects while the entry exists.
    """

    def __init__(self, max_entries: int = 256) -> None:
        self._max = max_entries
        self._entries: OrderedDict[tuple, tuple[object, object, ExecutionResult | asyncio.Future]] = OrderedDict()

    def get(self, key: tuple) -> ExecutionResult | asyncio.Future | None:
        """The result, or the future of one a subscriber is computing (in flight)."""
        found = self._entries.get(key)
        return None if found is None else found[2]

    def put(self, key: tuple, event: object, operation: object, result: ExecutionResult | asyncio.Future) -> None:
        self._entries[key] = (event, operation, result)
        if len(self._entries) > self._max:
            self._entries.popitem(last=False)


class _Done:
    """Stands in for a per-event executor whose result is already known."""

    __slots__ = ("result",)

    def __init__(self, result: ExecutionResult) -> None:
        self.result = result

    def execute_operation(self, serially: bool | None = None) -> ExecutionResult:
        return self.result


class _InFlight:
    """Stands in for a per-event executor while another subscriber computes the same result (its
    selection awaits a read, e.g. the event's seen counts): waits for that result. One that ended with
    errors, or not at all, is not shared: then this subscriber executes its own."""

    __slots__ = ("future", "executor")

    def __init__(self, future: asyncio.Future, executor: SharedEventExecutor) -> None:
        self.future = future
        self.executor = executor

    def execute_operation(self, serially: bool | None = None) -> Any:
        return self._wait(serially)

    async def _wait(self, serially: bool | None) -> ExecutionResult:
        try:
            result = await asyncio.shield(self.future)  # shield: leaving must not cancel it for others
        except Exception:  # noqa: BLE001 - the other subscriber's failure; this one tries its own
            result = None
        if result is not None and not result.errors:
            return result
        own = self.executor._execute(serially)
        return await own if self.executor.is_awaitable(own) else own


class SharedEventExecutor(AcyclicExecutionContext):
    """Strawberry's executor; per subscription event, reuses a result when the selection allows it."""

    _shared: SharedResults | None = None  # set on per-event executors of sharable operations

    def build_per_event_executor(self, payload: Any) -> Any:
        shared = self._shared_results()
        if shared is not None:
            key = self._key(payload)
            found = shared.get(key) if key is not None else None
            if isinstance(found, ExecutionResult):
                return _Done(found)  # no executor to copy: execute_subscription_event only calls this
            executor = cast("SharedEventExecutor", super().build_per_event_executor(payload))  # a copy of self
            executor._shared = shared
            return executor if found is None else _InFlight(found, executor)
        executor = cast("SharedEventExecutor", super().build_per_event_executor(payload))
        executor._shared = shared
        return executor

    def _execute(self, serially: bool | None) -> Any:
        """A subscription event by plan when the planner has one (engine/plan/), else graphql-core."""
        if self.operation.operation is OperationType.SUBSCRIPTION and self.abort_signal is None:
            planner = getattr(strawberry_compat.strawberry_schema_of(self.schema), "planner", None)
            if planner is not None:
                result = planner.execute_event(self)
                if result is not None:
                    return result
        return super().execute_operation(serially)

    def _key(self, payload: Any) -> tuple | None:
        source = getattr(payload, "source", None)
        if source is None:
            return None
        try:
            key = (id(source), id(self.operation), tuple(sorted(self.variable_values.coerced.items())))
            hash(key)
        except TypeError:  # a variable value that is not hashable: execute as usual
            return None
        return key

    def _shared_results(self) -> SharedResults | None:
        schema = strawberry_compat.strawberry_schema_of(self.schema)
        sharing: Sharing | None = getattr(schema, "sharing", None)
        if sharing is None:
            return None
        verdict = self.__dict__.get("_verdict")
        if verdict is None:
            verdict = self._verdict = _sharable(
                self.operation.selection_set, "Subscription", self.fragment_definitions, sharing
            )
        if not verdict:
            return None
        return getattr(schema, "shared_results", None)

    def execute_operation(self, serially: bool | None = None) -> Any:
        shared = self._shared
        key = self._key(self.root_value) if shared is not None else None
        if shared is None or key is None:
            return self._execute(serially)
        source = self.root_value.source
        found = shared.get(key)
        if isinstance(found, ExecutionResult):
            return found
        if found is not None:
            return _InFlight(found, self).execute_operation(serially)
        result = self._execute(serially)
        if self.is_awaitable(result):
            # In flight: the event's other subscribers wait for this one instead of executing it too.
            future = asyncio.ensure_future(result)
            shared.put(key, source, self.operation, future)

            async def store() -> Any:
                done = await asyncio.shield(future)
                if not done.errors:
                    shared.put(key, source, self.operation, done)
                return done

            return store()
        if not result.errors:
            shared.put(key, source, self.operation, result)
        return result
