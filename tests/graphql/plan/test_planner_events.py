"""Subscription events run by plan answer exactly as graphql-core's per-event execution.

In this process, on the seeded data of test_fuzz: for each subscription
document (hypothesis-drawn selections over MessageNewEvent / ReadUpdatedEvent
with fragments, @skip/@include, seen/seenByCount/seenBy with bad arguments),
one event is executed by graphql-core's Executor.execute_operation and by
Planner.execute_event, each with its own freshly built event object, as
subscriptions.py builds them; the processed results must be the same JSON.
"""

from __future__ import annotations

import json
import uuid
from functools import partial
from typing import Any

import pytest
from graphql import Executor, get_named_type, parse, specified_rules, validate
from hypothesis import strategies as st
from strawberry.execution import optimized_is_awaitable
from strawberry.http import process_result

from chatgql.engine.plan import Planner
from chatgql.engine.shared import SharedEventExecutor
from chatgql.graphql.subscriptions import _for_event
from chatgql.graphql.types import Message, MessageNewEvent, ReadUpdatedEvent

from ..test_fuzz import SCHEMA, seeded  # noqa: F401
from .test_planner_differential import Differential, _Doc, drawn

EXAMPLES = 400


@st.composite
def subscription_documents(draw: Any) -> tuple[str, dict]:
    doc = _Doc(draw(st.randoms(use_true_random=True)))
    root = doc.rnd.choice(["messageNew", "readUpdated"])
    argument = doc.rnd.choice(["", '(conversationId: "1")', "(conversationId: $c)"])
    if "$c" in argument:
        doc.used["c"] = "ID"
    event_type = get_named_type(SCHEMA.subscription_type.fields[root].type)
    body = f"{root}{argument} {{ {doc.selection(event_type, 1)} }}"
    header = "subscription"
    if doc.used:
        header += "(" + ", ".join(f"${n}: {t}" for n, t in doc.used.items()) + ")"
    variables = {
        name: {"yes": True, "no": False, "maybe": None, "c": "1", "cid": "1", "first": 2}.get(name) for name in doc.used
    }
    if doc.rnd.randint(0, 9) == 0 and variables:
        variables.pop(next(iter(variables)))  # a missing variable: refused before any event
    return " ".join([f"{header} {{ {body} }}", *doc.fragments]), variables


class EventDifferential(Differential):
    def event(self, root: str, context: Any, client_msg_id: str) -> Any:
        if root == "messageNew":
            source = {
                "conversationId": 1,
                "seq": 1,
                "senderId": "2",
                "clientMsgId": client_msg_id,
                "body": "hello 1",
                "createdAt": "2026-01-01T00:00:00+00:00",
            }
            fields, rosters = _for_event(source, context.database)
            message = Message(**fields, new_loaders=partial(context.fresh_loaders, rosters))
            return MessageNewEvent(
                conversation_id=message.conversation_id, seq=message.seq, message=message, source=source
            )
        return ReadUpdatedEvent(conversation_id="1", user_id="2", last_read_seq=1, source={})

    async def run(self, executor: Any, payload: Any, planned: bool) -> str | None:
        per_event = Executor.build_per_event_executor(executor, payload)
        if planned:
            self.plan_calls += 1
            result = self.planner.execute_event(per_event)
            if result is None:  # a fallback; assert_same checks that it was one graphql-core words
                return None
        else:
            result = Executor.execute_operation(per_event, False)
        if optimized_is_awaitable(result):
            result = await result
        if result.errors:
            self.schema.process_errors(result.errors)
        return json.dumps(json.loads(self.graphql.encode_json(process_result(result))), sort_keys=True)

    async def check_event(self, query: str, variables: dict) -> bool:
        document = parse(query)
        if validate(self.schema._schema, document, specified_rules):
            return False
        root = "messageNew" if "messageNew" in query else "readUpdated"
        outcomes = []
        client_msg_id = str(uuid.uuid4())
        for planned in (True, False):
            context = self.context(1)
            executor = SharedEventExecutor.build(
                self.schema._schema,
                document,
                context_value=context,
                raw_variable_values=variables,
                is_awaitable=optimized_is_awaitable,
            )
            if isinstance(executor, list):
                return False  # variable errors: the subscription never starts
            outcome = await self.run(executor, self.event(root, context, client_msg_id), planned)
            if outcome is None:
                return False
            outcomes.append(outcome)
        self.compared += 1
        if outcomes[0] != outcomes[1]:
            self.mismatches.append(
                f"query: {query}\nvariables: {variables}\nplan:      {outcomes[0]}\nreference: {outcomes[1]}"
            )
        return True


@pytest.mark.slow
async def test_subscription_events_answer_alike_by_plan(server, seeded):  # noqa: F811
    differential = EventDifferential(server, seeded)
    ran = 0
    for query, variables in drawn(subscription_documents(), EXAMPLES):
        ran += await differential.check_event(query, variables)
    assert ran > EXAMPLES * 0.4, (ran, differential.planner.stats)  # the rest: invalid, or variable errors
    assert not differential.mismatches, differential.mismatches[0]
    assert set(differential.planner.stats.fallbacks) <= {"compile_error"}
    stats = differential.planner.stats
    assert stats.executions == differential.compared
    assert stats.executions + sum(stats.fallbacks.values()) == differential.plan_calls


async def test_the_server_runs_subscription_events_by_plan(server):
    assert server.app.graphql.schema.planner is server.app.graphql.planner
    assert isinstance(server.app.graphql.planner, Planner)
