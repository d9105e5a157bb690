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
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketDisconnected as SendAfterClose
from strawberry.http.exceptions import WebSocketDisconnected
from websockets.exceptions import InvalidState

from ..compat import LegacyWSHandlerBase, TransportWSHandlerBase, forget_cancelled_init_timeout
from .context import Context

log = logging.getLogger(__name__)

# What a write to a socket that is gone (or going) raises, below Strawberry (OSError: uvicorn's ClientDisconnected).
_GONE = (WebSocketDisconnect, SendAfterClose, InvalidState, OSError)

INIT_TIMEOUT_CODE = 4408
INIT_TIMEOUT_REASON = "Connection initialisation timeout"
TOO_MANY_CODE = 4429
TOO_MANY_REASON = "Too many unauthenticated connections from this address"


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


class _Gone:
    """send_message that says "the socket is gone" one way: Strawberry's WebSocketDisconnected."""

    async def send_message(self, message: Any) -> None:
        try:
            await super().send_message(message)  # type: ignore[misc]
        except WebSocketDisconnected:
            raise
        except _GONE as error:
            raise WebSocketDisconnected from error


class TransportWSHandler(_Gone, _Pending, TransportWSHandlerBase[Context, None]):
    """graphql-transport-ws; Strawberry's own handler times connection_init out."""

    async def handle(self) -> None:
        if not await self._admitted():
            return
        try:
            await super().handle()
        finally:
            self._release()

    async def handle_connection_init(self, message: Any) -> None:
        try:
            await super().handle_connection_init(message)
        finally:
            self._release()  # acknowledged, or refused and closing
        forget_cancelled_init_timeout(self)  # its job is over: not kept as long as the connection

    async def run_operation(self, operation: Any) -> None:
        """An operation's task. One whose client went ends without an exception: a task that keeps
        its exception keeps the traceback, whose frames hold the operation, whose task it is (a
        cycle, holding the whole connection; frozen, it would stay for good: collector.py)."""
        try:
            await super().run_operation(operation)
        except WebSocketDisconnected:
            pass  # logged at debug by handle_task_exception

    async def handle_task_exception(self, error: Exception) -> None:
        """An operation's task failed: an ERROR with its traceback, unless its client just went."""
        if isinstance(error, WebSocketDisconnected):
            log.debug("subscription ended: its client closed the socket")
            return
        await super().handle_task_exception(error)


class LegacyWSHandler(_Gone, _Pending, LegacyWSHandlerBase[Context, None]):
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

    async def handle_connection_init(self, message: Any) -> None:
        self._cancel_deadline()
        try:
            await super().handle_connection_init(message)
        finally:
            self._release()

    async def handle_async_results(self, *args: Any, **kwargs: Any) -> None:
        """An operation's task: it ends quietly when its client went (nobody awaits a task that ended on its
        own, so its exception would be asyncio's "Task exception was never retrieved" ERROR)."""
        try:
            await super().handle_async_results(*args, **kwargs)
        except WebSocketDisconnected:
            log.debug("subscription ended: its client closed the socket")

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
