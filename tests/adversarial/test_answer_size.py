"""Requests and subscriptions whose fields multiply into huge answers are refused before they run.

The probes that found it (a group of 20 members, 200 messages of 3,900 characters):
- one 25 KB POST, a batch of 10 copies of 20 aliases of
  messages(last: 200) { nodes { ... seenBy(first: 1000) } }: a 167 MB answer after 10.65 s,
  RSS 266 -> 678 MB, a bystander stalled 7.8 s; four at once stalled the bus heartbeat and
  every live subscription of the server ended;
- nodes(ids:) with 20 aliases: the same (bystander 11.9 s);
- 100 subscriptions on one socket, each selecting the event's conversation { messages(last: 200)
  { nodes { body seenBy(first: 1000) } } }: 76 MB per message sent.

Each is now priced (engine/cost.py) and refused with LIMIT_EXCEEDED before it runs; what is
within the bounds is bounded in answer bytes and CPU time as it runs, on the planner's path as
on graphql-core's. The bystander runs in its own process; its latency is asserted loosely (a
busy 2-core CI machine), and printed (`-s`) with the server's RSS and answer times.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import httpx
import pytest

from ..support.live import LEGACY_WS, TRANSPORT_WS, SubscriptionError, WsClient, random_body
from .conftest import ProcessBystander, RawHttp, ServeProcess, serve_process

OWNER = 7000
MEMBERS = [OWNER + 1 + i for i in range(19)]  # 20 members in all
FIELDS = "id seq body senderId seenByCount seen seenBy(first: 1000) createdAt"
AMPLIFIED = (
    "query($c: ID!) { "
    + " ".join(f"a{i}: messages(conversationId: $c, last: 200) {{ nodes {{ {FIELDS} }} }}" for i in range(20))
    + " }"
)
NODES = (
    "query($ids: [ID!]!) { "
    + " ".join(f"a{i}: nodes(ids: $ids) {{ ... on Message {{ {FIELDS} }} }}" for i in range(20))
    + " }"
)
ONE_PAGE = f"query($c: ID!) {{ messages(conversationId: $c, last: 200) {{ nodes {{ {FIELDS} }} }} }}"
SEND = (
    "mutation($c: ID!, $m: UUID!, $b: String!) "
    "{ sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { seq } } }"
)
LIVE = "subscription($c: ID) { messageNew(conversationId: $c) { seq message { body } } }"


def rss(server: ServeProcess) -> int:
    assert server.proc is not None
    with open(f"/proc/{server.proc.pid}/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def codes(answer: dict) -> list[str]:
    return [error["extensions"]["code"] for error in answer.get("errors") or []]


async def seed(server: ServeProcess, http: httpx.AsyncClient) -> str:
    """A group of 20 members and 200 messages of 3,900 characters (10 per member: within the send
    rate limits), sent as one batch of 10 sends per member. The group's id."""
    created = await http.post(
        server.url,
        json={
            "query": 'mutation($ids: [ID!]!) { createGroup(title: "big", memberIds: $ids) { id } }',
            "variables": {"ids": [str(m) for m in MEMBERS]},
        },
        headers=server.headers(OWNER),
    )
    group = created.json()["data"]["createGroup"]["id"]

    async def send_ten(user: int) -> None:
        batch = [
            {"query": SEND, "variables": {"c": group, "m": str(uuid.uuid4()), "b": random_body(3900)}}
            for _ in range(10)
        ]
        answers = (await http.post(server.url, json=batch, headers=server.headers(user))).json()
        assert all("errors" not in a for a in answers), answers

    await asyncio.gather(*(send_ten(user) for user in [OWNER, *MEMBERS]))
    return group


async def live_subscriptions(server: ServeProcess, group: str) -> tuple[list[WsClient], list]:
    """Other people's live subscriptions: one to the group, one to all of a member's conversations."""
    clients, operations = [], []
    for user, conversation in ((MEMBERS[0], group), (MEMBERS[1], None)):
        client = await WsClient.connect(server.ws_url, f"Bearer {server.token(user)}")
        clients.append(client)
        operations.append(await client.subscribe(LIVE, {"c": conversation}))
    return clients, operations


async def assert_still_live(server: ServeProcess, http: httpx.AsyncClient, group: str, operations: list) -> None:
    """A message sent now reaches every live subscription (an ended one raises: resync error)."""
    # Subscriptions register asynchronously: send until the first one sees a message.
    body = f"after the attack {uuid.uuid4()}"
    answer = await http.post(
        server.url,
        json={"query": SEND, "variables": {"c": group, "m": str(uuid.uuid4()), "b": body}},
        headers=server.headers(OWNER),
    )
    assert "errors" not in answer.json(), answer.text
    for operation in operations:
        while True:
            event = await operation.next(timeout=20)
            if event["messageNew"]["message"]["body"] == body:
                break


async def post(server: ServeProcess, payload: object, user: int) -> tuple[int, bytes, float]:
    """(status, body, seconds) of one POST, on a raw connection (little client CPU)."""
    connection = RawHttp(server)
    started = time.perf_counter()
    try:
        status, body = await connection.post(json.dumps(payload).encode(), server.headers(user))
    finally:
        await connection.close()
    return status, body, time.perf_counter() - started


async def test_amplified_batches_and_nodes_are_refused_before_they_run(prod: ServeProcess, http):
    group = await seed(prod, http)
    ids = [
        n["id"]
        for n in (
            await http.post(
                prod.url,
                json={
                    "query": "query($c: ID!) { messages(conversationId: $c, last: 200) { nodes { id } } }",
                    "variables": {"c": group},
                },
                headers=prod.headers(OWNER),
            )
        ).json()["data"]["messages"]["nodes"]
    ]
    assert len(ids) == 200
    batch = [{"query": AMPLIFIED, "variables": {"c": group}} for _ in range(10)]
    assert 20_000 < len(json.dumps(batch)) < 30_000  # the 25 KB request of the probe
    nodes = {"query": NODES, "variables": {"ids": ids}}
    clients, live = await live_subscriptions(prod, group)
    try:
        async with ProcessBystander(prod) as quiet:  # the same run's baseline: no attack
            await asyncio.sleep(1.5)
        print(f"\nMEASURE quiet: bystander {quiet.summary()}")
        before = rss(prod)
        async with ProcessBystander(prod) as bystander:
            # Four at once, twice: the second time the document is one the server accepted
            # before, and runs on the planner's path.
            answers = []
            for _ in range(2):
                answers += await asyncio.gather(*(post(prod, batch, OWNER) for _ in range(4)))
                answers += await asyncio.gather(*(post(prod, nodes, OWNER) for _ in range(4)))
        grown = rss(prod) - before
        worst = max(seconds for _, _, seconds in answers)
        print(
            f"\nMEASURE amplified: answers {max(len(b) for _, b, _ in answers):,} bytes at most, "
            f"slowest {worst * 1000:.0f} ms; RSS +{grown / 2**20:.0f} MB; bystander {bystander.summary()}"
        )
        for status, body, _ in answers:
            assert status == 200 and len(body) < 20_000, (status, len(body))
            answer = json.loads(body)
            for entry in answer if isinstance(answer, list) else [answer]:
                assert entry["data"] is None and codes(entry) == ["LIMIT_EXCEEDED"], entry
                assert entry["errors"][0]["extensions"]["limit"] == "cost", entry
        assert grown < 100 * 2**20, f"RSS grew {grown / 2**20:.0f} MB"
        bystander.assert_served(p99=1.0)
        await assert_still_live(prod, http, group, live)
    finally:
        for client in clients:
            await client.close()


async def test_the_largest_page_is_served_and_four_at_once_do_not_stall_the_others(prod: ServeProcess, http):
    """Within the bounds: 200 messages with seenBy(first: 1000), the largest page there is."""
    group = await seed(prod, http)
    page = {"query": ONE_PAGE, "variables": {"c": group}}
    clients, live = await live_subscriptions(prod, group)
    try:
        async with ProcessBystander(prod) as bystander:
            answers = await asyncio.gather(*(post(prod, page, OWNER) for _ in range(4)))
            answers += await asyncio.gather(*(post(prod, page, OWNER) for _ in range(4)))  # planned
        print(
            f"\nMEASURE largest page: {len(answers[0][1]):,} bytes, slowest "
            f"{max(s for _, _, s in answers) * 1000:.0f} ms; bystander {bystander.summary()}"
        )
        for status, body, _ in answers:
            answer = json.loads(body)
            assert status == 200 and "errors" not in answer, body[:500]
            assert len(answer["data"]["messages"]["nodes"]) == 200
        # Four of the most expensive requests allowed share the CPU with the bystander (~1,600
        # steps each): slower than during the refusals above, but no wait behind one of them.
        bystander.assert_served(p99=2.0)
        await assert_still_live(prod, http, group, live)
    finally:
        for client in clients:
            await client.close()


async def test_subscriptions_that_multiply_every_event_are_refused_when_they_subscribe(prod: ServeProcess, http):
    group = await seed(prod, http)
    clients, live = await live_subscriptions(prod, group)
    attacker = await WsClient.connect(prod.ws_url, f"Bearer {prod.token(OWNER)}")
    try:
        refused = []
        async with ProcessBystander(prod) as bystander:
            operations = [
                await attacker.subscribe(
                    f"subscription S{i} {{ messageNew {{ seq conversation {{ messages(last: 200) "
                    "{ nodes { body seenBy(first: 1000) } } } } }"
                )
                for i in range(100)
            ]
            for operation in operations:
                try:
                    await operation.next(timeout=20)
                except SubscriptionError as error:
                    refused.append(error)
            # What the attacker sends into its own group now costs a few kilobytes per subscriber.
            for _ in range(3):
                answer = await http.post(
                    prod.url,
                    json={"query": SEND, "variables": {"c": group, "m": str(uuid.uuid4()), "b": random_body(3900)}},
                    headers=prod.headers(OWNER),
                )
                assert "errors" not in answer.json(), answer.text
        print(f"\nMEASURE subscriptions: {len(refused)} of 100 refused; bystander {bystander.summary()}")
        assert len(refused) == 100
        assert {error.code for error in refused} == {"LIMIT_EXCEEDED"}
        assert {error.extensions.get("limit") for error in refused} == {"cost"}
        # The refused ones hold nothing: the same socket subscribes as anyone does.
        normal = await attacker.subscribe(LIVE, {"c": group})
        bystander.assert_served(p99=1.0)
        await assert_still_live(prod, http, group, [*live, normal])
    finally:
        await attacker.close()
        for client in clients:
            await client.close()


@pytest.mark.parametrize("protocol", [TRANSPORT_WS, LEGACY_WS])
async def test_a_websockets_subscriptions_are_bounded_together(prod: ServeProcess, http, protocol):
    """Each within the per-event bound, together over the per-socket one: the ones past it are
    refused, and a subscription that ends gives its share back (both protocols)."""
    from graphql import parse

    from chatgql.compat import strawberry as strawberry_compat
    from chatgql.engine.cost import CostCache, CostLimits
    from chatgql.graphql.schema import schema

    group = await seed(prod, http)
    document = "subscription { messageNew { seq message { body seenBy(first: 1000) } } }"
    limits = CostLimits()
    each, _ = CostCache(limits).cost(strawberry_compat.core_schema(schema), parse(document), None, {})
    assert each <= limits.max_event_cost
    fits = limits.max_socket_event_cost // each
    assert fits < 100  # the per-socket count limit would not be what refuses them
    client = await WsClient.connect(prod.ws_url, f"Bearer {prod.token(OWNER)}", protocol=protocol)

    async def outcomes(operations: list) -> list[str]:
        """The "event", or the error code, of each operation's first frame; messages are sent until
        every operation had one (a subscription registers a moment after it is accepted)."""
        found: dict[int, str] = {}
        for _ in range(30):
            await send(prod, http, group)
            for index, operation in enumerate(operations):
                if index in found:
                    continue
                try:
                    await operation.next(timeout=1)
                    found[index] = "event"
                except SubscriptionError as error:
                    assert error.extensions.get("limit") == "cost", error.errors
                    found[index] = error.code or ""
                except TimeoutError:
                    pass
            if len(found) == len(operations):
                return [found[i] for i in range(len(operations))]
        raise AssertionError(f"operations without any frame: {len(operations) - len(found)}")

    try:
        operations = [await client.subscribe(document) for _ in range(fits + 3)]
        seen = await outcomes(operations)
        assert seen.count("event") == fits and seen.count("LIMIT_EXCEEDED") == 3, seen
        await client.stop(operations[seen.index("event")].id)
        assert await outcomes([await client.subscribe(document)]) == ["event"]  # its share came back
    finally:
        await client.close()


async def send(server: ServeProcess, http: httpx.AsyncClient, group: str) -> None:
    answer = await http.post(
        server.url,
        json={"query": SEND, "variables": {"c": group, "m": str(uuid.uuid4()), "b": "hello"}},
        headers=server.headers(OWNER),
    )
    assert "errors" not in answer.json(), answer.text


async def test_answer_bytes_and_cpu_time_end_a_request_on_both_paths(prod: ServeProcess, migrated_url, http):
    """A request within the price that answers more bytes, or takes more CPU time, than allowed:
    LIMIT_EXCEEDED (reason RESPONSE_SIZE or CPU), a coded error and not a cut answer or a 500;
    by graphql-core's executor the first time, by plan once the document is accepted."""
    group = await seed(prod, http)  # by a server with the default bounds, on the same database
    for env, reason in (
        ({"CHATGQL_MAX_RESPONSE_BYTES": "100000"}, "RESPONSE_SIZE"),
        ({"CHATGQL_MAX_REQUEST_CPU_MS": "2"}, "CPU"),
    ):
        async with serve_process(migrated_url, **env) as server:
            for _ in range(3):
                status, body, _ = await post(server, {"query": ONE_PAGE, "variables": {"c": group}}, OWNER)
                assert status == 200 and len(body) < 10_000, (status, len(body))
                answer = json.loads(body)
                assert answer["data"] is None and codes(answer) == ["LIMIT_EXCEEDED"], answer
                assert answer["errors"][0]["extensions"]["reason"] == reason, answer
            if reason == "RESPONSE_SIZE":  # (2 ms of CPU is too little for anything)
                small = await http.post(
                    server.url, json={"query": "{ viewer { totalUnread } }"}, headers=server.headers(OWNER)
                )
                assert "errors" not in small.json() and small.json()["data"]["viewer"]["totalUnread"] >= 0
