import time, uuid, asyncio, statistics
from graphql import parse
from chatgql.graphql.prepared import execute_accepted
from chatgql.graphql.plan import Planner
from tests.test_planner_differential import Differential

INBOX = "query { inbox(first: 50) { nodes { id title unreadCount lastMessage { seq body senderId createdAt } } pageInfo { hasNextPage endCursor } } }"
SEND = "mutation($c: ID!, $k: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $k, body: $b) { duplicate message { seq body senderId createdAt } } }"
READ = "mutation($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { conversationId lastReadSeq advanced unreadCount } }"
CREATE = "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }"

async def measure(label, fn, n):
    for _ in range(20):
        await fn()
    best = []
    for rep in range(3):
        c0 = time.process_time(); 
        for _ in range(n):
            await fn()
        best.append((time.process_time() - c0) / n * 1e6)
    print(f"MEASURE {label}: {min(best):.0f} us CPU per execution (runs {[round(b) for b in best]})")

async def test_measure(server, client):
    cids = []
    for i in range(200):
        cid = (await client.data(CREATE, {"t": f"g{i}", "m": ["2"]}, user=1))["createGroup"]["id"]
        await client.data(SEND, {"c": cid, "k": str(uuid.uuid4()), "b": f"hello {i}"}, user=2)
        cids.append(cid)
    d = Differential(server, client)
    schema = d.schema
    for label, q in [("inbox", INBOX)]:
        doc = parse(q)
        async def ref(): return await execute_accepted(schema, doc, None, None, d.context(1))
        async def plan(): return await d.planner.execute(schema, doc, q, None, None, d.context(1))
        assert d.encode(await ref()) == d.encode(await plan())
        await measure(f"{label} graphql-core", ref, 100)
        await measure(f"{label} plan", plan, 100)
    sdoc = parse(SEND)
    async def sref(): return await execute_accepted(schema, sdoc, {"c": cids[0], "k": str(uuid.uuid4()), "b": "x"}, None, d.context(1))
    async def splan(): return await d.planner.execute(schema, sdoc, SEND, {"c": cids[0], "k": str(uuid.uuid4()), "b": "x"}, None, d.context(1))
    await measure("sendMessage graphql-core", sref, 150)
    await measure("sendMessage plan", splan, 150)
    rdoc = parse(READ)
    seq = [0]
    async def rref(): seq[0] += 1; return await execute_accepted(schema, rdoc, {"c": cids[1], "s": 1}, None, d.context(2))
    async def rplan(): seq[0] += 1; return await d.planner.execute(schema, rdoc, READ, {"c": cids[1], "s": 1}, None, d.context(2))
    await measure("markRead graphql-core", rref, 150)
    await measure("markRead plan", rplan, 150)

async def test_profile(server, client):
    import cProfile, pstats
    for i in range(200):
        cid = (await client.data(CREATE, {"t": f"g{i}", "m": ["2"]}, user=1))["createGroup"]["id"]
        await client.data(SEND, {"c": cid, "k": str(uuid.uuid4()), "b": f"hello {i}"}, user=2)
    d = Differential(server, client)
    doc = parse(INBOX)
    async def plan(): return await d.planner.execute(d.schema, doc, INBOX, None, None, d.context(1))
    for _ in range(20): await plan()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(100): await plan()
    pr.disable()
    st = pstats.Stats(pr); st.sort_stats("cumtime").print_stats(45)
