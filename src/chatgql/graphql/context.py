"""The per-request context: who is asking, and the request's loaders."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket
from strawberry.extensions import SchemaExtension
from strawberry.types.graphql import OperationType

from ..auth import user_from_authorization
from ..db import Database
from ..errors import Unauthenticated
from ..ratelimit import RateLimiter
from ..settings import Settings
from .loaders import Loaders


@dataclass
class Deps:
    """What resolvers need from the running process (built by app.py's lifespan)."""

    settings: Settings
    database: Database
    dispatcher: Any = None  # events.dispatch.Dispatcher; None in processes that serve no subscriptions
    wakeup: Any = None  # events.wakeup.RelayWakeup
    send_limiter: RateLimiter = field(init=False)
    read_limiter: RateLimiter = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.send_limiter = RateLimiter("sendMessage", s.rate_send_per_second, s.rate_send_burst)
        self.read_limiter = RateLimiter("markRead", s.rate_read_per_second, s.rate_read_burst)


@dataclass
class Context:
    deps: Deps
    request: Request | WebSocket
    response: Response | WebSocket | None = None
    # Set by Strawberry from the websocket connection_init payload.
    connection_params: dict[str, Any] | None = None
    _viewer: int | Unauthenticated | None = field(default=None, repr=False)

    @property
    def settings(self) -> Settings:
        return self.deps.settings

    @property
    def database(self) -> Database:
        return self.deps.database

    def _authorization(self) -> object:
        if isinstance(self.request, WebSocket):
            return (self.connection_params or {}).get("Authorization")
        return self.request.headers.get("authorization")

    @property
    def viewer_id(self) -> int:
        """The caller's user id; UNAUTHENTICATED without a valid bearer token."""
        if self._viewer is None:
            try:
                self._viewer = user_from_authorization(self.settings, self._authorization())
            except Unauthenticated as error:
                self._viewer = error
        if isinstance(self._viewer, Unauthenticated):
            raise self._viewer
        return self._viewer

    _loaders: Loaders | None = field(default=None, repr=False)

    @property
    def loaders(self) -> Loaders:
        """This operation's loaders (see FreshLoadersPerOperation for websockets)."""
        if self._loaders is None:
            self._loaders = Loaders(self.database, self.viewer_id)
        return self._loaders

    def forget_conversation(self, conversation_id: int) -> None:
        """After a change: drop what this operation's loaders cached about it (if it has any yet)."""
        if self._loaders is not None:
            self._loaders.forget_conversation(conversation_id)

    def fresh_loaders(self) -> Loaders:
        """New loaders (a subscription event must not see another event's cache)."""
        return Loaders(self.database, self.viewer_id)


class FreshLoadersPerOperation(SchemaExtension):
    """A websocket's context lives as long as the connection: give each operation
    on it new loaders, so no operation reads another's cache."""

    def on_operation(self) -> Iterator[None]:
        context = self.execution_context.context
        if isinstance(context, Context) and isinstance(context.request, WebSocket):
            context._loaders = None
        yield


class WakeRelayAfterMutations(SchemaExtension):
    """Mutations write outbox rows; once they have committed, wake the relay.

    (A mutation that wrote nothing costs one spurious, harmless wake-up.)
    """

    def on_execute(self) -> Iterator[None]:
        yield
        context = self.execution_context.context
        if (
            self.execution_context.operation_type == OperationType.MUTATION
            and isinstance(context, Context)
            and context.deps.wakeup is not None
        ):
            context.deps.wakeup.wake()
