"""The schema, and the HTTP/websocket view that serves it."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Iterable
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode

import orjson
import strawberry
from cross_web import HTTPException
from graphql import GraphQLError, parse
from graphql.validation import MaxIntrospectionDepthRule, NoSchemaIntrospectionCustomRule
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.schema.config import StrawberryConfig
from strawberry.tools import merge_types
from strawberry.types import ExecutionResult
from strawberry.types.graphql import OperationType

from ..compat import graphql_core as graphql_compat
from ..compat import strawberry as strawberry_compat
from ..edge.demo import webchat_document_texts
from ..engine import meter
from ..engine.cost import CostCache, CostLimits, over_cost
from ..engine.gather import gather_with_cancel
from ..engine.handshake import LegacyWSHandler, MessageBudgets, PendingSockets, TransportWSHandler
from ..engine.http import JSON, GraphQLOverHTTP, refusal_body, request_media_type_refusal, response_media_type
from ..engine.limits import OperationLimits, check_document
from ..engine.operation import ChatOperation
from ..engine.persisted import PersistedDocuments, Refused
from ..engine.plan import Planner
from ..engine.prepared import AcceptedDocuments, is_executable, operation_type
from ..engine.shared import SharedEventExecutor, SharedResults, derive
from ..engine.streams import HttpStreams, preferred_stream, stream_request
from ..errors import Forbidden, Unauthenticated
from ..runtime import tracing
from ..services.documents import find_document, is_listed
from . import pricing  # noqa: F401 (declares the API's fields' prices in the registry)
from .context import Context, Deps
from .errors import redact, to_contract_errors
from .features import feature_modules
from .graphiql import GraphiQLFiles
from .mutations import Mutation
from .queries import Query
from .scalars import SCALARS
from .subscriptions import Subscription

# The feature modules (graphql/features/): each holds a feature's GraphQL fields (classes named Query,
# Mutation and Subscription, those it has), its types, and what it declares of them (rate limits,
# prices), so a feature's API is one module; the roots below take their fields after the house's own.
FEATURES = feature_modules()


def root(name: str, base: type) -> type:
    """A root type: base's fields, then each feature's `name` class's, in FEATURES' order."""
    extra = tuple(getattr(feature, name) for feature in FEATURES if hasattr(feature, name))
    return merge_types(name, (base, *extra)) if extra else base


class ChatSchema(strawberry.Schema):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(execution_context_class=SharedEventExecutor, **kwargs)
        self.shared_results = SharedResults()
        self.sharing = derive(self.subscription) if self.subscription is not None else None
        self.planner: Planner | None = None  # set by ChatGraphQL: runs subscription events by plan too

    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        # Expected errors (NOT_FOUND, BAD_USER_INPUT, ...) are answers, not incidents:
        # only internal ones are logged. Suggestions go where introspection goes.
        to_contract_errors(errors, hide_suggestions=self.config.disable_field_suggestions)

    async def execute(  # Strawberry's signature
        self,
        query: str | None,
        variable_values: dict[str, Any] | None = None,
        context_value: Any | None = None,
        root_value: Any | None = None,
        operation_name: str | None = None,
        allowed_operation_types: Iterable[OperationType] | None = None,
        operation_extensions: dict[str, Any] | None = None,
    ) -> ExecutionResult:
        # Only HTTP executes here (websockets subscribe): a subscription has no single answer to give,
        # so it is refused (BAD_USER_INPUT) instead of being run as a plain field (an internal error).
        if allowed_operation_types is None:
            allowed_operation_types = (OperationType.QUERY, OperationType.MUTATION)
        with tracing.operation(None, operation_name, query):
            return await super().execute(
                query,
                variable_values,
                context_value,
                root_value,
                operation_name,
                set(allowed_operation_types) - {OperationType.SUBSCRIPTION},
                operation_extensions,
            )


def _prebuilt_json(value: object) -> object:
    if isinstance(value, orjson.Fragment):
        return json.loads(orjson.dumps(value))
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_MAX_BRACKETS = 256  # more in a body (also inside strings) and it skips the direct path
DEFAULT_LIMITS = OperationLimits(max_depth=10, max_aliases=20, max_fields=300, max_selections=2000)
T = TypeVar("T")


def build_schema(
    *,
    introspection: bool = True,
    limits: OperationLimits = DEFAULT_LIMITS,
    max_tokens: int = 3000,
    max_batch_operations: int = 10,
    accepted: AcceptedDocuments | None = None,
    costs: CostCache | None = None,
) -> ChatSchema:
    """accepted: where documents that passed parsing and validation are kept (see prepared.py);
    costs: the operations' prices and their bounds (engine/cost.py; default bounds when None)."""
    costs = costs if costs is not None else CostCache(CostLimits())
    # The same rule classes for every request: the validation cache keys on them.
    rules = (MaxIntrospectionDepthRule,) if introspection else (NoSchemaIntrospectionCustomRule,)
    extensions: list[Any] = [
        # Accepted documents, token limit, operation limits, validation rules, fresh loaders,
        # relay wake-up (one extension, see its docstring).
        lambda: ChatOperation(max_tokens, limits, rules, accepted, costs),
    ]
    return ChatSchema(
        query=root("Query", Query),
        mutation=root("Mutation", Mutation),
        subscription=root("Subscription", Subscription),
        extensions=extensions,
        config=StrawberryConfig(
            scalar_map=SCALARS,
            disable_field_suggestions=not introspection,
            batching_config={"max_operations": max_batch_operations},
        ),
    )


schema = build_schema()  # what `schema.graphql` is generated from


class ChatTransportWSHandler(TransportWSHandler[Context]):
    """The graphql-transport-ws handler, on chatgql's context."""


class ChatLegacyWSHandler(LegacyWSHandler[Context]):
    """The legacy graphql-ws handler, on chatgql's context."""


class ChatGraphQL(GraphQLOverHTTP, GraphQL[Context, None]):
    """Strawberry's ASGI view with chatgql's context and websocket authentication."""

    graphql_transport_ws_handler_class = ChatTransportWSHandler
    graphql_ws_handler_class = ChatLegacyWSHandler

    def __init__(self, deps: Deps, **kwargs: Any) -> None:
        graphql_compat.use_gather_with_cancel(gather_with_cancel)
        settings = deps.settings
        self.accepted = AcceptedDocuments(maxsize=1024, max_chars=settings.document_cache_chars)
        self.planner = Planner(enabled=settings.planner, maxsize=1024, prebuilt=settings.prebuilt_pages)
        self.prepared = settings.prepared_documents
        self.parking = settings.park_subscriptions
        self.limits = OperationLimits(
            settings.max_query_depth, settings.max_aliases, settings.max_fields, settings.max_selections
        )
        self.costs = CostCache(CostLimits.of(settings))
        schema = build_schema(
            introspection=settings.introspection_enabled,
            limits=self.limits,
            max_tokens=settings.max_tokens,
            max_batch_operations=settings.max_batch_operations,
            accepted=self.accepted if self.prepared else None,
            costs=self.costs,
        )
        if not settings.shared_event_results:
            schema.sharing = None
        super().__init__(
            schema,
            graphql_ide="graphiql" if settings.graphiql_enabled else None,
            max_subscriptions_per_connection=settings.max_subscriptions_per_connection,
            connection_init_wait_timeout=timedelta(seconds=settings.ws_init_timeout_seconds),
            **kwargs,
        )
        self.deps = deps
        schema.planner = self.planner
        self.core_schema = strawberry_compat.core_schema(schema)
        self.graphiql = GraphiQLFiles(dev_sign_in=settings.dev_sign_in_enabled) if settings.graphiql_enabled else None
        self.pending = PendingSockets(settings.max_unauthenticated_ws_per_address)
        self.documents = PersistedDocuments(
            lambda document_id: find_document(deps.database, document_id),
            lambda text: is_listed(deps.database, text),
            allowlist=settings.documents_allowlist,
            served=webchat_document_texts() if settings.demo_enabled else None,
        )
        self.budgets = MessageBudgets(settings)
        self.streams = HttpStreams(self)

    async def render_graphql_ide(self, request: Request) -> Response:
        """chatgql's own GraphiQL page: every asset from this server (graphiql.py)."""
        assert self.graphiql is not None  # graphql_ide is set only when it is enabled
        return self.graphiql.page(request)

    async def get_context(self, request: Request | WebSocket, response: Response | WebSocket) -> Context:
        context = Context(deps=self.deps, request=request, response=response)
        # a websocket's token comes with connection_init; without a provider there is nothing to fetch
        if self.deps.keys is not None and not isinstance(request, WebSocket):
            await context.fetch_keys()
        return context

    async def on_ws_connect(self, context: Context) -> Any:
        """Refuse the connection unless connection_init carries a valid token."""
        await context.fetch_keys()
        try:
            _ = context.viewer_id
        except (Unauthenticated, Forbidden) as error:  # Forbidden: banned (edge/bans.py)
            raise ConnectionRejectionError({"message": error.message, "code": error.code, **error.extensions}) from None
        return await super().on_ws_connect(context)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """HTTP: cap the request body; refusals are GraphQL-shaped JSON with a code."""
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        receive = _capped(receive, self.deps.settings.max_request_bytes)
        try:
            response = None
            method = scope["method"]
            # An event stream (streams.py): graphql-sse, multipart subscriptions, or a request of
            # graphql-sse's single connection mode (PUT, DELETE, or one that carries a stream token).
            kind, streamed = stream_request(scope)
            if method == "POST":
                if self.prepared:
                    scope = _json_body_scope(scope)
                body = await _read_body(receive)
                data, response = await self._resolve_body(scope, body)
                if (
                    response is None
                    and streamed
                    and await self.streams.serve(scope, receive, send, kind, _json_or_none(body, data))
                ):
                    return
                if response is None and self.prepared:
                    response = await self._run_accepted(scope, body, data)
                if response is None:
                    receive = _replay(body if data is None else orjson.dumps(data))
            elif method == "GET":
                scope, response = await self._resolve_query_string(scope)
                if response is None and streamed and await self.streams.serve(scope, receive, send, kind, None):
                    return
            elif method in ("PUT", "DELETE"):
                await _read_body(receive)
                await self.streams.serve(scope, receive, send, kind, None)
                return
            if response is None:
                response = await self.run(Request(scope=scope, receive=receive))
        except ClientDisconnect:
            return  # nobody to answer
        except HTTPException as error:
            code = "LIMIT_EXCEEDED" if error.status_code == 413 else "BAD_USER_INPUT"
            # The reason may quote the request (an operationName): shortened; a lone surrogate can't be UTF-8.
            message = redact(error.reason, hide_suggestions=True)
            message = message.encode("utf-8", "backslashreplace").decode("utf-8")
            media_type = response_media_type(Headers(scope=scope).get("accept"))
            response = JSONResponse(
                refusal_body(message, code, media_type), status_code=error.status_code, media_type=media_type
            )
        await response(scope, receive, send)

    async def _resolve_body(self, scope: Scope, body: bytes) -> tuple[Any, Response | None]:
        """The JSON of a POST body whose requests name persisted documents (engine/persisted.py),
        with their texts in (None: the body stands as it is); the refusal when one may not run."""
        if not self.documents.applies(body):
            return None, None
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            if self.documents.allowlist:  # not read here, so not let through
                return None, self._refusal(scope, Refused("not JSON this server reads", "BAD_USER_INPUT"))
            return None, None  # refused by the ordinary path as it is
        try:
            for request in data if isinstance(data, list) else [data]:
                if isinstance(request, dict):
                    await self.documents.resolve(request)
        except Refused as refused:
            return None, self._refusal(scope, refused)
        return data, None

    async def _resolve_query_string(self, scope: Scope) -> tuple[Scope, Response | None]:
        """A GET's parameters, as _resolve_body does a POST's body."""
        query_string: bytes = scope.get("query_string", b"")
        if not self.documents.applies(query_string):
            return scope, None
        params = dict(parse_qsl(query_string.decode("latin-1"), keep_blank_values=True))
        request: dict[str, Any] = dict(params)
        if "extensions" in params:
            try:
                request["extensions"] = orjson.loads(params["extensions"])
            except orjson.JSONDecodeError:
                if self.documents.allowlist:
                    return scope, self._refusal(scope, Refused("extensions is not JSON", "BAD_USER_INPUT"))
                return scope, None  # the ordinary path refuses it
        try:
            await self.documents.resolve(request)
        except Refused as refused:
            return scope, self._refusal(scope, refused)
        if "extensions" in request:
            request["extensions"] = orjson.dumps(request["extensions"]).decode()
        return {**scope, "query_string": urlencode(request).encode("latin-1")}, None

    def _refusal(self, scope: Scope, refused: Refused) -> Response:
        error = GraphQLError(refused.message, extensions=refused.extensions)
        return self.graphql_response(ExecutionResult(data=None, errors=[error]), _header(scope, b"accept"))

    async def _run_accepted(self, scope: Scope, body: bytes, data: Any = None) -> Response | None:
        """A POST of a document accepted before: execute it directly (prepared.py), by plan (plan/).
        None: not that case; the request goes the ordinary way. scope: as _json_body_scope passed it
        (its Content-Type is application/json); data: the body's JSON if it was read already."""
        accept = _header(scope, b"accept")
        asks_stream = accept is not None and ("multipart/mixed" in accept or "text/event-stream" in accept)
        if asks_stream and preferred_stream(accept or "") is not None:  # a stream: HttpStreams' way
            return None
        if body.count(b"{") + body.count(b"[") > _MAX_BRACKETS:
            return None  # possibly nested deep: how deep JSON may go is the ordinary path's to say
        if data is None:
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError:
                return None
        if not isinstance(data, dict):
            return None
        query, variables, operation_name = data.get("query"), data.get("variables"), data.get("operationName")
        if not isinstance(query, str) or (document := self.accepted.get(query)) is None:
            return None
        if not isinstance(variables, dict | None) or not isinstance(operation_name, str | None):
            return None
        if data.get("extensions") not in (None, {}):
            return None  # extensions to read, or not an object: the ordinary path answers (400 for the latter)
        kind = operation_type(document, operation_name)
        if not is_executable(kind):
            return None
        cost = self._cost(document, operation_name, variables)
        if cost > self.costs.limits.max_cost:
            refusal = ExecutionResult(data=None, errors=[over_cost(cost, self.costs.limits.max_cost)])
            return self.graphql_response(refusal, accept)
        context = await self.get_context(Request(scope=scope), None)  # type: ignore[arg-type]
        with tracing.operation(None if kind is None else kind.value, operation_name, query):
            result = await self._within_timeout(
                self.planner.execute(self.schema, document, query, variables, operation_name, context)
            )
        return self.graphql_response(result, accept)

    def _cost(self, document: Any, operation_name: str | None, variables: Any) -> int:
        """The price of the operation a request runs (engine/cost.py); 0 when it names none."""
        priced = self.costs.cost(self.core_schema, document, operation_name, variables)
        return 0 if priced is None else priced[0]

    def _batch_cost(self, batch: list[Any]) -> int:
        """What a batch's operations cost together. An entry that does not parse or is over the
        operation limits counts nothing here: it is refused on its own, and runs nothing."""
        total = 0
        parsed: dict[str, Any] = {}  # a text sent several times is parsed once
        for entry in batch:
            query = entry.query
            if not isinstance(query, str):
                continue
            document = parsed.get(query) or self.accepted.get(query)
            if document is None:
                try:
                    document = parse(query, max_tokens=self.deps.settings.max_tokens)
                except GraphQLError:
                    continue
                if check_document(document, self.limits) is not None:
                    continue
                parsed[query] = document
            total += self._cost(document, entry.operation_name, entry.variables)
        return total

    def encode_json(self, data: object) -> str:
        """orjson; the standard library where orjson refuses (a lone surrogate, a non-string key),
        with an answer PostgreSQL built (orjson.Fragment: engine/prebuilt.py) taken as its JSON."""
        try:
            return orjson.dumps(data).decode()
        except TypeError:
            return json.dumps(data, default=_prebuilt_json)

    def parse_json(self, data: str | bytes) -> Any:
        """An HTTP body (or a GET's variables): an object, or a batch of them; else 400 BAD_USER_INPUT."""
        try:
            parsed = json.loads(data)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
            raise HTTPException(400, "Unable to parse request body as JSON") from None
        if not all(isinstance(item, dict) for item in (parsed if isinstance(parsed, list) else [parsed])):
            raise HTTPException(400, "a GraphQL request is a JSON object (or a list of them, for a batch)")
        return parsed

    def decode_json(self, data: str | bytes) -> object:
        """A websocket message: a JSON object, else the protocols' invalid-message answer (not a crash)."""
        try:
            parsed = json.loads(data)
        except json.JSONDecodeError:
            raise
        except (RecursionError, ValueError):  # nested deeper than Python's stack; an integer of 4,300+ digits
            raise json.JSONDecodeError("not JSON this server reads", "", 0) from None
        if not isinstance(parsed, dict):
            raise json.JSONDecodeError("a message must be a JSON object", "", 0)
        payload = parsed.get("payload")
        if isinstance(payload, dict) and isinstance(payload.get("query"), str):
            # A subscription keeps its document's text as long as it lives; thousands of
            # subscribers send the same one: keep one copy.
            payload["query"] = sys.intern(payload["query"])
        return parsed

    async def parse_http_body(self, request: Any) -> Any:
        data = await super().parse_http_body(request)
        limit = self.deps.settings.max_query_chars
        for item in data if isinstance(data, list) else [data]:
            if item.query is not None and len(item.query) > limit:
                raise HTTPException(413, f"the GraphQL document is longer than {limit} characters")
        return data

    async def execute_operation(self, *args: Any, **kwargs: Any) -> Any:
        """Every HTTP operation (or batch) gets request_timeout_seconds and max_request_cpu_ms; a
        batch's operations are priced together, before any of them runs."""
        batch = kwargs.get("request_data")
        if not isinstance(batch, list):
            return await self._within_timeout(super().execute_operation(*args, **kwargs))
        limit = self.costs.limits.max_cost
        cost = self._batch_cost(batch)
        if cost > limit:
            return [ExecutionResult(data=None, errors=[over_cost(cost, limit, "batch")]) for _ in batch]
        results = await self._within_timeout(super().execute_operation(*args, **kwargs))
        return results if isinstance(results, list) else [results for _ in batch]

    async def _within_timeout(self, operation: Awaitable[T]) -> T | ExecutionResult:
        settings = self.deps.settings
        timeout, cpu_ms = settings.request_timeout_seconds, settings.max_request_cpu_ms
        meter.install(asyncio.get_running_loop())
        try:
            async with asyncio.timeout(timeout):
                return await meter.within_cpu(operation, cpu_ms / 1000)
        except TimeoutError:
            error = GraphQLError(
                f"the request took longer than {timeout} s",
                extensions={"code": "LIMIT_EXCEEDED", "reason": "TIMEOUT"},
            )
        except meter.CpuLimitExceeded:
            error = GraphQLError(
                f"the request took more than {cpu_ms:g} ms of CPU time",
                extensions={"code": "LIMIT_EXCEEDED", "reason": "CPU"},
            )
        return ExecutionResult(data=None, errors=[error])


def _json_body_scope(scope: Scope) -> Scope:
    """A POST's scope with its Content-Type written as plain application/json (what Strawberry
    compares with, case-sensitively); HTTPException 415 unless it is JSON in UTF-8."""
    content_type = _header(scope, b"content-type") or ""
    if content_type == JSON:  # what clients send: accepted as it is, without parsing its parameters
        return scope
    if (refusal := request_media_type_refusal(content_type)) is not None:
        raise HTTPException(415, refusal)
    canonical = [(name, JSON.encode() if name == b"content-type" else value) for name, value in scope["headers"]]
    return {**scope, "headers": canonical}


def _json_or_none(body: bytes, data: Any) -> Any:
    """A POST body's JSON (data: already read), or None when it is not JSON."""
    if data is not None:
        return data
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _header(scope: Scope, name: bytes) -> str | None:
    """The first value of the header `name` (lower case), as Starlette's Headers(scope=scope).get
    reads it, in a fifth of its time (bench/results/micro.md): every accepted POST reads two."""
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes) -> Receive:
    """receive() for a body already read: the whole of it once, then a disconnect."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _capped(receive: Receive, limit: int) -> Receive:
    """receive() that refuses a body larger than limit bytes (HTTP 413) as it streams in."""
    seen = 0

    async def capped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise HTTPException(413, f"the request body is larger than {limit} bytes")
        return message

    return capped
