"""CPU per execution, graphql-core's executor vs the plan, in this process with real PostgreSQL.

Not part of the suite (it lives in bench/); run it explicitly, with the suite's fixtures:

    python -m pytest bench/history/measure_planner.py -p tests.conftest -q -s -p no:cacheprovider

One user in 200 conversations with a message each; the inbox page of 50 (with
lastMessage), a smaller selection, sendMessage and markRead, each run both ways
interleaved (five at a time, 40 rounds). Only execution is measured: no HTTP,
no JSON encoding. process_time counts this whole process (the server's own
background tasks included), so compare the two columns rather than reading
either alone.
"""

import statistics
import time
import uuid

from graphql import parse

from chatgql.engine.prepared import execute_accepted
from tests.graphql.plan.test_planner_differential import Differential

INBOX = "query { inbox(first: 50) { nodes { id title unreadCount lastMessage { seq body senderId createdAt } } pageInfo { hasNextPage endCursor } } }"
SEND = "mutation($c: ID!, $k: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $k, body: $b) { duplicate message { seq body senderId createdAt } } }"
READ = "mutation($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { conversationId lastReadSeq advanced unreadCount } }"
CREATE = "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }"


async def compare(label, ref, plan, n):
    for _ in range(20):
        await ref()
        await plan()
    t = {"graphql-core": [], "plan": []}
    for _rep in range(n):
        for name, fn in (("graphql-core", ref), ("plan", plan)):
            c0 = time.process_time()
            for _ in range(5):
                await fn()
            t[name].append((time.process_time() - c0) / 5 * 1e6)
    for name, xs in t.items():
        xs.sort()
        print(
            f"MEASURE {label} {name}: median {statistics.median(xs):.0f} us, p25 {xs[len(xs) // 4]:.0f} us CPU per execution"
        )


async def test_measure(server, client):  # noqa: C901 - a script
    cids = []
    for i in range(200):
        cid = (await client.data(CREATE, {"t": f"g{i}", "m": ["2"]}, user=1))["createGroup"]["id"]
        await client.data(SEND, {"c": cid, "k": str(uuid.uuid4()), "b": f"hello {i}"}, user=2)
        cids.append(cid)
    d = Differential(server, client)
    schema = d.schema
    for label, q in [
        ("inbox", INBOX),
        ("inbox-nodes-only", "query { inbox(first: 50) { nodes { id title unreadCount } pageInfo { hasNextPage } } }"),
        ("inbox-minimal", "query { inbox(first: 50) { pageInfo { hasNextPage } } }"),
    ]:
        doc = parse(q)

        async def ref(doc=doc):
            return await execute_accepted(schema, doc, None, None, d.context(1))

        async def plan(doc=doc, q=q):
            return await d.planner.execute(schema, doc, q, None, None, d.context(1))

        assert d.encode(await ref()) == d.encode(await plan())
        await compare(label, ref, plan, 40)
    sdoc = parse(SEND)

    async def sref():
        return await execute_accepted(
            schema, sdoc, {"c": cids[0], "k": str(uuid.uuid4()), "b": "x"}, None, d.context(1)
        )

    async def splan():
        return await d.planner.execute(
            schema, sdoc, SEND, {"c": cids[0], "k": str(uuid.uuid4()), "b": "x"}, None, d.context(1)
        )

    await compare("sendMessage", sref, splan, 40)
    rdoc = parse(READ)
    seq = [0]

    async def rref():
        seq[0] += 1
        return await execute_accepted(schema, rdoc, {"c": cids[1], "s": 1}, None, d.context(2))

    async def rplan():
        seq[0] += 1
        return await d.planner.execute(schema, rdoc, READ, {"c": cids[1], "s": 1}, None, d.context(2))

    await compare("markRead", rref, rplan, 40)


async def test_measure_http(server, client):
    """The same over HTTP to the in-process server, planner on and off (server.app.graphql.planner):
    this process's CPU per request, httpx client included (the same on both sides)."""
    cids = []
    for i in range(200):
        cid = (await client.data(CREATE, {"t": f"g{i}", "m": ["2"]}, user=1))["createGroup"]["id"]
        await client.data(SEND, {"c": cid, "k": str(uuid.uuid4()), "b": f"hello {i}"}, user=2)
        cids.append(cid)
    planner = server.app.graphql.planner
    requests = {
        "inbox": (INBOX, lambda: None, 1),
        "sendMessage": (SEND, lambda: {"c": cids[0], "k": str(uuid.uuid4()), "b": "x"}, 1),
        "markRead": (READ, lambda: {"c": cids[1], "s": 1}, 2),
    }
    for label, (query, variables, user) in requests.items():

        async def on(query=query, variables=variables, user=user):
            planner.enabled = True
            await client.data(query, variables(), user=user)

        async def off(query=query, variables=variables, user=user):
            planner.enabled = False
            await client.data(query, variables(), user=user)

        try:
            await compare(f"HTTP {label}", off, on, 30)
        finally:
            planner.enabled = True
