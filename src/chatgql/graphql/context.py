"""The per-request context: who is asking, and the request's loaders."""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graphql import GraphQLError, OperationDefinitionNode
from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket
from strawberry.extensions import SchemaExtension

from ..compat import strawberry as strawberry_compat
from ..db import Database
from ..edge.auth import token_expiry, user_from_authorization
from ..edge.jwks import KeySet
from ..edge.ratelimit import Limiters, SharedStore, shared_store
from ..engine.acyclic import unlink_tokens
from ..engine.handshake import ws_operation
from ..engine.limits import OperationLimits
from ..engine.validation import validate_once
from ..errors import Unauthenticated
from ..services.groupcommit import SendBatcher
from ..services.policy import MembershipPolicy, load_policy
from ..settings import Settings
from ..engine.cost import CostCache, over_cost
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
    limits: Limiters = field(init=False)  # per-user rate limits by operation (ratelimit.OPERATION_LIMITS)
    rate_limit_store: SharedStore | None = field(init=False)  # where shared rate limits live (Redis, the hub), if any
    membership_policy: MembershipPolicy = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        store = self.rate_limit_store = shared_store(
            s.broadcast_url, s.shared_rate_limits, s.shared_rate_limit_timeout_seconds
        )
        self.limits = Limiters(s, store)
        self.membership_policy = load_policy(s.membership_policy, s)


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
        return self._viewer

    _loaders: Loaders | None = field(default=None, repr=False)

    @property
    def loaders(self) -> Loaders:
        """This operation's loaders (see ChatOperation for websockets)."""
        if self._loaders is None:
            self._loaders = Loaders(self.database, self.viewer_id)
        return self._loaders

    def forget_conversation(self, conversation_id: int) -> None:
        """After a change: drop what this operation's loaders cached about it (if it has any yet)."""
        if self._loaders is not None:
            self._loaders.forget_conversation(conversation_id)

    def fresh_loaders(self, shared: EventReads | None = None) -> Loaders:
        """New loaders (a subscription event must not see another event's cache); shared: the
        event's reads, shared with its other subscribers."""
        return Loaders(self.database, self.viewer_id, shared)


@functools.lru_cache(maxsize=16)
def _with_rules(base: tuple[type, ...], extra: tuple[type, ...]) -> tuple[type, ...]:
    """base + extra, one tuple for all operations (a subscription keeps its operation's for its lifetime)."""
    return base + extra


class ChatOperation(SchemaExtension):
    """chatgql's per-operation set-up, as one extension. A subscription keeps its
    operation's extensions, and its on_operation hooks open, for as long as it
    lives: so there is one extension, and its set-up runs as parsing starts
    rather than in on_operation:

    - documents accepted before (`accepted`, prepared.py) are neither parsed
      nor validated again; nothing else is kept, so a stream of refused or
      one-off documents cannot fill the process with syntax trees;
    - the parser's token limit (what Strawberry's MaxTokensLimiter does);
    - the operation limits (limits.py), checked before validation, and
      validation off the event loop (validation.py) with chatgql's rules
      (what AddValidationRules does), and GraphQL's GetOperation rule: a
      document with several operations needs an operationName (Strawberry
      would run the first one);
    - the operation's price (engine/cost.py) with the request's variables, against
      CHATGQL_MAX_OPERATION_COST; a subscription's against the per-event
      bound and, with the websocket's other subscriptions, the per-socket one
      (it holds its share until it ends: ws_operation);
    - fresh loaders per operation: a websocket's context lives as long as the
      connection, so no operation may read another's cache.

    (The relay's wake-up after a mutation is not here: the services wake it once
    their transaction has committed events, db.Database.events_written.)
    """

    def __init__(
        self,
        max_tokens: int,
        limits: OperationLimits,
        validation_rules: tuple[type, ...],
        accepted: Any = None,
        costs: CostCache | None = None,
    ) -> None:
        self.max_tokens = max_tokens
        self.limits = limits
        self.costs = costs
        self.validation_rules = validation_rules
        self.accepted = accepted  # prepared.AcceptedDocuments, or None
        self.known = False  # the document was accepted before: already valid

    def on_parse(self) -> Iterator[None]:
        execution_context = self.execution_context
        execution_context.parse_options["max_tokens"] = self.max_tokens
        execution_context.validation_rules = _with_rules(execution_context.validation_rules, self.validation_rules)
        context = execution_context.context
        if isinstance(context, Context) and isinstance(context.request, WebSocket):
            context._loaders = None
        if self.accepted is not None and execution_context.query and execution_context.graphql_document is None:
            document = self.accepted.get(execution_context.query)
            if document is not None:
                execution_context.graphql_document = document
                self.known = True
        yield

    async def on_validate(self) -> AsyncIterator[None]:
        execution_context = self.execution_context
        document = execution_context.graphql_document
        assert document is not None  # Strawberry validates parsed documents only
        if self.known:
            errors: list[GraphQLError] = []
        else:
            errors = await validate_once(
                execution_context.query,
                strawberry_compat.core_schema(execution_context.schema),
                document,
                self.limits,
                execution_context.validation_rules,
            )
            unlink_tokens(document)
            if not errors and self.accepted is not None and execution_context.query:
                self.accepted.add(execution_context.query, document)
                # Copies that arrived while the first was validated (subscribers connecting at once)
                # run the first's document: subscribers share an event's result per operation node.
                kept = self.accepted.get(execution_context.query)
                if kept is not None:
                    execution_context.graphql_document = document = kept
        if (
            not errors
            and strawberry_compat.provided_operation_name(execution_context) is None
            and sum(isinstance(d, OperationDefinitionNode) for d in document.definitions) > 1
        ):
            errors = [GraphQLError("operationName is required when the document has several operations")]
        if not errors and self.costs is not None:
            errors = self._check_cost(document)
        strawberry_compat.set_validation_result(execution_context, errors)
        yield

    def _check_cost(self, document: Any) -> list[GraphQLError]:
        """LIMIT_EXCEEDED when the operation's price is over its bound; a subscription's price is
        then held by its websocket (Context.subscription_costs) until it ends."""
        assert self.costs is not None
        execution_context = self.execution_context
        priced = self.costs.cost(
            strawberry_compat.core_schema(execution_context.schema),
            document,
            strawberry_compat.provided_operation_name(execution_context),
            execution_context.variables,
        )
        if priced is None:
            return []  # no such operation: graphql-core says so
        cost, kind = priced
        limits = self.costs.limits
        if kind != "subscription":
            return [over_cost(cost, limits.max_cost)] if cost > limits.max_cost else []
        if cost > limits.max_event_cost:
            return [over_cost(cost, limits.max_event_cost, "subscription's every event")]
        context, slot = execution_context.context, ws_operation.get()
        if isinstance(context, Context) and slot is not None:
            held = sum(c for s, c in context.subscription_costs.items() if s is not slot)
            if held + cost > limits.max_socket_event_cost:
                return [over_cost(held + cost, limits.max_socket_event_cost, "websocket's subscriptions together")]
            context.subscription_costs[slot] = cost
        return []
