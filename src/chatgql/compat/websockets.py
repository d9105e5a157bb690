"""websockets' non-public API (its sans-I/O ServerProtocol, which uvicorn's websocket protocol holds as
`conn`), as chatgql uses it (PINNED["websockets"]).

Why the package exists, and how a pin moves: compat/__init__.py, docs/internals/compat.md."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from websockets.extensions.permessage_deflate import PerMessageDeflate, ServerPerMessageDeflateFactory

__all__ = [
    "end_websocket_parser",
    "ServerPerMessageDeflateFactory",
    "PerMessageDeflate",
    "use_websocket_deflate",
    "websocket_extensions",
]


def end_websocket_parser(protocol: Any) -> None:
    """A closed connection's websockets ServerProtocol (`conn`): end its parser generator, whose
    frame refers back to it, so it is freed with its permessage-deflate buffers (~35 KB) at once,
    not at a full collection (bench/results/micro.md)."""
    protocol.conn.parser.close()


def use_websocket_deflate(protocol: Any, make: Callable[[Any], Any]) -> None:
    """Replace the permessage-deflate factory uvicorn made for this connection (its ServerProtocol's
    `available_extensions`: a ServerPerMessageDeflateFactory with uvicorn's window bits and memLevel,
    when ws_per_message_deflate is on) with make(uvicorn's factory), or with none when it offered
    none. Breaks (keeps uvicorn's, whose compressor holds ~38 KB per socket) if websockets renames
    the attribute; test_compat.py checks the factory still negotiates."""
    conn = protocol.conn
    factories = conn.available_extensions
    if factories and isinstance(factories[0], ServerPerMessageDeflateFactory):
        conn.available_extensions = make(factories[0])


def websocket_extensions(protocol: Any) -> list[Any]:
    """The extensions the connection's handshake agreed (websockets' ServerProtocol.extensions)."""
    return protocol.conn.extensions
