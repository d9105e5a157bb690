"""Websockets before connection_init: a deadline, and a count per client address.

A websocket costs the server memory from its handshake on, while
connection_init is what says who is there. Both protocols' handlers here
close a socket that sends no connection_init within ws_init_timeout_seconds
(4408, graphql-transport-ws's own code, used for the legacy graphql-ws
protocol too, which defines none), and count the sockets of each client
address still waiting for theirs: past max_unauthenticated_ws_per_address a
new one is closed at once with 4429.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.websockets import WebSocket

from ..compat import LegacyWSHandlerBase, TransportWSHandlerBase, forget_cancelled_init_timeout
from .context import Context

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


class TransportWSHandler(_Pending, TransportWSHandlerBase[Context, None]):
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


class LegacyWSHandler(_Pending, LegacyWSHandlerBase[Context, None]):
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
