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
each one kept its permessage-deflate state (~35 KB of zlib buffers), for
seconds after the close (bench/results/micro.md).

And what one peer may make the server hold or do (WsBounds, from settings):

- uvicorn answers each PING straight into the transport, whatever its write
  buffer holds, and closes by waiting for that buffer to drain: a peer that
  sends pings and never reads grew the server by ~37 MB a second, and kept it
  after the close. The kernel's send buffer is fixed (ws_send_buffer_bytes: autotuned,
  it took up to 4 MB, filling over many seconds, before the process saw any
  backpressure), and every write goes through _BoundedTransport: bytes
  written while the buffer is stalled (above its high-water mark) count
  against ws_max_write_buffer_bytes, past which the connection is aborted
  (its buffer dropped at once); a buffer stalled for ws_write_timeout_seconds,
  or still unsent that long after a close, is aborted too;
- while the writes stall, the peer is not read from either: its pings and
  messages wait in its own socket, at no cost to the server;
- PING and PONG frames are rate-limited per socket (a token bucket made on
  the first one: most sockets never send any); past it the socket is failed
  with 1008 (policy violation, RFC 6455's code for it);
- one read is parsed a bounded amount per turn of the event loop: a read
  (up to 256 KB: ~12,000 small frames written in one go) is cut after
  _FRAMES_PER_TURN frames or _BYTES_PER_TURN bytes, the rest kept and parsed
  at the next turns while the socket is not read from, so one socket's
  buffered burst cannot hold the loop from every other connection;
- after the server's close frame (a 4429, say), what the peer still sends
  before its own close frame is parsed up to _LINGER_BYTES; past that the
  socket is not read from any more and closed _LINGER_SECONDS later (uvicorn
  alone reads and parses all of it until its 10 s close timeout).

What it uses of uvicorn's protocol beyond asyncio.Protocol: the hooks
connection_made, handle_ping, handle_pong, send, and the attributes conn,
queue, transport, writable, read_paused, close_sent, disconnected, loop,
client (test_compat.py checks the hooks). Everything else (framing,
keepalive pings, close handshake, flow control) is uvicorn's own code. What it touches of uvicorn's and websockets' internals is in
compat/uvicorn.py (replace_websocket_waiters, drop_websocket_handshake) and compat/websockets.py
(end_websocket_parser).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from websockets.frames import CONT, CTRL_OPCODES, Frame

from ..compat import uvicorn as uvicorn_compat
from ..compat import websockets as websockets_compat
from ..edge.ratelimit import Bucket
from ..settings import Settings

log = logging.getLogger(__name__)

CONTROL_FLOOD_CODE = 1008
CONTROL_FLOOD_REASON = "Too many control frames"
# After failing a connection, what the peer still sends is read and dropped this long, up to this much;
# after a close frame, what it sends until its own is parsed up to that much.
_LINGER_SECONDS = 2.0
_LINGER_BYTES = 64 * 1024
# What one socket's read may have parsed in one turn of the event loop (the rest waits for the next turns).
_FRAMES_PER_TURN = 32
_BYTES_PER_TURN = 64 * 1024


@dataclass(frozen=True, slots=True)
class WsBounds:
    """What one websocket peer may make the server hold or answer (settings' ws_* values)."""

    write_timeout: float = 10.0
    max_write_buffer: int = 1 << 20
    control_rate: float = 5.0
    control_burst: int = 20
    send_buffer: int = 256 * 1024

    @classmethod
    def of(cls, settings: Settings) -> WsBounds:
        return cls(
            write_timeout=settings.ws_write_timeout_seconds,
            max_write_buffer=settings.ws_max_write_buffer_bytes,
            control_rate=settings.ws_control_frames_per_second,
            control_burst=settings.ws_control_frames_burst,
            send_buffer=settings.ws_send_buffer_bytes,
        )


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


_DEFAULT_BOUNDS = WsBounds()


def _frame_size(header: bytes) -> int | None:
    """A websocket frame's whole length (header and payload) from its first bytes; None when
    they are too few to say."""
    if len(header) < 2:
        return None
    second = header[1]
    length = second & 0x7F
    mask = 4 if second & 0x80 else 0
    if length == 126:
        if len(header) < 4:
            return None
        return 4 + mask + int.from_bytes(header[2:4], "big")
    if length == 127:
        if len(header) < 10:
            return None
        return 10 + mask + int.from_bytes(header[2:10], "big")
    return 2 + mask + length


# A message shorter than this is sent uncompressed (RSV1 unset, RFC 7692 section 6): connection_ack,
# ka, complete, pong gain nothing from deflate, and an idle subscriber gets nothing else.
_PLAIN_BELOW = 64


class LeanDeflate(websockets_compat.PerMessageDeflate):
    """permessage-deflate that holds no zlib state while idle.

    websockets' PerMessageDeflate makes its compressor and decompressor with the connection and
    keeps both for its lifetime: at uvicorn's window bits (12) and memLevel (5), ~39 KB for the
    compressor and ~11 KB for the decompressor once a message came, per socket, idle or not.
    Here (the protocol unchanged, both ends as RFC 7692 has them):

    - the decompressor: the factory's answer carries client_no_context_takeover (which a server
      may include whatever the offer said, RFC 7692 section 7.1.1.2), so websockets makes one per
      incoming compressed message and lets it go at the message's end;
    - the compressor: made when the first message worth compressing is sent (short ones go
      uncompressed, _PLAIN_BELOW), kept while messages follow, so a stream of events still
      compresses against the ones before it (context takeover, as negotiated), and let go once a
      keepalive interval passed with nothing sent (drop_idle_encoder, at each keepalive ping).
      The next message starts a new compressor: its output refers only to itself, which the
      peer's decompressor, keeping its window, decodes as it decodes any message.
    """

    _used = False  # a message was compressed since the last drop_idle_encoder
    _in_message = False  # between the first and the last frame of a fragmented compressed message

    def __init__(
        self,
        remote_no_context_takeover: bool,
        local_no_context_takeover: bool,
        remote_max_window_bits: int,
        local_max_window_bits: int,
        compress_settings: dict[Any, Any] | None = None,
    ) -> None:
        # as local_no_context_takeover, websockets' __init__ makes no compressor; it is made lazily in encode
        super().__init__(
            remote_no_context_takeover, True, remote_max_window_bits, local_max_window_bits, compress_settings
        )
        self.local_no_context_takeover = local_no_context_takeover

    def encode(self, frame: Frame) -> Frame:
        if frame.opcode in CTRL_OPCODES:
            return frame
        if frame.opcode is CONT:
            if frame.fin:
                self._in_message = False
        elif frame.fin and len(frame.data) < _PLAIN_BELOW:
            return frame  # sent as it is: an uncompressed message
        else:
            self._in_message = not frame.fin
        if not self.local_no_context_takeover and "encoder" not in self.__dict__:
            self.encoder = zlib.compressobj(wbits=-self.local_max_window_bits, **self.compress_settings)
        self._used = True
        return super().encode(frame)

    def drop_idle_encoder(self) -> None:
        """Let the compressor go if nothing was compressed since the last call (and none is mid-message)."""
        if self._used or self._in_message:
            self._used = False
        else:
            self.__dict__.pop("encoder", None)


class LeanDeflateFactory(websockets_compat.ServerPerMessageDeflateFactory):
    """uvicorn's permessage-deflate settings, answered with client_no_context_takeover, making LeanDeflate."""

    def process_request_params(self, params: Sequence[Any], accepted_extensions: Sequence[Any]) -> tuple[list, Any]:
        response, agreed = super().process_request_params(params, accepted_extensions)
        return response, LeanDeflate(
            agreed.remote_no_context_takeover,
            agreed.local_no_context_takeover,
            agreed.remote_max_window_bits,
            agreed.local_max_window_bits,
            agreed.compress_settings,
        )


_lean_factories: dict[tuple, list[LeanDeflateFactory]] = {}


def _lean_deflate(theirs: websockets_compat.ServerPerMessageDeflateFactory) -> list[LeanDeflateFactory]:
    """One list of one factory per distinct setting, shared by every connection (uvicorn makes both per socket)."""
    key = (
        theirs.server_no_context_takeover,
        theirs.server_max_window_bits,
        theirs.client_max_window_bits,
        tuple(sorted((theirs.compress_settings or {}).items())),
        theirs.require_client_max_window_bits,
    )
    made = _lean_factories.get(key)
    if made is None:
        made = _lean_factories[key] = [
            LeanDeflateFactory(
                server_no_context_takeover=theirs.server_no_context_takeover,
                client_no_context_takeover=True,
                server_max_window_bits=theirs.server_max_window_bits,
                client_max_window_bits=theirs.client_max_window_bits,
                compress_settings=theirs.compress_settings,
                require_client_max_window_bits=theirs.require_client_max_window_bits,
            )
        ]
    return made


class _BoundedTransport:
    """The transport as the websocket protocol writes to it: every write and close of uvicorn's
    goes through here (the asyncio.Transport methods it calls, the rest passed on)."""

    __slots__ = ("_transport", "_protocol")

    def __init__(self, transport: asyncio.Transport, protocol: LeanWebSocketProtocol) -> None:
        self._transport = transport
        self._protocol: LeanWebSocketProtocol | None = protocol

    def write(self, data: bytes) -> None:
        transport = self._transport
        protocol = self._protocol
        if protocol is not None and protocol.aborted:
            return  # uvloop raises on a write to the closed handle (connection_lost comes a turn later)
        transport.write(data)
        limit = protocol.bounds.max_write_buffer if protocol is not None else 0
        if protocol is not None and protocol.write_stalled() and transport.get_write_buffer_size() > limit:
            protocol.abort("its peer left more than %d bytes unread", limit)

    def resume_reading(self) -> None:
        protocol = self._protocol
        if protocol is not None and (protocol.write_stalled() or protocol.holding_input()):
            # Not while its writes stall (resumed when they drain: resume_writing), nor while part of
            # a read waits to be parsed (resumed when it is: _parse_held), nor after the close's linger.
            return
        self._transport.resume_reading()

    def close(self) -> None:
        transport = self._transport
        protocol = self._protocol
        if protocol is not None and protocol.lingering():
            return  # failed, and closing in stages (LeanWebSocketProtocol.fail)
        transport.close()
        if protocol is not None and transport.get_write_buffer_size():
            protocol.arm_stall_timer()  # close waits for the buffer to drain: not forever

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class LeanWebSocketProtocol(uvicorn_compat.WebSocketsSansIOProtocol):
    # Class-level until they change: an idle socket's instance holds none of them.
    _stall_timer: asyncio.TimerHandle | None = None
    _control: Bucket | None = None  # made on the first PING or PONG
    _lost = False
    aborted = False
    _lingering: int | None = None  # failed: bytes read and dropped since
    _framing = False  # past the handshake's request: what is read is frames
    _frame_left = 0  # bytes of the frame under way not yet passed to the parser
    _header_part = b""  # the start of a frame's header that the last bytes passed ended with
    _held: bytes | None = None  # read, not yet parsed (the next turns')
    _parse_next: asyncio.Handle | None = None
    _after_close = 0  # bytes passed to the parser since the server's close frame
    _deaf = False  # past the linger after the close frame: not read from any more

    def __init__(self, *args: Any, bounds: WsBounds | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        uvicorn_compat.replace_websocket_waiters(self, _Inbox(), _Flag())
        websockets_compat.use_websocket_deflate(self, _lean_deflate)
        self.bounds = bounds or _DEFAULT_BOUNDS

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.bounds.send_buffer:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.bounds.send_buffer)
        self.transport = _BoundedTransport(self.transport, self)  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._cancel_stall_timer()
        self._held = None
        if self._parse_next is not None:
            self._parse_next.cancel()
            self._parse_next = None
        super().connection_lost(exc)
        bounded = self.transport
        if isinstance(bounded, _BoundedTransport):
            bounded._protocol = None  # the cycle protocol <-> transport, broken without the collector
        # uvicorn does not touch the sans-I/O protocol once the connection is lost (send() raises
        # ClientDisconnected first): end its parser, whose frame is what refers back to it.
        websockets_compat.end_websocket_parser(self)

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "websocket.accept":
            # Only the handshake reads them (the scope has its own copy of the request's headers).
            uvicorn_compat.drop_websocket_handshake(self)
            # And the scope's copy: read before the accept (routing, the subprotocol, the context),
            # never after (a websocket's token comes with connection_init; its address is the
            # scope's `client`). Emptied in place: Starlette's Headers share the list (~1.2 KB of
            # tuples and bytes per idle websocket).
            headers = self.scope.get("headers")
            if isinstance(headers, list):
                headers.clear()

    # --- writes that stall ------------------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        self.arm_stall_timer()
        # Backpressure both ways: a peer that does not read what it is sent is not read from
        # (its pings and messages wait in its own socket), until the writes drain or time out.
        if not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        if not self.transport.is_closing():
            self._cancel_stall_timer()
            if not self.read_paused:  # uvicorn's own pause: a message the application has not taken yet
                self.transport.resume_reading()

    def write_stalled(self) -> bool:
        return not self.writable.is_set()

    def arm_stall_timer(self) -> None:
        if self._stall_timer is None and not self._lost:
            self._stall_timer = self.loop.call_later(self.bounds.write_timeout, self._stalled)

    def _cancel_stall_timer(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _stalled(self) -> None:
        self._stall_timer = None
        self.abort("its peer read nothing for %g s", self.bounds.write_timeout)

    def abort(self, why: str, *args: object) -> None:
        """Drop the connection and what is buffered for it, now."""
        self._cancel_stall_timer()
        if self._lost:
            return
        log.debug("websocket from %s aborted: " + why, self.client, *args)
        self.close_sent = self.disconnected = True  # the application's next send raises ClientDisconnected
        self.aborted = True
        self.transport.abort()

    # --- keepalive -----------------------------------------------------------------------------------

    def send_keepalive_ping(self) -> None:
        """uvicorn's keepalive ping (every ws_ping_interval, 20 s): a compressor idle since the last one is let go."""
        for extension in websockets_compat.websocket_extensions(self):
            if isinstance(extension, LeanDeflate):
                extension.drop_idle_encoder()
        super().send_keepalive_ping()

    # --- control frames -----------------------------------------------------------------------------

    def handle_ping(self) -> None:
        if self._control_frame_allowed():
            super().handle_ping()

    def handle_pong(self, event: Any) -> None:
        if self._control_frame_allowed():
            super().handle_pong(event)

    def _control_frame_allowed(self) -> bool:
        if self.close_sent or self.disconnected:
            return False  # the answers of frames parsed with the one that went past the limit
        if self._control is None:
            self._control = Bucket(self.bounds.control_rate, self.bounds.control_burst)
        if self._control.take():
            return True
        self.fail(CONTROL_FLOOD_CODE, CONTROL_FLOOD_REASON)
        return False

    def fail(self, code: int, reason: str) -> None:
        """Fail the connection (RFC 6455 7.1.7): a close frame, then the TCP connection closed
        without waiting for the peer's; the application sees the disconnect at once. Closed in
        stages, as httpprotocol refuses a request: half-closed, what the peer still sends read
        and dropped for a while, then closed (closed at once, the kernel would answer the
        peer's next bytes with a reset, which may destroy the close frame before it is read)."""
        self.conn.fail(code, reason)
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self.disconnected = True  # the application's next send raises ClientDisconnected
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self._lingering = 0
        self.transport.write_eof()
        self.loop.call_later(_LINGER_SECONDS, self._end_linger)

    def lingering(self) -> bool:
        return self._lingering is not None

    def _end_linger(self) -> None:
        self._lingering = None
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._lingering is not None:  # failed: dropped, up to a point
            self._lingering += len(data)
            if self._lingering > _LINGER_BYTES:
                self._end_linger()
            return
        if not self._framing:  # the handshake's request (uvicorn passes it in one piece)
            self._framing = True
            super().data_received(data)
            return
        if self._held is not None:  # read while paused (a transport may deliver one more read)
            self._held += data
            return
        self._parse(data)

    # --- a bounded amount of parsing per turn ----------------------------------------------------------

    def holding_input(self) -> bool:
        return self._held is not None or self._deaf

    def _parse(self, data: bytes) -> None:
        """Pass this turn's share of data to uvicorn's parsing (at most _FRAMES_PER_TURN frames, and
        _BYTES_PER_TURN bytes); hold the rest, unread from the socket meanwhile, for the next turns."""
        if self.close_sent:
            self._after_close += len(data)
            if self._after_close > _LINGER_BYTES:  # its close frame is not coming: stop reading it
                self._stop_after_close()
                return
        cut = self._cut(data)
        if cut < len(data):
            self._held = data[cut:]
            if not self.transport.is_closing():
                self.transport.pause_reading()
            self._parse_next = self.loop.call_soon(self._parse_held)
            data = data[:cut]
        if data:
            super().data_received(data)

    def _parse_held(self) -> None:
        self._parse_next = None
        held, self._held = self._held, None
        if held is None or self._lost or self._lingering is not None or self.transport.is_closing():
            return  # gone, or failed meanwhile: nothing more is parsed
        self._parse(held)
        if self._held is None and not self._lost and not self.read_paused and not self.transport.is_closing():
            self.transport.resume_reading()  # through _BoundedTransport: not while writes stall

    def _cut(self, data: bytes) -> int:
        """How many of data's bytes to parse now: up to the end of its _FRAMES_PER_TURN-th frame, at
        most _BYTES_PER_TURN (a frame may be cut: the parser waits for its rest). Only the frames'
        headers are read (RFC 6455 5.2), to find where each ends."""
        limit = min(len(data), _BYTES_PER_TURN)
        pos = frames = 0
        left = self._frame_left
        part = self._header_part
        while pos < limit:
            if left:
                step = min(left, limit - pos)
                pos += step
                left -= step
                if not left:
                    frames += 1
                    if frames >= _FRAMES_PER_TURN:
                        break
                continue
            header = part + data[pos : pos + 14 - len(part)]
            size = _frame_size(header)
            if size is None:  # the data ends inside this header: passed on, the rest comes later
                part = header
                pos = len(data)
                break
            left = size - len(part)
            part = b""
        self._frame_left = left
        self._header_part = part
        return pos

    def _stop_after_close(self) -> None:
        """The peer sent more than _LINGER_BYTES after the server's close frame and not its own: it
        is not read from any more (what it sends waits in its own socket) and is closed
        _LINGER_SECONDS later (closed at once, the reset may destroy the close frame unread)."""
        if self._deaf:
            return
        self._deaf = True
        self._held = None
        if not self.transport.is_closing():
            self.transport.pause_reading()
        self.loop.call_later(_LINGER_SECONDS, self.transport.close)
