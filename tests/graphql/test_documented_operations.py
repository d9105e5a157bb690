"""Every operation the documentation shows is accepted as written, with its defaults, by a production-mode
chatgql (its cost bounds and limits; introspection off) over real PostgreSQL: each ```graphql block of
README.md, docs/guide/*.md and docs/operating/*.md (one test per operation in it), each curl body
(`'{"query": ...}'`) of their shell blocks, and each of GraphiQL's examples (graphql/examples.py).
A new page or example is covered without touching this file.

The operations name conversations "1" to "9" and users "1" to "3" and "12": the module's world has them
(groups 1..9 of users 1, 2, 3 and 12, with enough messages and changes for the seqs the docs quote). A
variable the docs leave to the reader takes a value from SAMPLES. Queries and mutations run over HTTP
as user 1 (a curl body as the user whose token it names); a subscription must become live (a resumed
one must also answer its first replayed event) over graphql-transport-ws.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import graphql
import httpx
import pytest

from chatgql.compat import strawberry as strawberry_compat
from chatgql.engine.cost import CostCache, CostLimits
from chatgql.graphql.examples import CLIENT_MSG_ID, EXAMPLES
from chatgql.graphql.ids import message_id
from chatgql.graphql.schema import schema

from ..conftest import REPO, GraphQLClient, RunningServer, drop_database, make_settings, scratch_database
from ..support.live import wait_active_subscriptions, ws_connect

SECRET = "a-production-secret-for-documented-operations-0123456789"
PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs" / "guide").glob("*.md")),
    *sorted((REPO / "docs" / "operating").glob("*.md")),
]
GRAPHQL_BLOCK = re.compile(r"^```graphql\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHELL_BLOCK = re.compile(r"^```(?:sh|bash|shell|console)\n(.*?)^```", re.MULTILINE | re.DOTALL)
CURL_BODY = re.compile(r"""(?:\$TOKEN_(?P<user>\w+)\s+)?'(?P<body>\{"query":.*\})'""")
# Values for the variables a documented operation declares without giving them.
SAMPLES = {
    "q": "hello",
    "c": "1",
    "after": None,
    "before": None,
    "cursors": [{"conversationId": "1", "afterSeq": 0, "afterChangeSeq": 0}],
    "sendAt": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
}


@dataclass(frozen=True)
class Documented:
    where: str  # page:line#n, or examples.py:Name
    query: str
    variables: dict = field(default_factory=dict)
    user: str = "1"


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


AS_USER = re.compile(r"^# as user (\w+)", re.MULTILINE)  # a block's own caller, where user 1 is not the one


def _operations(where: str, source: str) -> list[Documented]:
    """Each operation of a block (several anonymous ones may share a block), with the block's fragments;
    run as user 1, or as the user a `# as user N` line of the block names."""
    caller = AS_USER.search(source)
    user = caller.group(1) if caller else "1"
    document = graphql.parse(source)
    fragments = [d for d in document.definitions if isinstance(d, graphql.FragmentDefinitionNode)]
    operations = [d for d in document.definitions if isinstance(d, graphql.OperationDefinitionNode)]
    found = []
    for n, operation in enumerate(operations, 1):
        query = graphql.print_ast(graphql.DocumentNode(definitions=(operation, *fragments)))
        variables = {}
        for definition in operation.variable_definitions or ():
            name = definition.variable.name.value
            if definition.default_value is None:
                assert name in SAMPLES, f"{where}: give ${name} a value in SAMPLES"
                variables[name] = SAMPLES[name]
        found.append(Documented(f"{where}#{n}", query, variables, user))
    return found


def documented() -> list[Documented]:
    found: list[Documented] = []
    for page in PAGES:
        text = page.read_text()
        name = page.relative_to(REPO).as_posix()
        for block in GRAPHQL_BLOCK.finditer(text):
            found += _operations(f"{name}:{_line(text, block.start())}", block.group(1))
        for block in SHELL_BLOCK.finditer(text):
            for body in CURL_BODY.finditer(block.group(1)):
                request = json.loads(body.group("body"))
                where = f"{name}:{_line(text, block.start(1) + body.start())}"
                found.append(
                    Documented(where, request["query"], request.get("variables") or {}, body.group("user") or "1")
                )
    for example in EXAMPLES:
        variables = {k: str(uuid.uuid4()) if v == CLIENT_MSG_ID else v for k, v in example.variables.items()}
        name = graphql.parse(example.query).definitions[0].name.value
        found.append(Documented(f"graphql/examples.py:{name}", example.query, variables))
    return found


DOCUMENTED = documented()


def test_the_docs_show_operations_of_every_kind():
    """The extraction finds what the pages hold (a regex that stopped matching would pass everything)."""
    kinds = {graphql.parse(d.query).definitions[0].operation.value for d in DOCUMENTED}
    assert kinds == {"query", "mutation", "subscription"}
    assert any(d.where.startswith("README.md") and d.user == "2" for d in DOCUMENTED)  # a curl body as user 2
    assert any(d.where.startswith("docs/guide/api.md") and "sync" in d.query for d in DOCUMENTED)
    assert len(DOCUMENTED) >= 30


@pytest.fixture(scope="module")
async def prod(database_url: str) -> AsyncIterator[RunningServer]:
    """A production-mode chatgql on a database of its own; rate limits off for the world's setup."""
    url = await scratch_database(database_url, "chatgql_documented")
    settings = make_settings(url, env="production", jwt_secret=SECRET)
    assert settings.env == "production" and not settings.introspection_enabled
    async with RunningServer(settings) as running:
        yield running
    await drop_database(database_url, "chatgql_documented")


@pytest.fixture(scope="module")
async def world(prod: RunningServer, http: httpx.AsyncClient) -> GraphQLClient:
    client = GraphQLClient(http, prod.url, prod.settings)
    create = 'mutation($t: String!) { createGroup(title: $t, memberIds: ["2", "3", "12"]) { id } }'
    send = "mutation($c: ID!, $m: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { seq } } }"
    for n in range(1, 10):
        assert (await client.data(create, {"t": f"group {n}"}, user=1))["createGroup"]["id"] == str(n)
    for cid, count in (("1", 45), ("7", 45), ("9", 3)):
        for i in range(count):
            await client.data(send, {"c": cid, "m": str(uuid.uuid4()), "b": f"hello {i}"}, user=2)
    edit = 'mutation($s: Long!, $b: String!) { editMessage(conversationId: "1", seq: $s, body: $b) { changeSeq } }'
    for seq in range(1, 10):
        await client.data(edit, {"s": seq, "b": f"hello again {seq}"}, user=2)
    await client.data('mutation { markRead(conversationId: "7", seq: 45) { lastReadSeq } }', user=1)
    # user 1's thread versions in group 7 up to 13 (each reply of theirs takes one): threads.md resumes after 12
    reply = (
        'mutation($m: UUID!, $r: ID!) { sendMessage(conversationId: "7", clientMsgId: $m, body: "in the thread",'
        " replyTo: $r, threadOnly: true) { message { seq } } }"
    )
    for _ in range(13):
        await client.data(reply, {"m": str(uuid.uuid4()), "r": message_id(7, 1)}, user=1)
    return client


@pytest.mark.parametrize("operation", DOCUMENTED, ids=[d.where for d in DOCUMENTED])
async def test_a_documented_operation_is_accepted_as_written(
    operation: Documented, world: GraphQLClient, prod: RunningServer
):
    document = graphql.parse(operation.query)
    if document.definitions[0].operation != graphql.OperationType.SUBSCRIPTION:
        body = await world.execute(operation.query, operation.variables, user=operation.user)
        assert "errors" not in body, f"{operation.where}: {body['errors']}"
        return
    async with await ws_connect(prod, operation.user, max_queue=1024) as ws:  # a replay read in full: a quick close
        live = await ws.subscribe(operation.query, operation.variables)
        if "cursors" in operation.query:
            assert await live.next(), operation.where  # the replay's first event, not an error
        await wait_active_subscriptions(prod, 1)
        await live.stop()
        await wait_active_subscriptions(prod, 0)


def _documented_sync() -> Documented:
    (sync,) = [d for d in DOCUMENTED if d.where.startswith("docs/guide/api.md") and "sync" in d.query]
    return sync


async def test_the_documented_sync_takes_its_default_limit_over_every_conversation(world: GraphQLClient):
    cursors = [{"conversationId": str(n), "afterSeq": 0, "afterChangeSeq": 0} for n in range(1, 10)]
    body = await world.execute(_documented_sync().query, {"cursors": cursors}, user=1)
    assert "errors" not in body, body["errors"]
    pages = {s["conversationId"]: s for s in body["data"]["sync"]}
    assert len(pages["1"]["messages"]) == 300 // 9 and pages["1"]["hasMore"]  # the budget, shared


def test_the_documented_sync_is_priced_within_the_production_bound_up_to_394_cursors(prod: RunningServer):
    costs = CostCache(CostLimits.of(prod.settings))
    document = graphql.parse(_documented_sync().query)
    for count in (1, 3, 4, 300, 394):
        cost, _ = costs.cost(strawberry_compat.core_schema(schema), document, None, {"cursors": [{}] * count})
        assert cost <= prod.settings.max_operation_cost, (count, cost)
