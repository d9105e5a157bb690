"""Websockets before connection_init: a deadline, and a count per client address.

A websocket costs the server memory from its handshake on, while
connection_init is what says who is there. Both protocols' handlers here
close a socket that sends no connection_init within ws_init_timeout_seconds
(4408, graphql-transport-ws's own code, used for the legacy graphql-ws
protocol too, which defines none), and count the sockets of each client
address still waiting for theirs: past max_unauthenticated_ws_per_address a
new one is closed at once with 4429.

And a socket the client just closed: a subscription's task may write its next
result after the client went (closed, or its TCP connection dropped) and before
the handler's read loop saw it. Every library on the way says so differently
(uvicorn's ClientDisconnected, Starlette's WebSocketDisconnect, or its
WebSocketDisconnected once the close was seen, websockets' InvalidState while
closing); the handlers' send_message turns each into Strawberry's
WebSocketDisconnected, the one its handlers expect for a closed socket, and the
operation ends quietly (logged at debug), its task without an exception (one kept
would hold the connection in a reference cycle). Before, each was an ERROR with a
traceback ("Exception in worker task", or asyncio's "Task exception was never
retrieved" for the legacy protocol): 51 of them in a 15-minute soak
(tests/adversarial/test_closed_sockets.py).

And what one socket may ask, once it is open (both protocols):

- messages: token buckets count every message the client sends, whatever its
  type (ping, pong, complete for an id that does not exist, subscribe past the
  limit) and however many came in one read: one per socket and one per user,
  shared by all of the user's sockets once connection_init said whose they are
  (both ws_messages_per_second, ws_messages_burst), and a more generous one per
  client address (ws_messages_per_address_*), all per process (MessageBudgets);
  past any of them the socket is closed with 4429 "Too many messages"
  (graphql-transport-ws's code for too many requests, which it defines for
  connection_init; the legacy protocol defines none and gets the same);
- operations: past max_subscriptions_per_connection at once, a subscribe
  (start) is answered with an error coded LIMIT_EXCEEDED, reason
  SUBSCRIPTIONS_PER_CONNECTION (Strawberry's own answer has no code);
- the token: the session ends when the connection_init token expires. The socket
  is closed with 4403 "Token expired" (graphql-ws's Forbidden, which its client
  retries, calling connectionParams again: the way to hand it a new token); an
  operation that runs before the close gets UNAUTHENTICATED (graphql/context.py). There is
  no refresh in-band: neither protocol has a message for it (a second
  connection_init is closed with 4429 by graphql-transport-ws's rules), so a
  client refreshes by connecting again with the new token, and resumes its
  subscriptions with messageNew(cursors:).

And an idle messageNew subscription has no task: both handlers park it
(engine/parked.py) and wake it at its events, with the same messages on the
wire as a subscription run the ordinary way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import suppress
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

from starlette.websockets import WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketDisconnected as SendAfterClose
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.types.execution import PreExecutionError
from websockets.exceptions import InvalidState

from ..compat.strawberry import LegacyWSHandlerBase, TransportWSHandlerBase, forget_cancelled_init_timeout
from ..edge.ratelimit import Bucket, RateLimiter
from ..errors import ChatError, Unauthenticated
from .parked import IDLE, Parked, after, deliver, parkable
from .persisted import Refused
from .registry import PARKING

log = logging.getLogger(__name__)

# The websocket operation this task runs (the handlers below set it to a token of their own): a
# subscription's price is held in its connection's context under it while the operation runs.
ws_operation: ContextVar[object | None] = ContextVar("ws_operation", default=None)


class SocketContext(Protocol):
    """What the handlers read of a connection's context (the API's graphql/context.Context)."""

    @property
    def viewer_id(self) -> str: ...

    subscription_costs: dict[object, int]


C = TypeVar("C", bound=SocketContext)  # the view's context type


# What a write to a socket that is gone (or going) raises, below Strawberry (OSError: uvicorn's ClientDisconnected).
_GONE = (WebSocketDisconnect, SendAfterClose, InvalidState, OSError)

INIT_TIMEOUT_CODE = 4408
INIT_TIMEOUT_REASON = "Connection initialisation timeout"
TOO_MANY_CODE = 4429
TOO_MANY_REASON = "Too many unauthenticated connections from this address"
FLOOD_CODE = 4429
FLOOD_REASON = "Too many messages"
TOKEN_EXPIRED_CODE = 4403
TOKEN_EXPIRED_REASON = "Token expired"
BANNED_CODE = 4403
BANNED_REASON = "Banned"
SUBSCRIPTION_LIMIT_REASON = "SUBSCRIPTIONS_PER_CONNECTION"


def subscription_limit_error(limit: int) -> dict[str, Any]:
    """The error a subscribe past the per-connection limit gets (a formatted GraphQL error)."""
    return {
        "message": f"Subscription limit reached: at most {limit} operations at once on one websocket",
        "extensions": {"code": "LIMIT_EXCEEDED", "reason": SUBSCRIPTION_LIMIT_REASON},
    }


class PendingSockets:
    """Websockets that have not completed connection_init, per client address (one process)."""

    def __init__(self, per_address: int) -> None:
        self.per_address = per_address  # 0: no limit
        self._counts: dict[str, int] = {}

    def admit(self, address: str) -> bool:
        count = self._counts.get(address, 0)
        if self.per_address and count >= self.per_address:
            return False
        self._counts[address] = count + 1
        return True

    def release(self, address: str) -> None:
        count = self._counts[address] - 1
        if count:
            self._counts[address] = count
        else:
            del self._counts[address]

    def __len__(self) -> int:
        return sum(self._counts.values())


class MessageBudgets:
    """The websocket message budgets sockets share (one process): per user and per client address."""

    def __init__(self, settings: Any) -> None:
        self.per_user = RateLimiter("websocket message", settings.ws_messages_per_second, settings.ws_messages_burst)
        self.per_address = RateLimiter(
            "websocket message", settings.ws_messages_per_address_per_second, settings.ws_messages_per_address_burst
        )

    def take(self, address: str, user: str | None) -> bool:
        """Take one message from the address's budget and the user's (when known): False past either."""
        if self.per_address.wait_for_token(address) is not None:
            return False
        return user is None or self.per_user.wait_for_token(user) is None


def _address(context: Any) -> str:
    request = getattr(context, "request", None)
    client = request.client if isinstance(request, WebSocket) else None
    return client.host if client is not None else ""


class _Pending:
    """Admission and release for a handler (view.pending is the view's PendingSockets)."""

    view: Any
    context: Any
    websocket: Any
    _pending_address: str | None = None

    async def _admitted(self) -> bool:
        address = _address(self.context)
        if not self.view.pending.admit(address):
            await self.websocket.close(code=TOO_MANY_CODE, reason=TOO_MANY_REASON)
            return False
        self._pending_address = address
        return True

    def _release(self) -> None:
        if self._pending_address is not None:
            self.view.pending.release(self._pending_address)
            self._pending_address = None


class _Session:
    """A socket's message budget and its token's end, for a handler (both protocols)."""

    view: Any
    context: Any
    websocket: Any
    _budget: Bucket | None = None
    _budget_user: str | None = None  # whose budget the socket shares, once connection_init said
    _budget_address: str | None = None
    _flooded = False
    _expiry: asyncio.TimerHandle | None = None
    _ending: asyncio.Task | None = None
    _present: Any = None  # the viewer, counted online (events/presence.py) while the session lasts
    _watched: str | None = None  # the viewer, whose app-wide ban ends this session (edge/bans.py)

    async def _within_budget(self) -> bool:
        """Take one message from the budgets (the socket's, its address's, its user's); past one,
        close the socket (once) and say no.

        Each message first waits its turn in the event loop: what one read brought may be many
        messages, and taking them needs no wait, so a flood would be handled to the end before
        anyone else was served."""
        await asyncio.sleep(0)
        if self._flooded:
            return False
        if self._budget is None:
            settings = self.view.deps.settings
            self._budget = Bucket(settings.ws_messages_per_second, settings.ws_messages_burst)
            self._budget_address = _address(self.context)
        if self._budget.take() and self.view.budgets.take(self._budget_address, self._budget_user):
            return True
        self._flooded = True
        self._end_session()
        await self._close(FLOOD_CODE, FLOOD_REASON)
        return False

    async def _close(self, code: int, reason: str) -> None:
        """Close the socket; one that is gone already (aborted while the close waited for its
        stalled writes, or closed by the client) needs nothing more."""
        try:
            await self.websocket.close(code=code, reason=reason)
        except _GONE:
            log.debug("websocket gone before its close (%d %s)", code, reason)

    def _start_session(self) -> None:
        """Once acknowledged: the socket shares its user's message budget, and closes when its token expires."""
        with suppress(Unauthenticated):
            self._budget_user = self.context.viewer_id
        expires = getattr(self.context, "token_expires_at", None)
        if expires is not None and self._expiry is None:
            delay = max(0.0, expires - time.time())
            self._expiry = asyncio.get_running_loop().call_later(delay, self._token_expired)
        if self._watched is None:
            with suppress(ChatError):  # no valid token, or banned meanwhile: nothing to watch
                self._watched = self.context.viewer_id
                self.view.deps.bans.session_started(self._watched, self._banned)
        presence = self.view.deps.presence
        if presence is not None and self._present is None:
            try:
                self._present = self.context.viewer_id
            except Unauthenticated:  # a socket without a valid token: nobody is online through it
                return
            presence.connected(self._present)

    def _end_session(self) -> None:
        if self._watched is not None:
            self.view.deps.bans.session_ended(self._watched, self._banned)
            self._watched = None
        if self._present is not None:
            self.view.deps.presence.disconnected(self._present)
            self._present = None
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    def _token_expired(self) -> None:
        self._expiry = None
        if not self._flooded:
            # Kept until done: a task nobody refers to may be collected before it runs.
            self._ending = asyncio.ensure_future(self._close_expired())

    def _banned(self) -> None:
        """The viewer was banned app-wide: the session ends now, as when its token expires."""
        if not self._flooded and self._ending is None:
            self._ending = asyncio.ensure_future(self._close_expired(BANNED_CODE, BANNED_REASON))

    async def _close_expired(self, code: int = TOKEN_EXPIRED_CODE, reason: str = TOKEN_EXPIRED_REASON) -> None:
        try:
            await self._close(code, reason)
        except RuntimeError:  # the application closed it meanwhile (Starlette: close after close)
            pass
        finally:
            self._ending = None


def _forget(message: Any) -> None:
    """Empty a message once handled. Strawberry's read loop (`async for message in iter_json()`)
    keeps the last one as a local while it waits for the next: for an idle subscriber that is its
    subscribe message, for as long as the socket is open (~850 bytes: memory per idle websocket).
    What its handling keeps (the operation's query and variables, connection_init's payload) it
    took out of the dict, which nothing reads after."""
    if isinstance(message, dict):
        message.clear()


class _Parking:
    """Parkable operations (parked.py) for a handler: their state while they are open, by id."""

    view: Any
    context: Any
    _parked: dict[str, Parked] | None = None

    def _parking(
        self, operation_id: str, query: Any, operation_name: Any, slot: object, operation: Any
    ) -> Parked | None:
        """A Parked for an operation that may park (kept by id), else None: it runs as before."""
        accepted = getattr(self.view, "accepted", None)
        if accepted is None or not getattr(self.view, "parking", True):
            return None
        if not isinstance(query, str) or not isinstance(operation_name, str | None):
            return None
        document = accepted.get(query)
        if not parkable(document, operation_name):
            return None
        parked = Parked(self._wake_parked, slot, operation, document)
        if self._parked is None:
            self._parked = {}
        self._parked[operation_id] = parked
        return parked

    def _wake_parked(self, parked: Parked) -> None:
        raise NotImplementedError

    def _open_parked(self, operation_id: str) -> Parked | None:
        """The operation's Parked if it is open and not stopped."""
        parked = self._parked.get(operation_id) if self._parked is not None else None
        return None if parked is None or parked.stopped else parked

    async def _end_parked(self, operation_id: str, parked: Parked) -> None:
        """The parkable operation is over: out of the Dispatcher, its price let go."""
        parked.stopped = True
        if self._parked is not None and self._parked.get(operation_id) is parked:
            del self._parked[operation_id]
            if not self._parked:
                self._parked = None
        self.context.subscription_costs.pop(parked.slot, None)
        await parked.end()

    def _stays_parked(self, parked: Parked | None) -> bool:
        return parked is not None and parked.parked and not parked.stopped


class _Documents:
    """A subscribe (start) payload that names a persisted document gets its text (persisted.py),
    as an HTTP request does; a refusal is the operation's error message."""

    async def _resolved(self, message: Any, start_type: str) -> bool:
        """False: the operation was refused (and told so)."""
        if not isinstance(message, dict) or message.get("type") != start_type or "id" not in message:
            return True
        payload = message.get("payload")
        documents = self.view.documents  # type: ignore[attr-defined]
        if not isinstance(payload, dict) or documents is None or not self.connection_acknowledged:  # type: ignore[attr-defined]
            return True  # the protocol's own answer
        try:
            await documents.resolve(payload)
        except Refused as refused:
            await self._refuse_document(message.get("id"), refused)  # type: ignore[attr-defined]
            return False
        return True


class _Gone:
    """send_message that says "the socket is gone" one way: Strawberry's WebSocketDisconnected."""

    async def send_message(self, message: Any) -> None:
        try:
            await super().send_message(message)  # type: ignore[misc]
        except WebSocketDisconnected:
            raise
        except _GONE as error:
            raise WebSocketDisconnected from error


class TransportWSHandler(_Documents, _Gone, _Pending, _Session, _Parking, TransportWSHandlerBase[C, None]):
    """graphql-transport-ws; Strawberry's own handler times connection_init out."""

    async def handle(self) -> None:
        if not await self._admitted():
            return
        try:
            await super().handle()
        finally:
            self._release()
            self._end_session()

    async def handle_message(self, message: Any) -> None:
        try:
            if await self._within_budget() and await self._resolved(message, "subscribe"):
                await super().handle_message(message)
        finally:
            _forget(message)

    async def _refuse_document(self, operation_id: Any, refused: Refused) -> None:
        await self.send_message({"id": operation_id, "type": "error", "payload": [refused.formatted]})

    async def handle_connection_init(self, message: Any) -> None:
        try:
            await super().handle_connection_init(message)
        finally:
            self._release()  # acknowledged, or refused and closing
        forget_cancelled_init_timeout(self)  # its job is over: not kept as long as the connection
        if self.connection_acknowledged:
            self._start_session()

    async def handle_subscribe(self, message: Any) -> None:
        limit = self.max_subscriptions_per_connection
        if (
            self.connection_acknowledged
            and limit is not None
            and message["id"] not in self.operations  # else the base closes it with 4409
            and len(self.operations) >= limit
        ):
            await self.send_message(
                {"id": message["id"], "type": "error", "payload": [subscription_limit_error(limit)]}
            )
            return
        await super().handle_subscribe(message)

    async def run_operation(
        self, operation: Any, parked: Parked | None = None, previous: asyncio.Task | None = None
    ) -> None:
        """An operation's task. One whose client went ends without an exception: a task that keeps
        its exception keeps the traceback, whose frames hold the operation, whose task it is (a
        cycle, holding the whole connection; frozen, it would stay for good: collector.py).

        A parkable operation (parked.py) runs here at its subscribe, and again when its failure is
        next (parked: its state; previous: the run before, which finishes sending first); its events
        are delivered by _woken. A run that parked sends no `complete`: while parked the operation
        counts as completed for Strawberry's Operation (what the base would send is dropped;
        nothing else is sent while parked), and it has no task."""
        if parked is None:
            slot = object()
            parked = self._parking(operation.id, operation.query, operation.operation_name, slot, operation)
        else:
            slot = parked.slot
            operation.completed = False
        ws_operation.set(slot)  # this task's own context: its subscription's price is held under it
        PARKING.set(parked)
        try:
            await after(previous)
            await super().run_operation(operation)
        except WebSocketDisconnected:
            pass  # logged at debug by handle_task_exception
        finally:
            PARKING.set(None)  # the task's context would hold it: Parked -> Operation -> task -> context
            if self._stays_parked(parked):
                if operation.task is asyncio.current_task():
                    operation.task = None  # idle: no task until the next event
            elif parked is not None:
                await self._end_parked(operation.id, parked)
            else:
                self.context.subscription_costs.pop(slot, None)

    def _wake_parked(self, parked: Parked) -> None:
        """An event (or the failure) for a parked operation: a task for it (_woken)."""
        operation = parked.operation
        operations: dict[str, Any] = self.operations
        if (
            parked.stopped
            or self._open_parked(operation.id) is not parked
            or operations.get(operation.id) is not operation
        ):
            return  # ended meanwhile, or its id taken by another
        run: Any = operation  # (not narrowed by the check above)
        task = asyncio.create_task(self._woken(run, parked, run.task))
        run.task = task
        task.add_done_callback(self._task_done)

    async def _woken(self, operation: Any, parked: Parked, previous: asyncio.Task | None) -> None:
        """A parked operation's task at an event: its events delivered (parked.deliver), or, when its
        failure is next, the operation's pipeline run again to end it."""
        ws_operation.set(parked.slot)
        delivered = False
        try:
            await after(previous)
            operation.completed = False
            delivered = await deliver(
                parked, self.schema, self.context, operation.variables, operation.operation_name, operation.send_next
            )
        except WebSocketDisconnected:
            parked.stopped = True  # its client went: the read loop's shutdown has the rest to do
        except Exception as error:  # what the base's run_operation does with a failure of its own
            parked.stopped = True
            await self.handle_task_exception(error)
            with suppress(Exception):
                await operation.send_operation_message({"id": operation.id, "type": "complete"})
            self.operations.pop(operation.id, None)
        finally:
            if not delivered and parked.stopped:
                await self._end_parked(operation.id, parked)
            elif delivered and self._stays_parked(parked) and operation.task is asyncio.current_task():
                operation.task = None
        if not delivered and not parked.stopped:
            await self.run_operation(operation, parked)

    async def cleanup_operation(self, operation_id: str) -> None:
        """complete from the client, or the socket closed: a parked operation has no task to cancel."""
        parked = self._open_parked(operation_id)
        if parked is not None:
            parked.stopped = True  # a run under way ends it instead of parking
            operation = self.operations.get(operation_id)
            if operation is not None and operation.task is None:
                del self.operations[operation_id]
                await self._end_parked(operation_id, parked)
                return
        await super().cleanup_operation(operation_id)

    async def handle_task_exception(self, error: Exception) -> None:
        """An operation's task failed: an ERROR with its traceback, unless its client just went."""
        if isinstance(error, WebSocketDisconnected):
            log.debug("subscription ended: its client closed the socket")
            return
        await super().handle_task_exception(error)


class LegacyWSHandler(_Documents, _Gone, _Pending, _Session, _Parking, LegacyWSHandlerBase[C, None]):
    """The legacy graphql-ws protocol, with the deadline Strawberry gives only the other one."""

    _init_deadline: asyncio.TimerHandle | None = None
    _closing: asyncio.Task | None = None

    async def handle(self) -> None:
        if not await self._admitted():
            return
        timeout = self.view.deps.settings.ws_init_timeout_seconds
        self._init_deadline = asyncio.get_running_loop().call_later(timeout, self._init_late)
        try:
            await super().handle()
        finally:
            self._cancel_deadline()
            self._release()
            self._end_session()

    async def handle_message(self, message: Any) -> None:
        try:
            if await self._within_budget() and await self._resolved(message, "start"):
                await super().handle_message(message)
        finally:
            _forget(message)

    async def _refuse_document(self, operation_id: Any, refused: Refused) -> None:
        await self.send_message({"type": "error", "id": operation_id, "payload": refused.formatted})

    async def handle_connection_init(self, message: Any) -> None:
        self._cancel_deadline()
        try:
            await super().handle_connection_init(message)
        finally:
            self._release()
        if self.connection_acknowledged:
            self._start_session()

    async def handle_start(self, message: Any) -> None:
        limit = self.max_subscriptions_per_connection
        if self.connection_acknowledged and limit is not None:
            operation_id = message["id"]
            if operation_id in self.tasks:  # what the base does first: the old one with this id ends
                await self.cleanup_operation(operation_id)
            if len(self.tasks) >= limit:
                error = subscription_limit_error(limit)
                await self.send_message({"type": "error", "id": operation_id, "payload": error})
                return
        await super().handle_start(message)

    async def handle_async_results(
        self,
        operation_id: str,
        query: str,
        operation_name: str | None,
        variables: dict[str, object] | None,
        parked: Parked | None = None,
        previous: asyncio.Task | None = None,
    ) -> None:
        """An operation's task: it ends quietly when its client went (nobody awaits a task that ended on its
        own, so its exception would be asyncio's "Task exception was never retrieved" ERROR).

        A parkable operation (parked.py) runs in _run_parkable, at its start and again when its
        failure is next (parked: its state; previous: the run before, which finishes sending
        first); its events are delivered by _woken."""
        if parked is None:
            slot = object()
            parked = self._parking(
                operation_id, query, operation_name, slot, (operation_id, query, operation_name, variables)
            )
        else:
            slot = parked.slot
        ws_operation.set(slot)  # this task's own context: its subscription's price is held under it
        PARKING.set(parked)
        try:
            if parked is None:
                await super().handle_async_results(operation_id, query, operation_name, variables)
            else:
                await after(previous)
                await self._run_parkable(operation_id, query, operation_name, variables, parked)
        except WebSocketDisconnected:
            log.debug("subscription ended: its client closed the socket")
        finally:
            PARKING.set(None)  # the task's context would hold it (a cycle, were the task kept)
            if parked is None:
                self.context.subscription_costs.pop(slot, None)
            elif not self._stays_parked(parked):
                await self._end_parked(operation_id, parked)

    async def _run_parkable(
        self,
        operation_id: str,
        query: str,
        operation_name: str | None,
        variables: dict[str, object] | None,
        parked: Parked,
    ) -> None:
        """Strawberry's handle_async_results (the same messages), but a run that parked sends no
        `complete` and leaves the operation open: its entry in `tasks` becomes IDLE (no task)."""
        try:
            result_source = await self.schema.subscribe(
                query=query,
                variable_values=variables,
                operation_name=operation_name,
                context_value=self.context,
                root_value=self.root_value,
            )
            self.subscriptions[operation_id] = result_source
            is_first_result = True
            async for result in result_source:
                if is_first_result and isinstance(result, PreExecutionError):
                    assert result.errors
                    payload = result.errors[0].formatted
                    await self.send_message({"type": "error", "id": operation_id, "payload": payload})
                    return
                await self.send_data_message(result, operation_id)
                is_first_result = False
            if self._stays_parked(parked):
                return
            await self.send_message({"type": "complete", "id": operation_id})
        except asyncio.CancelledError:
            await self.send_message({"type": "complete", "id": operation_id})
        finally:
            self.subscriptions.pop(operation_id, None)
            if self.tasks.get(operation_id) is asyncio.current_task():
                if self._stays_parked(parked):
                    self.tasks[operation_id] = IDLE  # the operation stays open, with no task
                else:
                    del self.tasks[operation_id]

    def _wake_parked(self, parked: Parked) -> None:
        """An event (or the failure) for a parked operation: a task for it (_woken)."""
        operation_id, query, operation_name, variables = parked.operation
        if parked.stopped or self._open_parked(operation_id) is not parked or operation_id not in self.tasks:
            return
        previous = self.tasks[operation_id]
        self.tasks[operation_id] = asyncio.create_task(self._woken(parked, previous))

    async def _woken(self, parked: Parked, previous: Any) -> None:
        """A parked operation's task at an event: its events delivered (parked.deliver), or, when its
        failure is next, the operation run again to end it. Stopped meanwhile: `complete`, as
        Strawberry's handler sends for a cancelled operation."""
        operation_id, query, operation_name, variables = parked.operation
        ws_operation.set(parked.slot)
        delivered = False

        async def send(result: Any) -> None:
            await self.send_data_message(result, operation_id)

        try:
            await after(previous)
            delivered = await deliver(parked, self.schema, self.context, variables, operation_name, send)
        except asyncio.CancelledError:
            parked.stopped = True
            with suppress(Exception):
                await self.send_message({"type": "complete", "id": operation_id})
        except WebSocketDisconnected:
            parked.stopped = True
            log.debug("subscription ended: its client closed the socket")
        except Exception:
            parked.stopped = True  # raised as Strawberry's handler's task raises it; nothing stays registered
            raise
        finally:
            if self._stays_parked(parked):
                if self.tasks.get(operation_id) is asyncio.current_task():
                    self.tasks[operation_id] = IDLE
            elif parked.stopped:
                if self.tasks.get(operation_id) is asyncio.current_task():
                    del self.tasks[operation_id]
                await self._end_parked(operation_id, parked)
        if not delivered and not parked.stopped:
            await self.handle_async_results(operation_id, query, operation_name, variables, parked)

    async def cleanup_operation(self, operation_id: str) -> None:
        """stop from the client, or the socket closed: a parked operation has no task to cancel; it
        gets the `complete` its cancelled task would have sent."""
        parked = self._open_parked(operation_id)
        if parked is not None:
            parked.stopped = True  # a run under way ends it instead of parking
            task = self.tasks.get(operation_id)
            if task is not None and task.done():  # IDLE, or its last run's task finishing
                del self.tasks[operation_id]
                self.subscriptions.pop(operation_id, None)
                await self._end_parked(operation_id, parked)
                with suppress(Exception):
                    await self.send_message({"type": "complete", "id": operation_id})
                return
        await super().cleanup_operation(operation_id)

    def _cancel_deadline(self) -> None:
        if self._init_deadline is not None:
            self._init_deadline.cancel()
            self._init_deadline = None

    def _init_late(self) -> None:
        self._init_deadline = None
        # Kept until done: a task nobody refers to may be collected before it runs.
        self._closing = asyncio.ensure_future(self._close_late())

    async def _close_late(self) -> None:
        try:
            await self.websocket.close(code=INIT_TIMEOUT_CODE, reason=INIT_TIMEOUT_REASON)
        except Exception:  # noqa: BLE001  the client went first: nothing left to close
            pass
        finally:
            self._closing = None
