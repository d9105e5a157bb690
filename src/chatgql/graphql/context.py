"""The per-request context: who is asking, and the request's loaders."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket

from ..db import Database
from ..edge.auth import token_expiry, user_from_authorization
from ..edge.bans import BanList
from ..edge.jwks import KeySet
from ..edge.ratelimit import Limiters, SharedStore, shared_store
from ..errors import Unauthenticated
from ..services.beforesend import BeforeSendHook
from ..services.groupcommit import SendBatcher
from ..services.policy import MembershipPolicy, load_policy
from ..settings import Settings
from .loaders import EventReads, Loaders

if TYPE_CHECKING:
    from ..events.dispatch import Dispatcher
    from ..events.ephemeral import EphemeralPublisher
    from ..events.presence import Presence
    from ..events.wakeup import RelayWakeup
    from ..services.delivery_coalescing import DeliveryCoalescer
    from ..services.read_coalescing import ReadCoalescer


@dataclass
class Deps:
    """What resolvers need from the running process (built by app.py's lifespan)."""

    settings: Settings
    database: Database
    dispatcher: Dispatcher | None = None  # None in processes that serve no subscriptions
    wakeup: RelayWakeup | None = None  # hooked into the database: the services wake it
    read_coalescer: ReadCoalescer | None = None  # None: markRead uncoalesced
    delivery_coalescer: DeliveryCoalescer | None = None  # None: markDelivered uncoalesced
    send_batcher: SendBatcher | None = None  # group commit of sends (None: every send alone)
    keys: KeySet | None = None  # the OpenID provider's keys (jwks.py); None without CHATGQL_OIDC_ISSUER
    typing: EphemeralPublisher | None = None  # None in processes that serve no subscriptions
    presence: Presence | None = None  # who has a websocket open (for webhooks)
    before_send: BeforeSendHook | None = None  # the before-send hook, when configured (opened by the lifespan)
    limits: Limiters = field(init=False)  # per-user rate limits by operation (ratelimit.OPERATION_LIMITS)
    rate_limit_store: SharedStore | None = field(init=False)  # where shared rate limits live (Redis, the hub), if any
    membership_policy: MembershipPolicy = field(init=False)
    # What a time-based feature reads as now (an expiry), passed to its service: a test sets its own clock.
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    bans: BanList = field(init=False)  # the app-wide bans this process knows (edge/bans.py)

    def __post_init__(self) -> None:
        s = self.settings
        store = self.rate_limit_store = shared_store(
            s.broadcast_url, s.shared_rate_limits, s.shared_rate_limit_timeout_seconds
        )
        self.limits = Limiters(s, store)
        self.membership_policy = load_policy(s.membership_policy, s)
        self.bans = BanList()


@dataclass
class Context:
    deps: Deps
    request: Request | WebSocket
    response: Response | WebSocket | None = None
    # Set by Strawberry from the websocket connection_init payload.
    connection_params: dict[str, Any] | None = None
    _viewer: str | Unauthenticated | None = field(default=None, repr=False)
    # A websocket's live subscriptions' prices per event, by ws_operation token.
    subscription_costs: dict[object, int] = field(default_factory=dict, repr=False)
    # A websocket's: when its token expires (then its viewer is UNAUTHENTICATED, and the handler
    # closes it: engine/handshake.py). None over HTTP, where a request is over in seconds.
    token_expires_at: float | None = field(default=None, repr=False)

    @property
    def settings(self) -> Settings:
        return self.deps.settings

    @property
    def database(self) -> Database:
        return self.deps.database

    async def fetch_keys(self) -> None:
        """Before viewer_id: the identity provider's keys, if the token is signed by one not known
        yet (jwks.py). Awaited here, so that viewer_id, synchronous, never waits for the network."""
        if self.deps.keys is not None:
            await self.deps.keys.ensure(self._authorization(isinstance(self.request, WebSocket)))

    def _authorization(self, websocket: bool) -> object:
        if websocket:
            return (self.connection_params or {}).get("Authorization")
        return self.request.headers.get("authorization")

    @property
    def viewer_id(self) -> str:
        """The caller's user id; UNAUTHENTICATED without a valid bearer token."""
        if self._viewer is None:
            # Asked once: a Starlette request is a Mapping, and isinstance against it goes through
            # ABCMeta.__instancecheck__, a Python-level call
            websocket = isinstance(self.request, WebSocket)
            try:
                authorization = self._authorization(websocket)
                self._viewer = user_from_authorization(self.settings, authorization, self.deps.keys)
                if websocket:
                    self.token_expires_at = token_expiry(authorization)
            except Unauthenticated as error:
                self._viewer = error
        if isinstance(self._viewer, Unauthenticated):
            raise self._viewer
        if self.token_expires_at is not None and time.time() >= self.token_expires_at:
            self._viewer = Unauthenticated("the token has expired: connect again with a new one")
            raise self._viewer
        self.deps.bans.check(self._viewer)
        return self._viewer

    _loaders: Loaders | None = field(default=None, repr=False)

    @property
    def loaders(self) -> Loaders:
        """This operation's loaders (see ChatOperation for websockets)."""
        if self._loaders is None:
            self._loaders = Loaders(self.database, self.viewer_id)
        return self._loaders

    def operation_started(self) -> None:
        """A new operation on this context: over a websocket the context lives as long as the
        connection, so no operation may read another's cache (engine/operation.py calls it)."""
        if isinstance(self.request, WebSocket):
            self._loaders = None

    def forget_conversation(self, conversation_id: int) -> None:
        """After a change: drop what this operation's loaders cached about it (if it has any yet)."""
        if self._loaders is not None:
            self._loaders.forget_conversation(conversation_id)

    def fresh_loaders(self, shared: EventReads | None = None) -> Loaders:
        """New loaders (a subscription event must not see another event's cache); shared: the
        event's reads, shared with its other subscribers."""
        return Loaders(self.database, self.viewer_id, shared)
