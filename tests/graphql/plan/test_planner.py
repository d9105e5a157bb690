"""The plan-once executor (chatgql.engine.plan) in the running server: used, counted, switchable.

That its answers equal graphql-core's is test_planner_differential.py's job.
"""

from __future__ import annotations

import json
import uuid

import strawberry
from graphql import get_argument_values, parse
from graphql.execution.values import get_variable_values
from strawberry.http import process_result

from chatgql.compat import strawberry as strawberry_compat
from chatgql.engine.plan import Planner
from chatgql.engine.plan.compile import _omitted_defaults
from chatgql.engine.prepared import execute_accepted
from chatgql.graphql.schema import build_schema

from ...conftest import RunningServer, make_settings
from ...support.live import metrics
from ..test_fuzz import seeded  # noqa: F401
from ..test_query_count import counting_statements, create_groups, mark_read_each, outbox_drained, send_to_each
from .test_planner_differential import Differential

INBOX = "query($n: Int!) { inbox(first: $n) { nodes { id title unreadCount lastMessage { seq body senderId createdAt seen } memberCount } } }"


def planner_samples(text: str) -> dict[str, float]:
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("chatgql_plan"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


async def test_repeated_documents_run_by_plan_and_metrics_count_them(server, client, http):
    query = f"# {uuid.uuid4()}\n{{ viewer {{ userId totalUnread }} }}"
    before = planner_samples((await http.get(f"http://127.0.0.1:{server.port}/metrics")).text)
    for _ in range(3):
        assert (await client.data(query, user=1))["viewer"]["userId"] == "1"
    after = planner_samples((await http.get(f"http://127.0.0.1:{server.port}/metrics")).text)
    # the first request takes Strawberry's whole pipeline; the repeats run one plan, built once
    assert after["chatgql_plans_built_total"] - before.get("chatgql_plans_built_total", 0) == 1
    assert after["chatgql_plan_executions_total"] - before.get("chatgql_plan_executions_total", 0) == 2


async def test_an_introspection_document_falls_back_and_is_counted_by_reason(server, client, http):
    query = f"# {uuid.uuid4()}\n{{ __schema {{ queryType {{ name }} }} }}"
    first = await client.execute(query, user=1)
    second = await client.execute(query, user=1)
    assert first == second == {"data": {"__schema": {"queryType": {"name": "Query"}}}}
    text = (await http.get(f"http://127.0.0.1:{server.port}/metrics")).text
    assert planner_samples(text)['chatgql_plan_fallbacks_total{reason="introspection"}'] >= 1


async def test_with_the_planner_off_every_document_runs_through_graphql_core(migrated_url, http):
    async with RunningServer(make_settings(migrated_url, planner=False)) as server:
        from ...conftest import GraphQLClient

        client = GraphQLClient(http, server.url, server.settings)
        for _ in range(3):
            await client.data("{ viewer { userId } }", user=1)
        stats = server.app.graphql.planner.stats
        assert (stats.built, stats.executions, stats.fallbacks["disabled"]) == (0, 0, 2)
        samples = planner_samples(await metrics_text(http, server))
        assert samples['chatgql_plan_fallbacks_total{reason="disabled"}'] == 2


async def metrics_text(http, server) -> str:
    return (await http.get(f"http://127.0.0.1:{server.port}/metrics")).text


async def test_a_planned_inbox_batches_its_loads_as_graphql_core_does(server, engine, client):
    conversations = await create_groups(client, 1, [2, 3], 60)
    await send_to_each(client, 2, conversations)
    await mark_read_each(client, 3, conversations[::2], 1)
    await outbox_drained(engine)
    differential = Differential(server, client)
    document, variables = parse(INBOX), {"n": 50}
    with counting_statements(server) as by_graphql_core:
        reference = differential.encode(
            await execute_accepted(differential.schema, document, variables, None, differential.context(1))
        )
    with counting_statements(server) as by_plan:
        planned = differential.encode(
            await differential.planner.execute(
                differential.schema, document, INBOX, variables, None, differential.context(1)
            )
        )
    assert planned == reference
    assert differential.planner.stats.executions == 1
    assert len(by_plan) == len(by_graphql_core) <= 5, by_plan


async def test_metrics_helper_still_reads_unlabelled_samples(server, http):
    # the planner's counters sit beside the others on /metrics without disturbing them
    samples = await metrics(http, server)
    assert "chatgql_plans_built_total" in samples and "chatgql_subscriptions_active" in samples


# Drawn by the differential test; trimmed further, it no longer fails without the fix.
CANCELLING = (
    'query($yes: Boolean!, $first: Int, $maybe: Boolean = true) { conversation(id: "2") @skip(if: $yes) '
    '{ createdAt } messages(conversationId: "3", first: $first) { edges { a: node { seen @skip(if: false) '
    "seen seenByCount a: createdAt ... { body seenBy(first: -1) clientMsgId seen } } cursor cursor "
    "... on MessageEdge { cursor node { seen ... on Message @skip(if: $maybe) { senderId seen clientMsgId "
    "@include(if: $yes) senderId } } } } pageInfo { a: hasPreviousPage @include(if: $yes) } edges "
    "@include(if: $yes) { a: node { senderId seen clientMsgId senderId ... on Message { __typename } } "
    "... on MessageEdge { ...F0 @include(if: $maybe) } } __typename } } fragment F0 on MessageEdge { __typename }"
)


async def test_a_failing_field_does_not_fail_its_siblings_shared_loads(server, seeded):  # noqa: F811
    # seenBy fails, graphql-core cancels the sibling fields still waiting for the roster they share
    # with the other messages' fields: that used to end the request with CancelledError (HTTP 500).
    for _ in range(2):  # the first by Strawberry's pipeline, the second by plan
        response = await seeded.raw(CANCELLING, {"yes": True}, user=1)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["data"] is None
        assert [e["extensions"]["code"] for e in body["errors"]] == ["BAD_USER_INPUT"]


async def test_types_implementing_node_carry_strawberrys_own_type_check():
    # The plan calls it without an info (strawberry_compat.is_strawberry_type_check): it must stay Strawberry's.
    from chatgql.graphql.schema import schema as exported

    for name in ("Conversation", "Message", "Member", "Viewer"):
        assert strawberry_compat.is_strawberry_type_check(
            strawberry_compat.core_schema(exported).type_map[name].is_type_of
        ), name


# A schema of its own for the next test (module level: the annotations are strings).
@strawberry.interface
class Thing:
    id: strawberry.ID


@strawberry.type
class Book(Thing):
    title: str


@strawberry.type
class Pen(Thing):
    ink: str


class Novel(Book):  # a subclass Strawberry did not decorate: its definition is Book's
    pass


class PenRow:  # what an ORM might hand back, cast to the type it stands for
    def __init__(self) -> None:
        self.id, self.ink = strawberry.ID("r"), "blue"


@strawberry.type
class ThingQuery:
    @strawberry.field
    def things(self) -> list[Thing | None]:
        return [
            Book(id=strawberry.ID("b"), title="t"),
            Novel(id=strawberry.ID("n"), title="n"),
            strawberry.cast(Pen, PenRow()),
            None,
        ]

    @strawberry.field
    def odd(self) -> Thing | None:
        return PenRow()  # type: ignore[return-value]  # not cast, not a Thing: no type at runtime, an error

    @strawberry.field
    def strict(self) -> list[Thing]:
        return [Pen(id=strawberry.ID("p"), ink="red"), "not a thing"]  # type: ignore[list-item]


async def test_interface_values_the_plan_does_not_know_ask_resolve_type_as_graphql_core_does():
    # chatgql's resolvers return instances of exactly the Node types (the plan's shortcut); a
    # subclass, a strawberry.cast object, or a value of no possible type takes Strawberry's
    # resolve_type and graphql-core's checks of its answer, with the same answers and errors.
    schema = strawberry.Schema(query=ThingQuery, types=[Book, Pen])
    planner = Planner()
    for query in (
        "{ things { __typename id ... on Book { title } ... on Pen { ink } } }",
        "{ things { id } odd { id __typename } }",
        "{ a: things { ... on Pen { ink } } strict { id ... on Pen { ink } } }",
    ):
        document = parse(query)
        expected = json.dumps(
            process_result(await execute_accepted(schema, document, None, None, None)), sort_keys=True
        )
        for _ in range(2):
            planned = await planner.execute(schema, document, query, None, None, None)
            assert json.dumps(process_result(planned), sort_keys=True) == expected, query
    assert not planner.stats.fallbacks and planner.stats.executions == 6


def test_omitted_arguments_take_their_defaults_coerced_once_as_graphql_core_gives_them_on_every_run():
    """plan/compile.py coerces the defaults of the arguments a field node omits once, and only the
    given ones per run: together they are what graphql-core's get_argument_values answers for the
    whole field, whatever the variables (replyTo given, null, or its variable left out)."""
    core = strawberry_compat.core_schema(build_schema())
    document = parse(
        "mutation($c: ID!, $m: UUID!, $b: String!, $r: ID) {"
        " sendMessage(conversationId: $c, clientMsgId: $m, body: $b, replyTo: $r) { duplicate } }"
    )
    operation = document.definitions[0]
    node = operation.selection_set.selections[0]
    field = core.mutation_type.fields["sendMessage"]
    given, defaults = _omitted_defaults(field, node)
    assert given is not field and set(defaults) == {"threadOnly", "attachments", "mentionEveryone", "quote"}
    sent = {"c": "1", "m": str(uuid.uuid4()), "b": "hello"}
    for values in (sent, {**sent, "r": "some-id"}, {**sent, "r": None}):
        variables = get_variable_values(core, operation.variable_definitions, values)
        expected = get_argument_values(field, node, variables)
        assert {**get_argument_values(given, node, variables), **defaults} == expected
