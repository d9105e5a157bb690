"""The schema, and the HTTP/websocket view that serves it."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterable
from typing import Any

from cross_web import HTTPException

import strawberry
from graphql import GraphQLError
from graphql.validation import NoSchemaIntrospectionCustomRule
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.extensions import ParserCache, ValidationCache
from strawberry.schema.config import StrawberryConfig
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import BaseGraphQLTransportWSHandler
from strawberry.types import ExecutionResult
from strawberry.types.graphql import OperationType

from ..errors import Unauthenticated
from .context import ChatOperation, Context, Deps
from .errors import to_contract_errors
from .limits import OperationLimits, limits_rule
from .mutations import Mutation
from .queries import Query
from .scalars import SCALARS
from .shared import SharedEventExecutor, SharedResults
from .subscriptions import Subscription


class ChatSchema(strawberry.Schema):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, execution_context_class=SharedEventExecutor, **kwargs)
        self.shared_results = SharedResults()

    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        # Expected errors (NOT_FOUND, BAD_USER_INPUT, ...) are answers, not incidents:
        # only internal ones are logged.
        to_contract_errors(errors)

    async def execute(
        self, *args: Any, allowed_operation_types: Iterable[OperationType] | None = None, **kwargs: Any
    ) -> ExecutionResult:
        # Only HTTP executes here (websockets subscribe): a subscription has no single answer to give,
        # so it is refused (BAD_USER_INPUT) instead of being run as a plain field (an internal error).
        if allowed_operation_types is None:
            allowed_operation_types = (OperationType.QUERY, OperationType.MUTATION)
        return await super().execute(
            *args, allowed_operation_types=set(allowed_operation_types) - {OperationType.SUBSCRIPTION}, **kwargs
        )


DEFAULT_LIMITS = OperationLimits(max_depth=10, max_aliases=20, max_fields=300)


def build_schema(
    *,
    introspection: bool = True,
    limits: OperationLimits = DEFAULT_LIMITS,
    max_tokens: int = 3000,
    max_batch_operations: int = 10,
) -> ChatSchema:
    # The same rule classes for every request: ValidationCache keys on them.
    rules = (limits_rule(limits),) + (() if introspection else (NoSchemaIntrospectionCustomRule,))
    extensions: list[Any] = [
        # Token limit, validation rules, fresh loaders, relay wake-up (one extension, see its docstring).
        # Before the parser cache: it sets the parser's token limit.
        lambda: ChatOperation(max_tokens, rules),
        lambda: ParserCache(maxsize=1024),
        lambda: ValidationCache(maxsize=1024),
    ]
    return ChatSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        extensions=extensions,
        config=StrawberryConfig(
            scalar_map=SCALARS,
            disable_field_suggestions=not introspection,
            batching_config={"max_operations": max_batch_operations},
        ),
    )


schema = build_schema()  # what `schema.graphql` is generated from


class _TransportWSHandler(BaseGraphQLTransportWSHandler):
    async def handle_connection_init(self, message: Any) -> None:
        await super().handle_connection_init(message)
        task = self.connection_init_timeout_task
        if self.connection_init_received and task is not None and (task.done() or task.cancelling()):
            # Cancelled (its job is over): let it go rather than keep it as long as the connection.
            self.connection_init_timeout_task = None


class ChatGraphQL(GraphQL):
    """Strawberry's ASGI view with chatgql's context and websocket authentication."""

    graphql_transport_ws_handler_class = _TransportWSHandler

    def __init__(self, deps: Deps, **kwargs: Any) -> None:
        settings = deps.settings
        super().__init__(
            build_schema(
                introspection=settings.introspection_enabled,
                limits=OperationLimits(settings.max_query_depth, settings.max_aliases, settings.max_fields),
                max_tokens=settings.max_tokens,
                max_batch_operations=settings.max_batch_operations,
            ),
            graphql_ide="graphiql" if settings.graphiql_enabled else None,
            max_subscriptions_per_connection=settings.max_subscriptions_per_connection,
            **kwargs,
        )
        self.deps = deps

    async def get_context(self, request: Request | WebSocket, response: Response | WebSocket) -> Context:
        return Context(deps=self.deps, request=request, response=response)

    async def on_ws_connect(self, context: Context) -> Any:
        """Refuse the connection unless connection_init carries a valid token."""
        try:
            context.viewer_id
        except Unauthenticated as error:
            raise ConnectionRejectionError({"message": error.message, "code": error.code}) from None
        return await super().on_ws_connect(context)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """HTTP: cap the request body; refusals are GraphQL-shaped JSON with a code."""
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        request = Request(scope=scope, receive=_capped(receive, self.deps.settings.max_request_bytes))
        try:
            response = await self.run(request)
        except HTTPException as error:
            code = "LIMIT_EXCEEDED" if error.status_code == 413 else "BAD_USER_INPUT"
            # The reason may quote the request (an operationName); a lone surrogate can't be UTF-8.
            message = error.reason.encode("utf-8", "backslashreplace").decode("utf-8")
            response = JSONResponse(
                {"data": None, "errors": [{"message": message, "extensions": {"code": code}}]},
                status_code=error.status_code,
            )
        await response(scope, receive, send)

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
        except RecursionError:
            raise json.JSONDecodeError("nested too deeply", "", 0) from None
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
        """Every HTTP operation (or batch) gets request_timeout_seconds."""
        timeout = self.deps.settings.request_timeout_seconds
        try:
            async with asyncio.timeout(timeout):
                return await super().execute_operation(*args, **kwargs)
        except TimeoutError:
            error = GraphQLError(
                f"the request took longer than {timeout} s",
                extensions={"code": "LIMIT_EXCEEDED", "reason": "TIMEOUT"},
            )
            return ExecutionResult(data=None, errors=[error])


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
