"""uvicorn's websocket protocol (websockets-sansio), lighter per idle connection.

A process holds thousands of idle subscribed websockets, and each of
uvicorn's protocol objects kept about 8 KB it no longer needs: an
asyncio.Queue for incoming messages (three deques and an Event, ~3 KB even
when empty), an asyncio.Event for write flow control, and the handshake's
request and response with their headers. Here the queue and the event are
replaced by equivalents that allocate only while something waits or is
buffered, and the handshake is dropped once the connection is accepted.
A closed connection's websockets ServerProtocol is let go at once: it
refers to itself through its parser generator, a cycle that only the
collector's full pass frees, and a full pass is rare in a process that
froze its startup objects and raised the thresholds (app.py). Until then
each one kept its permessage-deflate state (~35 KB of zlib buffers):
measured, 1,000 closed sockets held 50 MB, still there 10 s later.

Everything else (framing, keepalive pings, close handshake, flow control)
is uvicorn's own code. What it touches of uvicorn's and websockets' internals is in
compat.py (replace_websocket_waiters, end_websocket_parser, drop_websocket_handshake).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from . import compat


class _Inbox:
    """What uvicorn uses of asyncio.Queue (put_nowait, get, empty), unbounded like it."""

    __slots__ = ("_items", "_getters")

    def __init__(self) -> None:
        self._items: deque[Any] | None = None
        self._getters: list[asyncio.Future[None]] | None = None

    def put_nowait(self, item: Any) -> None:
        if self._items is None:
            self._items = deque()
        self._items.append(item)
        getters = self._getters
        while getters:
            getter = getters.pop(0)
            if not getter.done():
                getter.set_result(None)
                break

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items) if self._items else 0

    async def get(self) -> Any:
        while not self._items:
            getter = asyncio.get_running_loop().create_future()
            if self._getters is None:
                self._getters = []
            self._getters.append(getter)
            try:
                await getter
            except BaseException:
                if getter in self._getters:
                    self._getters.remove(getter)
                if self._items and not getter.cancelled():
                    self._wake_next()
                raise
            finally:
                if self._getters is not None and not self._getters:
                    self._getters = None
        item = self._items.popleft()
        if not self._items:
            self._items = None
        return item

    def _wake_next(self) -> None:
        for getter in self._getters or ():
            if not getter.done():
                getter.set_result(None)
                return


class _Flag:
    """What uvicorn uses of asyncio.Event (set, clear, is_set, wait), starting set."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = True
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> bool:
        if self._set:
            return True
        waiter = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        try:
            await waiter
            return True
        finally:
            if self._waiters is not None and waiter in self._waiters:
                self._waiters.remove(waiter)


class LeanWebSocketProtocol(compat.WebSocketsSansIOProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        compat.replace_websocket_waiters(self, _Inbox(), _Flag())

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        # uvicorn does not touch the sans-I/O protocol once the connection is lost (send() raises
        # ClientDisconnected first): end its parser, whose frame is what refers back to it.
        compat.end_websocket_parser(self)

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "websocket.accept":
            # Only the handshake reads them (the scope has its own copy of the request's headers).
            compat.drop_websocket_handshake(self)
