"""uvicorn's HTTP protocol (httptools) with deadlines for slow clients, and the
uvicorn options `chatgql serve` and the tests' server share.

uvicorn bounds nothing a client takes its time over: a connection that sends
no bytes, or a request line and headers a byte at a time (slowloris), or a
body that never completes, holds its socket for as long as the client likes
(it arms its keep-alive timer only after a response, and any byte cancels
it). This subclass arms one timer per phase:

- headers: from the connection (or a request's first byte) until the
  headers are complete: then 408 if the request had begun, else just closed;
- body: from the headers until the body is complete: then 408 (when no
  response has started) and closed. A handler that answers without reading
  the body does not let the client trickle it in forever either.

The headers are capped in size too (431): httptools has no limit of its own
(uvicorn's h11_max_incomplete_event_size is for h11), and one connection
sending headers at loopback speed grew the server by 160 MB in a second.

It also applies uvicorn's limit_concurrency to websocket upgrades, which
uvicorn's httptools protocol lets through before counting (503, as for HTTP),
and lets go of the HTTP protocol of a connection upgraded to a websocket:
its parser refers back to it (uvicorn breaks that cycle in connection_lost,
which an upgraded connection never reaches), so each one waited for the
collector's full pass with its transport.

And it bounds what a client that does not read may hold, as websocket.py does for
websockets: a response (an event stream above all: engine/streams.py) whose writes
stay stalled, the transport above its high-water mark, for write_timeout seconds
is aborted, which its handler sees as a disconnect; and an event stream's socket
gets the websockets' fixed kernel send buffer (send_buffer), so that a peer that
stops reading stalls the writes within a bounded amount.

And it writes each response in one piece: uvicorn writes the status line and
headers, then the body, each straight to the socket: two system calls and two
TCP segments per response, the first waking the client up for half an answer.
On this kind of machine a socket write that wakes another process is the
costliest thing a request does (a profile of markRead put 28% of the server's
CPU on the headers' write alone); see _OneWrite.

What it uses of HttpToolsProtocol beyond the asyncio.Protocol interface:
data_received, pause_writing, resume_writing, the parser callbacks (on_message_begin,
on_headers_complete, on_message_complete), handle_websocket_upgrade, and the attributes
transport, parser, cycle (response_started), connections, tasks,
limit_concurrency, loop, logger; the private pokes are compat/uvicorn.py's
(upgrading_to_websocket, abandon_request_cycle, release_http_parser,
send_response_through, request_headers). uvicorn is
pinned in pyproject.toml, tests/test_compat.py checks the surface and
tests/test_slow_client_protocol.py pins the behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from typing import Any

import orjson

from ..compat import uvicorn as uvicorn_compat
from ..settings import Settings
from .websocket import LeanWebSocketProtocol, WsBounds

_SERVICE_UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 19\r\nconnection: close\r\n\r\nService Unavailable"
)


def _refusal(status: bytes, message: str, reason: str | None = None) -> bytes:
    """A GraphQL-shaped LIMIT_EXCEEDED answer that closes the connection."""
    extensions = {"code": "LIMIT_EXCEEDED"} | ({"reason": reason} if reason else {})
    body = orjson.dumps({"data": None, "errors": [{"message": message, "extensions": extensions}]})
    return b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (
        status,
        len(body),
        body,
    )


# After a refusal, what the client still sends is read and dropped this long, up to this much.
_LINGER_SECONDS = 2.0
_LINGER_BYTES = 64 * 1024


def _timeout_response(message: str) -> bytes:
    return _refusal(b"408 Request Timeout", message, "TIMEOUT")


class DeadlineHttpProtocol(uvicorn_compat.HttpToolsProtocol):
    """HttpToolsProtocol whose request headers and body must arrive in time."""

    def __init__(
        self,
        *args: Any,
        header_timeout: float,
        body_timeout: float,
        max_header_bytes: int = 65536,
        write_timeout: float = 10.0,
        send_buffer: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.write_timeout = write_timeout
        self.send_buffer = send_buffer
        self._stall_timer: asyncio.TimerHandle | None = None
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.max_header_bytes = max_header_bytes
        self._header_bytes = 0
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._request_begun = False
        self._lingering = False
        self._lingering_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:  # refused: the rest of the request is read and dropped (_refuse_and_close)
            self._lingering_bytes += len(data)
            if self._lingering_bytes > _LINGER_BYTES:
                self.transport.close()
            return
        super().data_received(data)
        if self._header_timer is not None and not self.transport.is_closing():
            # Still reading headers after this chunk: all of it was headers (give or take the end
            # of a previous request). Counted per chunk, so the cap is exceeded by one read at most.
            self._header_bytes += len(data)
            if self._header_bytes > self.max_header_bytes:  # a flood: no lingering, closed at once
                self._cancel_timers()
                self.transport.write(
                    _refusal(
                        b"431 Request Header Fields Too Large",
                        f"the request headers are larger than {self.max_header_bytes} bytes",
                    )
                )
                self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._request_begun = True
        if self._header_timer is None:  # a request on a kept-alive connection
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_late)

    def on_headers_complete(self) -> None:
        self._header_bytes = 0
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().on_headers_complete()
        if not uvicorn_compat.upgrading_to_websocket(self):
            self._body_timer = self.loop.call_later(self.body_timeout, self._body_late)
            uvicorn_compat.send_response_through(self, lambda transport: _OneWrite(transport, self.loop))
            if self.send_buffer and _asks_for_a_stream(uvicorn_compat.request_headers(self)):
                sock = self.transport.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall_timer is None:
            self._stall_timer = self.loop.call_later(self.write_timeout, self._stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _stalled(self) -> None:
        """The client read nothing of the response for write_timeout seconds: dropped, with what is
        buffered for it (its handler's next receive() is http.disconnect)."""
        self._stall_timer = None
        if not self.transport.is_closing() or self.transport.get_write_buffer_size():
            self.transport.abort()

    def on_message_complete(self) -> None:
        self._request_begun = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    def handle_websocket_upgrade(self) -> None:
        self._cancel_timers()
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            self.logger.warning("Exceeded concurrency limit.")
            self.transport.write(_SERVICE_UNAVAILABLE)
            self.transport.close()
            return
        super().handle_websocket_upgrade()
        uvicorn_compat.release_http_parser(self)  # the websocket protocol has the transport now

    def _cancel_timers(self) -> None:
        for timer in (self._header_timer, self._body_timer, self._stall_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._body_timer = self._stall_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self._request_begun:
            late = f"the request headers did not arrive within {self.header_timeout:g} s"
            self._refuse_and_close(_timeout_response(late))
        else:
            self.transport.close()

    def _body_late(self) -> None:
        self._body_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_started:
            late = f"the request body did not arrive within {self.body_timeout:g} s"
            self._refuse_and_close(_timeout_response(late))
        else:
            # Answered without reading the body (a 405, say): closed in stages too, or the client's
            # next byte draws a reset that may destroy that answer before the client reads it.
            self._close_lingering()

    def _refuse_and_close(self, answer: bytes) -> None:
        """Send the refusal, then close in stages (RFC 9112, 9.6): half-close, read and drop what
        the client still sends for a while, then close. Closed at once, the kernel answers the
        client's next bytes with a reset, which may destroy the refusal before the client reads it.
        (For slow clients: one that floods past _LINGER_BYTES meanwhile is closed at once.)
        The request's handler gets http.disconnect on its next receive() and sends nothing."""
        self._cancel_timers()
        if self.cycle is not None:
            uvicorn_compat.abandon_request_cycle(self.cycle)
        self.transport.write(answer)
        self._close_lingering()

    def _close_lingering(self) -> None:
        self._cancel_timers()
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self._lingering = True
        self.transport.write_eof()
        self.loop.call_later(_LINGER_SECONDS, self.transport.close)


def _asks_for_a_stream(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request accepts an event stream (graphql-sse, multipart subscriptions)."""
    for name, value in headers:
        if name == b"accept":
            return b"text/event-stream" in value or b"subscriptionspec" in value.lower()
    return False


class _OneWrite:
    """The transport one response is written through (RequestResponseCycle's `transport`; it
    calls write, close and is_closing). A write is held until the next one, which goes out with
    it in one system call: uvicorn writes the headers, and the body follows in the same turn of
    the event loop (Starlette sends both without waiting in between). Whatever is still held at
    the end of that turn (a streamed response's headers before its first chunk) is written then,
    and before the connection is closed: nothing is reordered or lost, at most delayed by one
    turn of the loop."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is None:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._held = None
            # The client may be gone already: uvloop closes the handle at once and tells the
            # protocol (connection_lost, which stops the cycle's writes) a turn later; a write in
            # between raised RuntimeError out of the request's handler (seen under a read storm).
            if not self._transport.is_closing():
                self._transport.write(held + data)

    def flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The uvicorn.Config options for slow, idle and flooding clients (chatgql serve and the tests'
    server): HTTP deadlines, the connection cap, and websockets-sansio made lighter and bounded."""
    return {
        "ws": functools.partial(LeanWebSocketProtocol, bounds=WsBounds.of(settings)),
        "ws_max_size": 1 << 20,  # an incoming websocket message, decompressed: more is closed with 1009
        "http": functools.partial(
            DeadlineHttpProtocol,
            header_timeout=settings.http_header_timeout_seconds,
            body_timeout=settings.http_body_timeout_seconds,
            max_header_bytes=settings.http_max_header_bytes,
            write_timeout=settings.ws_write_timeout_seconds,
            send_buffer=settings.ws_send_buffer_bytes,
        ),
        "limit_concurrency": settings.max_connections,
    }
