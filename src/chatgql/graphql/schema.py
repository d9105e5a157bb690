"""The schema, and the HTTP/websocket view that serves it."""

from __future__ import annotations

from typing import Any

import strawberry
from graphql import GraphQLError
from graphql.validation import NoSchemaIntrospectionCustomRule
from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.extensions import AddValidationRules, ParserCache, ValidationCache
from strawberry.schema.config import StrawberryConfig

from ..errors import Unauthenticated
from .context import Context, Deps, FreshLoadersPerOperation
from .errors import to_contract_errors
from .mutations import Mutation
from .queries import Query
from .scalars import SCALARS
from .subscriptions import Subscription


class ChatSchema(strawberry.Schema):
    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        # Expected errors (NOT_FOUND, BAD_USER_INPUT, ...) are answers, not incidents:
        # only internal ones are logged.
        to_contract_errors(errors)


def build_schema(*, introspection: bool = True) -> ChatSchema:
    extensions: list[Any] = [
        FreshLoadersPerOperation,
        lambda: ParserCache(maxsize=1024),
        lambda: ValidationCache(maxsize=1024),
    ]
    if not introspection:
        extensions.append(lambda: AddValidationRules([NoSchemaIntrospectionCustomRule]))
    return ChatSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        extensions=extensions,
        config=StrawberryConfig(scalar_map=SCALARS, disable_field_suggestions=not introspection),
    )


schema = build_schema()  # what `schema.graphql` is generated from


class ChatGraphQL(GraphQL):
    """Strawberry's ASGI view with chatgql's context and websocket authentication."""

    def __init__(self, deps: Deps, **kwargs: Any) -> None:
        settings = deps.settings
        super().__init__(
            build_schema(introspection=settings.introspection_enabled),
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
