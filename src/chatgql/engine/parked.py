"""Idle subscriptions without a task: memory per idle websocket.

A subscription run the ordinary way is a task waiting in a chain of async
generators (Strawberry's result stream and its extension runner, graphql-core's
subscribe executor and its map iterator, the resolver), about 10 KB of frames
and objects per subscription, for as long as it waits, which for most of a chat's
subscriptions is nearly always.

A parked subscription keeps only its place in the Dispatcher (events/dispatch.py,
Subscription.park) and this small object. The websocket handlers
(handshake.py) run it as any other operation at its subscribe, through the
whole pipeline (schema.stream / schema.subscribe: the accepted document, its
price, the resolver's checks and registration); when the resolver finds
nothing to deliver it parks the Dispatcher subscription and returns, and the
handler sends nothing more (no `complete`): the operation stays open with no
task. The next event calls the Parked: the handler starts a task that
delivers what was buffered (deliver(): each event made into what the resolver
would have yielded, executed as graphql-core executes a subscription event, on
the operation's executor (built at its first wake-up and kept), its result shared with the event's other
subscribers as before, its errors processed as Strawberry's, then sent as
`next` / `data`), parks again, and ends. The subscription's failure (overflow,
delivery delay, the member removed, the stream interrupted) is not delivered
there: the pipeline is run again, its resolver raises the failure, and the
operation ends with the error and `complete` an ordinary subscription gets.
Only the registration, the document, the executor (once an event came) and the
price the subscription holds on its websocket live across wake-ups.

Which operations: a subscription whose single root field the API declares
parkable (registry.PARKABLE: messageNew without `cursors`, as resume replays
first and its state lives in the resolver's frame), its resolver iterating
registry.PARKING's events when it is set, in
a document that was accepted before (prepared.py: parsed and validated, shared
by every subscriber of the same text). Every other operation runs as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

from graphql import ExecutionResult as CoreExecutionResult
from graphql import FieldNode, OperationDefinitionNode, OperationType
from graphql.execution import execute_subscription_event
from strawberry.types import ExecutionResult

from ..compat import strawberry as strawberry_compat
from ..events.dispatch import ENDED, Subscription
from .registry import PARKABLE


def parkable(document: Any, operation_name: str | None) -> bool:
    """Whether the operation may park: a subscription of one root field the API declares parkable
    (registry.PARKABLE), no directive on it, none of the arguments that keep it from parking."""
    if document is None:
        return False
    found = None
    for definition in document.definitions:
        if not isinstance(definition, OperationDefinitionNode):
            continue
        if operation_name is None or (definition.name is not None and definition.name.value == operation_name):
            if found is not None:
                return False  # several operations: graphql-core says which error
            found = definition
    if found is None or found.operation is not OperationType.SUBSCRIPTION or found.directives:
        return False
    selections = found.selection_set.selections
    if len(selections) != 1 or not isinstance(selections[0], FieldNode):
        return False
    field = selections[0]
    excluded = PARKABLE.get(field.name.value)
    if excluded is None or field.directives:
        return False
    return not any(argument.name.value in excluded for argument in field.arguments or ())


class Parked:
    """One parkable operation's state across its runs (the handler keeps it while the operation is
    open). Called (it is what the Dispatcher subscription is parked with) at the next event: it
    calls ready(self), the handler's method that runs the operation again."""

    __slots__ = (
        "registration",
        "parked",
        "stopped",
        "slot",
        "operation",
        "document",
        "payload",
        "executor",
        "_ready",
    )

    def __init__(self, ready: Callable[[Parked], None], slot: object, operation: Any, document: Any) -> None:
        self._ready = ready
        self.document = document  # the accepted document (prepared.py): every event is executed on it
        # The resolver's event -> root value (set by it at its first run): what it would have yielded.
        self.payload: Callable[[dict, Any], Any] | None = None
        # The operation's executor, built at its first wake-up with events and kept until it ends (its
        # document, variables and context do not change): each event gets a copy (deliver()).
        self.executor: Any = None
        self.slot = slot  # the operation's ws_operation token (its price is held under it)
        # What the handler runs again: graphql-transport-ws, Strawberry's Operation (marked completed
        # while parked: handshake.py); graphql-ws, (id, query, operationName, variables).
        self.operation = operation
        self.registration: Any = None  # events.dispatch._Registration, once the resolver registered
        self.parked = False  # the last run ended by parking (the operation stays open)
        self.stopped = False  # the operation ended (complete, stop, socket closed): never park again

    def __call__(self) -> None:
        self._ready(self)

    @property
    def subscription(self) -> Subscription | None:
        return None if self.registration is None else self.registration.subscription

    async def events(
        self, register: Callable[[], Awaitable[Any]], payload: Callable[[dict, Any], Any]
    ) -> AsyncIterator[dict]:
        """What the resolver iterates: the buffered events, then it parks (the generator ends).
        register() makes the Dispatcher registration, at the first run only; payload(event, context)
        is what the resolver yields for an event (deliver() makes it the same way)."""
        self.parked = False
        self.payload = payload
        if self.registration is None:
            registration = await register()
            await registration.__aenter__()
            self.registration = registration
        sub = self.registration.subscription
        while True:
            event = sub.take()  # raises the subscription's failure
            if event is ENDED:
                return
            if event is None:
                self._park(sub)
                return
            yield event

    def _park(self, sub: Subscription) -> None:
        if not self.stopped:
            self.parked = True
            if not isinstance(self.operation, tuple):
                self.operation.completed = True
            sub.park(self)

    async def end(self) -> None:
        """The operation is over: out of the Dispatcher (once)."""
        self.stopped = True
        self.parked = False
        self.executor = None
        registration, self.registration = self.registration, None
        if registration is not None:
            registration.subscription.unpark()
            await registration.__aexit__(None, None, None)


async def deliver(
    parked: Parked,
    schema: Any,
    context: Any,
    variables: Any,
    operation_name: str | None,
    send: Callable[[ExecutionResult], Awaitable[None]],
) -> bool:
    """A parked operation woken by its events: each executed and sent as the operation's pipeline
    would (graphql-core's per-event execution on an executor of the operation, Strawberry's error
    processing, the protocol's `next` / `data`), without building that pipeline again: one executor
    per operation, built at its first wake-up with events and kept on the Parked, as graphql-core's
    subscribe builds one per subscription and copies it per event. Then it parks again (True).
    False: the subscription's failure comes next (or no executor could be built): the caller runs the
    operation's pipeline, whose resolver raises it, and the operation ends as an ordinary one ends."""
    sub = parked.subscription
    if sub is None or parked.payload is None:
        return False
    parked.parked = False
    executor: Any = parked.executor
    while True:
        if sub.failing():
            return False
        if executor is None and sub.has_events():
            executor = schema.execution_context_class.build(
                strawberry_compat.core_schema(schema),
                parked.document,
                None,
                context,
                variables,
                operation_name,
                middleware=None,
                is_awaitable=strawberry_compat.is_awaitable,
                **strawberry_compat.custom_context_kwargs(schema),
            )
            if isinstance(executor, list):
                return False  # (it was built at the subscribe with the same variables)
            parked.executor = executor
        event = sub.pop()
        if event is None:
            parked._park(sub)
            return True
        outcome = execute_subscription_event(executor.build_per_event_executor(parked.payload(event, context)))
        result = await outcome if strawberry_compat.is_awaitable(outcome) else cast("CoreExecutionResult", outcome)
        if result.errors:
            schema.process_errors(result.errors)
        await send(ExecutionResult(data=result.data, errors=result.errors))


async def after(previous: Any) -> None:
    """Wait for an operation's previous run to finish (its last message sent) before the next one sends."""
    if isinstance(previous, asyncio.Task) and not previous.done() and previous is not asyncio.current_task():
        await asyncio.wait([previous])


class _Idle:
    """What graphql-ws's `tasks` holds for a parked operation (Strawberry's handler counts and looks up
    operations there): a finished task's stand-in, one for all, instead of the last run's task and
    its coroutine kept (~600 bytes)."""

    __slots__ = ()

    def done(self) -> bool:
        return True

    def cancel(self) -> bool:
        return False

    def __await__(self) -> Any:
        return
        yield


IDLE: Any = _Idle()
