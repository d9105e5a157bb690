"""Subscriptions over plain HTTP: graphql-sse, in both of its modes, and multipart subscriptions.

Three transports, one subscription core: an operation runs through the schema's
`stream` (what the websocket handlers run), with a context of its own, so the
resolvers, the Dispatcher's bounded buffer and its resync errors, the resume
cursors and the prices are the websockets' own. What differs is the wire:

- graphql-sse, distinct connections mode: a GET or POST that accepts
  `text/event-stream` (and carries no stream token) is its operation's stream:
  `event: next` per result, `event: complete` at the end (graphql-sse's
  PROTOCOL.md). Errors found before execution come as a `next` too.
- graphql-sse, single connection mode: PUT reserves a stream (201, the token
  in the body; the viewer's bearer token is required), a GET that accepts
  `text/event-stream` with the token (header X-GraphQL-Event-Stream-Token or
  parameter `token`) opens it, a POST with the token and
  `extensions.operationId` runs an operation on it (202; its results come on
  the stream as `{"id", "payload"}`), DELETE `?operationId=` stops one (200).
  A reservation not opened within ws_init_timeout_seconds is dropped; one
  stream holds at most max_subscriptions_per_connection operations (past
  them an operation gets the websockets' LIMIT_EXCEEDED,
  SUBSCRIPTIONS_PER_CONNECTION, then its `complete`) and their prices
  together within the per-socket bound.
- multipart: a POST that accepts `multipart/mixed;subscriptionSpec=1.0`
  (Apollo Client's HTTP subscriptions) gets `{"payload": result}` parts, a
  `{}` heartbeat part every few seconds, and a transport error as
  `{"payload": null, "errors": [...]}` (the spec's).

The encodings are Strawberry's (strawberry.http.streaming). Its view serves the
distinct connections mode and multipart itself (`subscription_protocols`), but
not the single connection mode, nor a session's end, the budgets or the caps
below: the requests are handled here.

What one stream may hold or ask, as a websocket:

- every request (a stream opened, a reservation, an operation, a stop) takes
  one from the websockets' message budgets (the address's, and the user's
  when the token says whose): past them, 429 LIMIT_EXCEEDED;
- the session ends at the bearer token's `exp` and when the viewer is banned:
  an SSE stream then ends without `complete`, so that graphql-sse's client
  connects again (calling its `headers` again: the way to hand it a new token)
  and resumes; a multipart stream ends with an UNAUTHENTICATED (or FORBIDDEN)
  transport error;
- a heartbeat (an SSE comment every 15 s, a multipart `{}` every 5 s) keeps
  proxies from closing an idle stream and finds a peer that is gone: its
  writes stall, and a stream whose writes stay stalled for
  ws_write_timeout_seconds is aborted (server/httpprotocol.py), which ends its
  operations and lets go of what they held.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import orjson
from starlette.requests import Request
from starlette.types import Receive, Scope, Send
from strawberry.http.parse_content_type import parse_content_type
from strawberry.http.streaming import MultipartSubscriptionTransport, SSETransport
from strawberry.types import ExecutionResult
from strawberry.types.execution import PreExecutionError
from strawberry.types.graphql import OperationType

from ..edge.auth import token_expiry
from ..errors import BadUserInput, ChatError, Conflict, LimitExceeded, NotFound, Unauthenticated, banned
from .handshake import subscription_limit_error, ws_operation
from .http import JSON, response_body

log = logging.getLogger(__name__)

SSE = "sse"
MULTIPART = "multipart"
TOKEN_HEADER = b"x-graphql-event-stream-token"
SSE_HEARTBEAT_SECONDS = 15.0
MULTIPART_HEARTBEAT_SECONDS = 5.0

_UNKNOWN = NotFound("no such event stream (a stream token is good for one stream, opened in time, by its user)")
_TAKEN = Conflict("this event stream is open already: one stream per reservation")

_sse = SSETransport()
_multipart = MultipartSubscriptionTransport()


_JSON_MEDIA = frozenset(
    {"application/graphql-response+json", "application/graphql+json", "application/json", "application/*", "*/*"}
)


def stream_request(scope: Scope) -> tuple[str | None, bool]:
    """(SSE or MULTIPART when the request asks for an event stream, else None; whether it is one
    of these transports' requests at all: a stream, or one of the single connection mode's). One
    pass over the headers: every POST asks."""
    accept = token = None
    for key, value in scope["headers"]:
        if key == b"accept":
            accept = value
        elif key == TOKEN_HEADER:
            token = value
    kind = None
    if accept is not None and (b"event-stream" in accept or b"multipart/mixed" in accept):
        kind = preferred_stream(accept.decode("latin-1"))
    ours = (
        kind is not None
        or token is not None
        or scope["method"] in ("PUT", "DELETE")
        or b"token=" in scope.get("query_string", b"")
    )
    return kind, ours


def preferred_stream(accept: str) -> str | None:
    """SSE or MULTIPART when that is what the Accept header prefers: the highest q, the first named
    among equals. None when a JSON type comes first: clients that can take any of them (urql names
    JSON, then text/event-stream and multipart/mixed) get JSON for their queries and mutations."""
    best, best_quality = None, 0.0
    for part in accept.split(","):
        if not part.strip():
            continue
        media, params = parse_content_type(part)
        media = media.lower()
        try:
            quality = float(params.get("q", "1"))
        except ValueError:
            quality = 0.0
        if media == "text/event-stream":
            kind: str | None = SSE
        elif _multipart.accepts_content_type(media, params):
            kind = MULTIPART
        elif media in _JSON_MEDIA:
            kind = None
        else:
            continue
        if quality > best_quality:
            best, best_quality = kind, quality
    return best


def stream_token(scope: Scope) -> str | None:
    """The single connection mode's reservation token of a request (header, else the `token` parameter)."""
    token = _header(scope, TOKEN_HEADER)
    if token is None:
        token = _params(scope).get("token")
    return token or None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


def _params(scope: Scope) -> dict[str, str]:
    return dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))


def _address(scope: Scope) -> str:
    client = scope.get("client")
    return client[0] if client else ""


@dataclass
class _Session:
    """A stream's viewer and how its session ends: at the token's expiry, or a ban."""

    ended: asyncio.Future[ChatError]
    viewer: str | None = None
    timer: asyncio.TimerHandle | None = None
    on_ban: Callable[[], None] | None = None  # given to the ban list while the session lasts

    def end(self, error: ChatError) -> None:
        if not self.ended.done():
            self.ended.set_result(error)


@dataclass
class _Reservation:
    """A single connection mode stream: reserved by PUT, opened by GET, its operations by id."""

    token: str
    viewer: str
    expires_at: float | None
    write: Callable[[str], Awaitable[None]] | None = None  # set while the stream is open
    operations: dict[str, asyncio.Task] = field(default_factory=dict)
    costs: dict[object, int] = field(default_factory=dict)  # the operations' prices (handshake.SocketContext)
    drop: asyncio.TimerHandle | None = None  # an unopened reservation's end


class HttpStreams:
    """The HTTP subscription transports of a GraphQL view (graphql/schema.ChatGraphQL). The view
    gives: schema, deps (settings, bans), budgets (handshake.MessageBudgets), get_context and
    encode_json."""

    def __init__(self, view: Any) -> None:
        self.view = view
        self.reservations: dict[str, _Reservation] = {}

    @property
    def settings(self) -> Any:
        return self.view.deps.settings

    # --- requests -----------------------------------------------------------------------------------

    async def serve(self, scope: Scope, receive: Receive, send: Send, kind: str | None, data: Any) -> bool:
        """Answer the request if it is one of the transports' (data: a POST's JSON body, or None);
        False: not theirs, the ordinary path answers it."""
        method = scope["method"]
        token = stream_token(scope)
        if method == "PUT":
            await self._reserve(scope, receive, send)
            return True
        if method == "DELETE":
            await self._stop(scope, receive, send, token)
            return True
        if token is not None and method == "GET" and kind == SSE:
            await self._open(scope, receive, send, token)
            return True
        if token is not None and method == "POST":
            await self._operation(scope, receive, send, token, data)
            return True
        if kind is None:
            return False
        request = _params(scope) if method == "GET" else data
        if not isinstance(request, dict):
            return False  # a batch, or not JSON: the ordinary path refuses it
        await self._distinct(scope, receive, send, kind, request)
        return True

    async def _reserve(self, scope: Scope, receive: Receive, send: Send) -> None:
        context = await self.view.get_context(Request(scope), None)
        try:
            viewer = context.viewer_id
        except ChatError as error:
            await _refuse(send, 401 if isinstance(error, Unauthenticated) else 403, error)
            return
        if not self.view.budgets.take(_address(scope), viewer):
            await _refuse_flood(send)
            return
        token = secrets.token_urlsafe(24)
        reservation = _Reservation(token, viewer, token_expiry(_header(scope, b"authorization")))
        loop = asyncio.get_running_loop()
        reservation.drop = loop.call_later(self.settings.ws_init_timeout_seconds, self._drop_unopened, token)
        self.reservations[token] = reservation
        await _plain(send, 201, token)

    def _drop_unopened(self, token: str) -> None:
        reservation = self.reservations.get(token)
        if reservation is not None and reservation.write is None:
            del self.reservations[token]

    async def _open(self, scope: Scope, receive: Receive, send: Send, token: str) -> None:
        reservation = self.reservations.get(token)
        if reservation is None or reservation.write is not None:  # one stream per reservation
            await _refuse(send, 404 if reservation is None else 409, _UNKNOWN if reservation is None else _TAKEN)
            return
        if not self.view.budgets.take(_address(scope), reservation.viewer):
            await _refuse_flood(send)
            return
        if reservation.drop is not None:
            reservation.drop.cancel()
            reservation.drop = None
        lock = asyncio.Lock()

        async def write(text: str) -> None:
            async with lock:
                await send({"type": "http.response.body", "body": text.encode(), "more_body": True})

        reservation.write = write  # taken: before anything is awaited
        session = self._session(reservation.viewer, reservation.expires_at)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _headers(SSE)})
            await _until_gone(receive, session.ended, _heartbeats(write, SSE))
        finally:
            self._end_session(session)
            del self.reservations[token]
            operations = list(reservation.operations.values())
            for task in operations:
                task.cancel()
            for task in operations:
                with suppress(asyncio.CancelledError):
                    await task
            with suppress(Exception):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _operation(self, scope: Scope, receive: Receive, send: Send, token: str, data: Any) -> None:
        reservation = self.reservations.get(token)
        context = await self.view.get_context(Request(scope), None)
        viewer = _viewer_or_none(context)
        if reservation is None or reservation.write is None or viewer != reservation.viewer:
            # Someone else's token is as unknown as a wrong one.
            await _refuse(send, 404, _UNKNOWN)
            return
        if not self.view.budgets.take(_address(scope), viewer):
            await _refuse_flood(send)
            return
        extensions = data.get("extensions") if isinstance(data, dict) else None
        operation_id = extensions.get("operationId") if isinstance(extensions, dict) else None
        if not isinstance(operation_id, str) or not operation_id:
            await _refuse(send, 400, BadUserInput("the operation needs extensions.operationId (a string)"))
            return
        if operation_id in reservation.operations:
            await _refuse(send, 409, Conflict("an operation with this operationId is running on this stream"))
            return
        await _plain(send, 202, "")
        write = reservation.write
        context.subscription_costs = reservation.costs
        context.token_expires_at = reservation.expires_at

        async def next_(result: dict) -> None:
            await write(_sse.encode_event("next", self.view.encode_json({"id": operation_id, "payload": result})))

        async def complete() -> None:
            await write(_sse.encode_event("complete", self.view.encode_json({"id": operation_id})))

        limit = self.settings.max_subscriptions_per_connection
        if len(reservation.operations) >= limit:
            await next_({"data": None, "errors": [subscription_limit_error(limit)]})
            await complete()
            return

        async def run() -> None:
            try:
                async for result in self._results(context, data, _ALL):
                    await next_(result)
                await complete()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("a subscription over HTTP failed")
                with suppress(Exception):
                    await complete()
            finally:
                reservation.operations.pop(operation_id, None)

        reservation.operations[operation_id] = asyncio.ensure_future(run())

    async def _stop(self, scope: Scope, receive: Receive, send: Send, token: str | None) -> None:
        reservation = self.reservations.get(token) if token is not None else None
        if reservation is None:
            await _refuse(send, 404, _UNKNOWN)
            return
        if not self.view.budgets.take(_address(scope), reservation.viewer):
            await _refuse_flood(send)
            return
        task = reservation.operations.pop(_params(scope).get("operationId", ""), None)
        if task is not None:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
        await _plain(send, 200, "")

    async def _distinct(self, scope: Scope, receive: Receive, send: Send, kind: str, request: dict) -> None:
        """One operation, its own stream (graphql-sse's distinct connections mode, or multipart)."""
        context = await self.view.get_context(Request(scope), None)
        viewer = _viewer_or_none(context)
        if not self.view.budgets.take(_address(scope), viewer):
            await _refuse_flood(send)
            return
        expires_at = token_expiry(_header(scope, b"authorization")) if viewer is not None else None
        context.token_expires_at = expires_at
        allowed = _GET if scope["method"] == "GET" else _ALL
        if kind == MULTIPART:
            allowed = _SUBSCRIPTION
        await send({"type": "http.response.start", "status": 200, "headers": _headers(kind)})

        async def write(text: str) -> None:
            await send({"type": "http.response.body", "body": text.encode(), "more_body": True})

        encode = self.view.encode_json

        async def results() -> None:
            if kind == MULTIPART:
                await write("--graphql")
            async for result in self._results(context, request, allowed):
                await write(_encode_next(kind, result, encode))
            await write(_sse.encode_complete() if kind == SSE else _multipart.encode_complete())

        session = self._session(viewer, expires_at)
        try:
            ended = await _until_gone(receive, session.ended, _heartbeats(write, kind, results()))
            if ended is not None and kind == MULTIPART:  # the session's end, told as a transport error
                error = {"message": ended.message, "extensions": {"code": ended.code, **ended.extensions}}
                body = _multipart.encode_multipart_data({"payload": None, "errors": [error]}, encode)
                with suppress(Exception):
                    await write(body + "--\r\n")
        finally:
            self._end_session(session)
            with suppress(Exception):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    # --- the operation, and the session -------------------------------------------------------------

    async def _results(self, context: Any, request: dict, allowed: frozenset) -> AsyncIterator[dict]:
        """The operation's results as response bodies: the schema's stream, as the websockets run it."""
        slot = object()
        ws_operation.set(slot)  # its price is held under it in context.subscription_costs while it runs
        variables = request.get("variables")
        extensions = request.get("extensions")
        if isinstance(variables, str) or isinstance(extensions, str):  # a GET's parameters
            try:
                variables = orjson.loads(variables) if isinstance(variables, str) else variables
                extensions = orjson.loads(extensions) if isinstance(extensions, str) else extensions
            except orjson.JSONDecodeError:
                yield {"data": None, "errors": [{"message": "variables and extensions must be JSON objects"}]}
                return
        query, operation_name = request.get("query"), request.get("operationName")
        try:
            if (
                not isinstance(query, str)
                or not isinstance(variables, dict | None)
                or not isinstance(operation_name, str | None)
            ):
                error = (
                    "a GraphQL request has a query (a string), and may have variables (an object) and an operationName"
                )
                yield {"data": None, "errors": [{"message": error, "extensions": {"code": "BAD_USER_INPUT"}}]}
                return
            source = await self.view.schema.stream(
                query,
                variable_values=variables,
                context_value=context,
                operation_name=operation_name,
                operation_extensions=extensions if isinstance(extensions, dict) else None,
                allowed_operation_types=allowed,
            )
            async with contextlib.aclosing(source):
                async for result in source:
                    if isinstance(result, PreExecutionError | ExecutionResult):
                        yield response_body(result, JSON)
                    else:  # incremental delivery (@defer, @stream): not served over these transports
                        yield {"data": None, "errors": [{"message": "@defer and @stream are not supported here"}]}
                        return
        finally:
            context.subscription_costs.pop(slot, None)

    def _session(self, viewer: str | None, expires_at: float | None) -> _Session:
        session = _Session(asyncio.get_running_loop().create_future(), viewer)
        if viewer is None:
            return session
        if expires_at is not None:
            delay = max(0.0, expires_at - time.time())
            expired = Unauthenticated("the token has expired: connect again with a new one")
            session.timer = asyncio.get_running_loop().call_later(delay, session.end, expired)
        self.view.deps.bans.session_started(viewer, self._banned(session))
        return session

    def _banned(self, session: _Session) -> Callable[[], None]:
        def end() -> None:
            session.end(banned(None))

        session.on_ban = end
        return end

    def _end_session(self, session: _Session) -> None:
        if session.timer is not None:
            session.timer.cancel()
        if session.viewer is not None and session.on_ban is not None:
            self.view.deps.bans.session_ended(session.viewer, session.on_ban)


_ALL = frozenset({OperationType.QUERY, OperationType.MUTATION, OperationType.SUBSCRIPTION})
_GET = frozenset({OperationType.QUERY, OperationType.SUBSCRIPTION})
_SUBSCRIPTION = frozenset({OperationType.SUBSCRIPTION})


def _viewer_or_none(context: Any) -> str | None:
    try:
        return context.viewer_id
    except ChatError:
        return None


def _encode_next(kind: str, result: dict, encode: Callable[[object], str]) -> str:
    """One result, as an SSE `next` event or a multipart part (Strawberry's encodings)."""
    if kind == SSE:
        return _sse.encode_event("next", encode(result))
    return _multipart.encode_multipart_data({"payload": result}, encode)


def _headers(kind: str) -> list[tuple[bytes, bytes]]:
    transport = _sse if kind == SSE else _multipart
    return [(name.lower().encode(), value.encode()) for name, value in transport.headers.items()]


async def _heartbeats(
    write: Callable[[str], Awaitable[None]], kind: str, results: Awaitable[None] | None = None
) -> None:
    """results written (if any) while a heartbeat goes every interval; returns when results end."""
    interval = SSE_HEARTBEAT_SECONDS if kind == SSE else MULTIPART_HEARTBEAT_SECONDS
    beat = _sse.encode_comment("ping") if kind == SSE else _multipart.heartbeat_message(lambda _: "{}")

    async def beats() -> None:
        if kind == MULTIPART:
            await write(beat)
        while True:
            await asyncio.sleep(interval)
            await write(beat)

    if results is None:
        await beats()
        return
    beating = asyncio.ensure_future(beats())
    try:
        await results
    finally:
        beating.cancel()
        with suppress(asyncio.CancelledError):
            await beating


async def _until_gone(receive: Receive, ended: asyncio.Future[ChatError], work: Awaitable[None]) -> ChatError | None:
    """Run work until it ends, the client goes, or the session ends (then its error)."""
    working = asyncio.ensure_future(work)
    watching = asyncio.ensure_future(_disconnected(receive))
    try:
        waits: set[asyncio.Future[Any]] = {working, watching, ended}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (working, watching):
            task.cancel()
        for task in (working, watching):
            with suppress(asyncio.CancelledError, Exception):
                await task
    if working.done() and not working.cancelled() and working.exception() is not None:
        log.error("a stream over HTTP failed", exc_info=working.exception())
    return ended.result() if ended.done() else None


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _plain(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _refuse(send: Send, status: int, error: ChatError) -> None:
    extensions = {"code": error.code, **error.extensions}
    body = orjson.dumps({"errors": [{"message": error.message, "extensions": extensions}]})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", JSON.encode()), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _refuse_flood(send: Send) -> None:
    await _refuse(
        send, 429, LimitExceeded("too many requests: the websockets' message budget is spent", reason="RATE_LIMITED")
    )
