"""chatgql's per-operation set-up, as one Strawberry extension (ChatOperation)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator
from typing import Any

from graphql import GraphQLError, OperationDefinitionNode
from strawberry.extensions import SchemaExtension

from ..compat import strawberry as strawberry_compat
from .acyclic import unlink_tokens
from .cost import CostCache, over_cost
from .handshake import ws_operation
from .limits import OperationLimits
from .validation import validate_once


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
    - the operation's price (cost.py) with the request's variables, against
      CHATGQL_MAX_OPERATION_COST; a subscription's against the per-event
      bound and, with the websocket's other subscriptions, the per-socket one
      (it holds its share until it ends: ws_operation);
    - the context told a new operation starts (its `operation_started`, if it
      has one): a websocket's context lives as long as the connection, so the
      API gives each operation fresh loaders there.

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
        started = getattr(execution_context.context, "operation_started", None)
        if started is not None:
            started()
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
        then held by its websocket (its context's subscription_costs, handshake.SocketContext) until it ends."""
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
        slot = ws_operation.get()
        costs: dict[object, int] | None = getattr(execution_context.context, "subscription_costs", None)
        if costs is not None and slot is not None:
            held = sum(c for s, c in costs.items() if s is not slot)
            if held + cost > limits.max_socket_event_cost:
                return [over_cost(held + cost, limits.max_socket_event_cost, "websocket's subscriptions together")]
            costs[slot] = cost
        return []
