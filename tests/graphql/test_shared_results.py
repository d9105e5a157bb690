"""Which subscription selections may share one result among an event's subscribers (engine/shared.py)."""

from __future__ import annotations

import pytest
from graphql import OperationDefinitionNode, parse

from chatgql.engine.shared import _sharable, derive
from chatgql.graphql.subscriptions import Subscription

SHARING = derive(Subscription)


def verdict(query: str) -> bool:
    document = parse(query)
    operation = next(d for d in document.definitions if isinstance(d, OperationDefinitionNode))
    fragments = {d.name.value: d for d in document.definitions if not isinstance(d, OperationDefinitionNode)}
    return _sharable(operation.selection_set, "Subscription", fragments, SHARING)


@pytest.mark.parametrize(
    "query",
    [
        "subscription { messageNew { conversationId seq message { senderId clientMsgId body createdAt } } }",
        "subscription($c: ID) { m: messageNew(conversationId: $c) { __typename seq message { seq } } }",
        "subscription($x: Boolean!) { messageNew { seq message @include(if: $x) { body } } }",
        "subscription { messageNew { ... on MessageNewEvent { seq } ...F } } fragment F on MessageNewEvent { seq }",
        "subscription { readUpdated { conversationId userId lastReadSeq } }",
        # the event's roster is read once for all its subscribers (loaders.EventRosters)
        "subscription { messageNew { message { seenByCount } } }",
        "subscription { messageNew { message { seen } } }",
        "subscription { messageNew { message { body seenBy(first: 3) } } }",
        "subscription { messageNew { ...F } } fragment F on MessageNewEvent { message { seenBy } }",
    ],
)
def test_a_selection_of_event_fields_only_is_shared(query: str) -> None:
    assert verdict(query) is True


@pytest.mark.parametrize(
    "query",
    [
        "subscription { messageNew { seq @unknownDirective } }",
        "subscription { messageNew { ... on Message { body } } }",
        "subscription { messageNew { message } }",
    ],
)
def test_a_selection_with_data_beyond_the_event_is_executed_per_subscriber(query: str) -> None:
    assert verdict(query) is False
