"""Traces (OpenTelemetry): every span chatgql makes is made here (docs/operating/tracing.md).

Off unless the OTEL_* variables name a receiver (settings.tracing): then `ON` is False, nothing of
OpenTelemetry is imported, and every hook is a test of `ON` at its call site, or of an event's type
(a Traced one, never made while off) on the live path.

On, a send is one trace, across processes:

- POST /graphql (a server span, continuing the request's traceparent header), its GraphQL
  operation (named by the operation, never with its variables);
- each service's unit of work on the database (a transaction, or a connection in autocommit, named
  by the function that opened it), its statements (named by the store function that runs them,
  never with their parameters) and its COMMIT;
- in the process that relays it, the outbox row's relay and its Kafka produce; in the one that
  consumes it, the Kafka consume, the bus hop (the event handed to this process's subscriptions)
  and the websocket frame to each subscriber, the first `frames_per_event` of them only: a
  fan-out to a group of 100,000 makes that many frame spans, not one per member.

The context crosses as a W3C traceparent: in the outbox row (the event's JSON, key TRACE_KEY,
which the relay takes out of what it publishes), in the Kafka record's headers, in the bus
envelope. Statements and units of work outside a trace (the relay's reads, background loops) make
no span.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import asyncpg

ON = False
TRACE_KEY = "traceparent"  # the outbox payload's key, the Kafka header's name
_HEADER = TRACE_KEY.encode()

_tracer: Any = None
_provider: Any = None
_trace: Any = None  # opentelemetry.trace, once started
_context: Any = None  # opentelemetry.context
_frames_per_event = 16
_NO_SPAN = contextlib.nullcontext()


def start(
    enabled: bool,
    service: str,
    protocol: str = "http/protobuf",
    frames_per_event: int = 16,
    exporter: Any = None,
) -> None:
    """Export spans over OTLP (protocol: grpc or http/protobuf) when enabled; once per process.
    The exporter's endpoint, headers and timeouts, the sampler and the batch processor's settings
    are the OTEL_* variables', read by OpenTelemetry's SDK; service: the service.name unless
    OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) says another. exporter: a span exporter to
    hand each span to as it ends, instead (a test's)."""
    global ON, _tracer, _provider, _frames_per_event, _trace, _context
    if not enabled or ON:
        return
    try:
        from opentelemetry import context, trace
    except ImportError:
        raise RuntimeError(
            "the OTEL_* variables ask for traces, but OpenTelemetry is not installed: pip install 'chatgql[otel]'"
            " (or CHATGQL_TRACING=false)"
        ) from None
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    _provider = TracerProvider(resource=resource)
    if exporter is not None:
        _provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        _provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HTTPExporter

        _provider.add_span_processor(BatchSpanProcessor(HTTPExporter()))
    _tracer = _provider.get_tracer("chatgql")
    _frames_per_event = frames_per_event
    _trace, _context = trace, context
    ON = True


def stop() -> None:
    """Export what is left and stop (the process ends)."""
    global ON
    if ON:
        ON = False  # spans still made (an event under way) go nowhere
        _provider.shutdown()


# --- contexts ---------------------------------------------------------------------------------


def _parent(traceparent: str | bytes | None) -> Any:
    """The context a W3C traceparent names (None: none, or not a valid one)."""
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if isinstance(traceparent, bytes):
        traceparent = traceparent.decode("ascii", "replace")
    context = TraceContextTextMapPropagator().extract({TRACE_KEY: traceparent})
    return context if _trace.get_current_span(context).get_span_context().is_valid else None


def _traceparent(span: Any) -> str | None:
    """span's W3C traceparent, when it is sampled (an unsampled one is not carried on)."""
    ctx = span.get_span_context()
    if not ctx.is_valid or not ctx.trace_flags.sampled:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _in_trace() -> bool:
    return ON and _trace.get_current_span().is_recording()


def current() -> str | None:
    """The traceparent of the span now current, if any and sampled."""
    return _traceparent(_trace.get_current_span())


def stamp(payload: dict[str, Any]) -> None:
    """An event written in a trace carries it, in its outbox row."""
    traceparent = current()
    if traceparent is not None:
        payload[TRACE_KEY] = traceparent


# --- HTTP and GraphQL ---------------------------------------------------------------------------


async def http_request(scope: Any, receive: Any, send: Any, app: Callable[[Any, Any, Any], Awaitable[None]]) -> None:
    """An HTTP request, as a server span continuing the request's traceparent header."""
    from opentelemetry.trace import SpanKind

    header = next((value for name, value in scope["headers"] if name == _HEADER), None)
    status = 0

    async def sending(message: Any) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    with _tracer.start_as_current_span(
        f"{scope['method']} {scope['path']}",
        context=_parent(header),
        kind=SpanKind.SERVER,
        attributes={"http.request.method": scope["method"], "url.path": scope["path"]},
    ) as span:
        await app(scope, receive, sending)
        span.set_attribute("http.response.status_code", status)


def operation(kind: str | None, name: str | None, query: str | None = None) -> contextlib.AbstractContextManager[Any]:
    """A GraphQL operation, by its kind (query or mutation; None: read off the document's text) and its
    name only (None: the name of the document's first operation, as its text says)."""
    if not ON:
        return _NO_SPAN
    if name is None and query:  # the document's one operation, unless it is anonymous
        named = _NAMED.match(query)
        name = named.group(2) if named else None
    label = (name or "anonymous")[:100]
    kind = kind or _kind(query or "", name)
    return _tracer.start_as_current_span(
        f"{kind} {label}", attributes={"graphql.operation.type": kind, "graphql.operation.name": label}
    )


_NAMED = re.compile(r"\s*(query|mutation|subscription)\s+([_A-Za-z][_0-9A-Za-z]*)")


def _kind(query: str, name: str | None) -> str:
    """The kind of the operation `name` of a document not parsed yet, as its text says (a span's name)."""
    if name:
        found = re.search(rf"\b(query|mutation|subscription)\s+{re.escape(name)}\b", query)
        if found:
            return found.group(1)
    head = query.lstrip()
    return next((kind for kind in ("mutation", "subscription") if head.startswith(kind)), "query")


# --- the database -------------------------------------------------------------------------------


def _function(frame: Any) -> str:
    """A frame's function as module.function, without the package's name."""
    module = frame.f_globals.get("__name__", "?")
    return f"{module.removeprefix('chatgql.')}.{frame.f_code.co_name}"


class _Unit:
    """A service's unit of work on the database: wraps the pool's acquire() (or a transaction)."""

    __slots__ = ("_inner", "_name", "_span", "_token")

    def __init__(self, inner: Any, name: str) -> None:
        self._inner = inner
        self._name = name
        self._span: Any = None
        self._token: Any = None

    async def __aenter__(self) -> Any:
        if _in_trace():
            self._span = _tracer.start_span(self._name)
            self._token = _context.attach(_trace.set_span_in_context(self._span))
        return await self._inner.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._inner.__aexit__(*exc)
        finally:
            if self._span is not None:
                _context.detach(self._token)
                self._span.end()


def unit(inner: Any, depth: int = 2) -> Any:
    """inner (an async context manager giving a connection), as a span named by its caller's caller
    (depth frames up from here): the service function that opened it."""
    return _Unit(inner, _function(sys._getframe(depth)))


def _statement(query: str, caller: Any) -> Any:
    """A statement's span: named by the store function that runs it (a transaction's BEGIN and
    COMMIT by their SQL), with its kind of statement; never its parameters."""
    words = query.split(None, 1)
    verb = words[0].rstrip(";").upper() if words else ""
    module = caller.f_globals.get("__name__", "")
    name = verb if module.startswith("asyncpg") else _function(caller)
    return _tracer.start_as_current_span(name, attributes={"db.system.name": "postgresql", "db.operation.name": verb})


class TracedConnection(asyncpg.Connection):
    """asyncpg's connection, each statement a span when it runs in a trace (the pool's and the
    dedicated connections' class while tracing is on)."""

    async def execute(self, query: str, *args: Any, **kwargs: Any) -> Any:
        if not _in_trace():
            return await super().execute(query, *args, **kwargs)
        with _statement(query, sys._getframe(1)):
            return await super().execute(query, *args, **kwargs)

    async def executemany(self, command: str, args: Any, **kwargs: Any) -> Any:
        if not _in_trace():
            return await super().executemany(command, args, **kwargs)
        with _statement(command, sys._getframe(1)):
            return await super().executemany(command, args, **kwargs)

    async def fetch(self, query: str, *args: Any, **kwargs: Any) -> Any:
        if not _in_trace():
            return await super().fetch(query, *args, **kwargs)
        with _statement(query, sys._getframe(1)):
            return await super().fetch(query, *args, **kwargs)

    async def fetchrow(self, query: str, *args: Any, **kwargs: Any) -> Any:
        if not _in_trace():
            return await super().fetchrow(query, *args, **kwargs)
        with _statement(query, sys._getframe(1)):
            return await super().fetchrow(query, *args, **kwargs)

    async def fetchval(self, query: str, *args: Any, **kwargs: Any) -> Any:
        if not _in_trace():
            return await super().fetchval(query, *args, **kwargs)
        with _statement(query, sys._getframe(1)):
            return await super().fetchval(query, *args, **kwargs)


# --- the live path ------------------------------------------------------------------------------


class Traced(tuple):
    """A stamped event (event, commit time) on its way to subscribers with its trace: `parent`,
    the context of the hop that handed it on; `frames`, how many of its frames still get a span."""

    parent: Any
    frames: int


def _traced(event: Any, committed_at: float | None, parent: Any) -> Traced:
    item = Traced((event, committed_at))
    item.parent = parent
    item.frames = _frames_per_event
    return item


@contextlib.contextmanager
def relaying(traceparents: Sequence[str | None]) -> Iterator[list[str | None]]:
    """The relay of a batch of outbox rows (their traceparents, None for a row written outside a
    trace): a span for each traced row, child of the work that wrote it; gives the traceparent
    each row's record goes on with."""
    from opentelemetry.trace import SpanKind

    spans = [
        None if parent is None else _tracer.start_span("outbox.relay", context=parent, kind=SpanKind.INTERNAL)
        for parent in map(_parent, traceparents)
    ]
    try:
        yield [None if span is None else _traceparent(span) for span in spans]
    finally:
        for span in spans:
            if span is not None:
                span.end()


@contextlib.contextmanager
def producing(traceparents: Sequence[str | None], topic: str) -> Iterator[list[Any]]:
    """The Kafka produce of a batch (until every record is acknowledged): a span for each traced
    record; gives each record's headers (its traceparent header), None for an untraced one."""
    from opentelemetry.trace import SpanKind

    attributes = {"messaging.system": "kafka", "messaging.destination.name": topic}
    spans = [
        None
        if parent is None
        else _tracer.start_span(f"send {topic}", context=parent, kind=SpanKind.PRODUCER, attributes=attributes)
        for parent in map(_parent, traceparents)
    ]
    try:
        yield [
            None if span is None or (tp := _traceparent(span)) is None else [(TRACE_KEY, tp.encode())] for span in spans
        ]
    except BaseException as error:
        for span in spans:
            if span is not None:
                span.record_exception(error)
        raise
    finally:
        for span in spans:
            if span is not None:
                span.end()


def _header(headers: Any) -> bytes | None:
    for name, value in headers or ():
        if name == TRACE_KEY:
            return value
    return None


@contextlib.contextmanager
def consuming(records: Sequence[Any], decode: Callable[[bytes], Any]) -> Iterator[list[Any]]:
    """The Kafka consume of a batch of records, handed on: a span for each record with a traceparent
    header, until the batch is handed on; gives each record as (event, commit time), Traced for a
    traced one (its consume span the parent of the next hop)."""
    from opentelemetry.trace import SpanKind

    spans = []
    stamped: list[Any] = []
    for record in records:
        event, at = decode(record.value), record.timestamp / 1000
        parent = _parent(_header(record.headers))
        if parent is None:
            stamped.append((event, at))
            continue
        span = _tracer.start_span(
            f"receive {record.topic}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={"messaging.system": "kafka", "messaging.destination.name": record.topic},
        )
        spans.append(span)
        stamped.append(_traced(event, at, _trace.set_span_in_context(span)))
    try:
        yield stamped
    finally:
        for span in spans:
            span.end()


def traceparent_of(item: Any) -> str | None:
    """The traceparent a Traced item goes on with (None for a plain one): the bus envelope's."""
    if type(item) is not Traced or _trace is None:
        return None
    return _traceparent(_trace.get_current_span(item.parent))


def arrived(event: Any, committed_at: float | None, traceparent: str | bytes | None) -> Any:
    """An event off the bus: Traced when its envelope carried a traceparent."""
    parent = _parent(traceparent) if ON else None
    return (event, committed_at) if parent is None else _traced(event, committed_at, parent)


@contextlib.contextmanager
def delivering(item: Any, kind: str) -> Iterator[Traced]:
    """The bus hop: a traced event handed to this process's subscriptions. Gives the item the
    subscriptions are offered (its frames the children of this span)."""
    span = _tracer.start_span("bus.deliver", context=item.parent, attributes={"chatgql.event.type": kind})
    try:
        yield _traced(item[0], item[1], _trace.set_span_in_context(span))
    finally:
        span.end()


def frame(item: Any) -> Any:
    """A subscriber's websocket frame for a traced event: a span from when its subscription takes
    the event until it takes the next one (the frame is built and written between), for the first
    `frames_per_event` subscribers only; None past them (or when tracing stopped)."""
    if not ON or item.frames <= 0:
        return None
    item.frames -= 1
    return _tracer.start_span("websocket.frame", context=item.parent, start_time=time.time_ns())


def frame_sent(span: Any) -> None:
    span.end()
