"""uvicorn's non-public API (and httptools' parser as uvicorn holds it), as chatgql uses it
(PINNED["uvicorn"], PINNED["httptools"]).

Why the package exists, and how a pin moves: compat/__init__.py, docs/internals/compat.md."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

__all__ = [
    "HttpToolsProtocol",
    "upgrading_to_websocket",
    "abandon_request_cycle",
    "release_http_parser",
    "send_response_through",
    "request_headers",
    "WebSocketsSansIOProtocol",
    "replace_websocket_waiters",
    "drop_websocket_handshake",
]


# uvicorn.protocols.http.httptools_impl.HttpToolsProtocol: the base of httpprotocol.DeadlineHttpProtocol
# (deadlines for slow clients, a header cap, the connection limit on upgrades: memory and
# availability). What it overrides and reads is in httpprotocol.py's docstring; test_compat.py checks
# that each overridden method is still called by uvicorn's and each attribute is still set.


def upgrading_to_websocket(protocol: Any) -> bool:
    """Whether the request whose headers just completed is a websocket upgrade uvicorn will take
    (httptools' `should_upgrade()` and uvicorn's private `_should_upgrade()`, as uvicorn asks it):
    such a request gets no body deadline."""
    return bool(protocol.parser.should_upgrade() and protocol._should_upgrade())


def abandon_request_cycle(cycle: Any) -> None:
    """Tell a request's handler that its client is gone, as uvicorn's connection_lost does: its
    next receive() gets http.disconnect and what it sends is dropped (`disconnected`,
    `message_event`). Used when a request is refused for a late body (408)."""
    cycle.disconnected = True
    cycle.message_event.set()


def release_http_parser(protocol: Any) -> None:
    """After a websocket upgrade, drop the HTTP protocol's httptools parser: it refers back to the
    protocol (uvicorn breaks that cycle in connection_lost, which an upgraded connection never
    reaches), so each upgraded connection's HTTP protocol waited for a full collection (memory)."""
    protocol.parser = None


def send_response_through(protocol: Any, make_transport: Callable[[Any], Any]) -> None:
    """Route the response of the request whose headers just completed through
    make_transport(protocol.transport) (uvicorn's RequestResponseCycle writes to its own
    `transport` attribute): httpprotocol._OneWrite holds the headers until the body follows in the
    same loop turn, one socket write per response (speed). Only the request's own, new cycle."""
    cycle = protocol.cycle
    if cycle is not None and cycle.transport is protocol.transport:
        cycle.transport = make_transport(protocol.transport)


def request_headers(protocol: Any) -> list[tuple[bytes, bytes]]:
    """The headers of the request whose headers just completed (`headers`: names in lower case),
    as uvicorn collected them: httpprotocol reads whether it asks for an event stream."""
    return protocol.headers or []


# uvicorn.protocols.websockets.websockets_sansio_impl.WebSocketsSansIOProtocol: the base of
# websocket.LeanWebSocketProtocol (memory per idle websocket; what a peer that floods or does not
# read may make it hold: see websocket.py, whose docstring lists the hooks and attributes it uses).


def replace_websocket_waiters(protocol: Any, queue: Any, writable: Any) -> None:
    """Swap the protocol's `queue` (an asyncio.Queue, ~3 KB even when empty) and `writable` (an
    asyncio.Event) for chatgql's lighter equivalents (websocket._Inbox, _Flag), which offer what
    uvicorn calls of them. Breaks if uvicorn renames them or calls more of their methods."""
    protocol.queue = queue
    protocol.writable = writable


def drop_websocket_handshake(protocol: Any) -> None:
    """Once accepted, let go of the handshake's request and response (`request`, `response`);
    the request's headers are emptied too, since websockets' parser generator keeps the request as
    a local for the connection's lifetime (memory per idle websocket)."""
    if protocol.handshake_complete and protocol.request is not None:
        protocol.request.headers.clear()
        protocol.request = None
        protocol.response = None
