"""The fast paths' switches (settings: prebuilt_pages, prepared_documents, park_subscriptions,
shared_event_results), which bench/fastpaths.py turns off one at a time to measure each against
the plain path: off, each path is really left out, and the answers stay the same."""

from __future__ import annotations

import asyncio
import uuid

from ..conftest import GraphQLClient, RunningServer, make_settings
from ..support.live import MESSAGE_NEW, ChatApi, subscribe_messages, wait_active_subscriptions, wait_until, ws_connect

INBOX = (
    "query { inbox(first: 20) { nodes { id title unreadCount lastMessage { seq senderId body createdAt } } "
    "pageInfo { hasNextPage endCursor } } }"
)


async def _inbox_twice(client: GraphQLClient, query: str, user: int) -> dict:
    first = await client.data(query, user=user)
    second = await client.data(query, user=user)  # an accepted document: the fast paths' way, if on
    assert first == second
    return second


async def _user_with_an_inbox(client: GraphQLClient) -> int:
    user = 7_000 + uuid.uuid4().int % 1_000_000
    for i in range(3):
        data = await client.data(
            "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }",
            {"t": f"switches {i}", "m": ["2"]},
            user=user,
        )
        cid = data["createGroup"]["id"]
        await client.data(
            'mutation($c: ID!, $k: UUID!) { sendMessage(conversationId: $c, clientMsgId: $k, body: "hi") '
            "{ duplicate } }",
            {"c": cid, "k": str(uuid.uuid4())},
            user=user,
        )
    return user


async def test_an_inbox_page_answers_alike_with_prebuilt_pages_or_prepared_documents_off(
    server, client, migrated_url, http
):
    user = await _user_with_an_inbox(client)
    query = f"# {uuid.uuid4()}\n{INBOX}"
    prebuilt_before = server.app.graphql.planner.stats.prebuilt
    fast = await _inbox_twice(client, query, user)
    assert server.app.graphql.planner.stats.prebuilt == prebuilt_before + 1  # the session's server prebuilt it
    assert len(fast["inbox"]["nodes"]) == 3

    settings = make_settings(migrated_url, run_relay=False, prebuilt_pages=False)
    async with RunningServer(settings) as no_prebuilt:
        other = GraphQLClient(http, no_prebuilt.url, no_prebuilt.settings)
        assert await _inbox_twice(other, query, user) == fast
        stats = no_prebuilt.app.graphql.planner.stats
        assert (stats.executions, stats.prebuilt) == (1, 0)  # planned, nothing prebuilt

    settings = make_settings(migrated_url, run_relay=False, prepared_documents=False)
    async with RunningServer(settings) as plain:
        other = GraphQLClient(http, plain.url, plain.settings)
        assert await _inbox_twice(other, query, user) == fast
        assert query not in plain.app.graphql.accepted  # Strawberry's whole way, every time
        assert plain.app.graphql.planner.stats.executions == 0


def _operation_tasks() -> int:
    names = {"run_operation", "handle_async_results"}
    return sum(1 for task in asyncio.all_tasks() if getattr(task.get_coro(), "__name__", None) in names)


async def test_with_parking_and_sharing_off_a_message_new_subscription_keeps_its_task(migrated_url, http):
    settings = make_settings(migrated_url, run_relay=False, park_subscriptions=False, shared_event_results=False)
    async with RunningServer(settings) as quiet:
        assert quiet.app.graphql.schema.sharing is None
        api = ChatApi.of(quiet, http)
        cid = await api.create_group(1, [2])
        for _ in range(2):  # the second subscriber of an accepted document is the one that would park
            idle = _operation_tasks()
            async with await ws_connect(quiet, 2) as ws:
                op = await subscribe_messages(ws, cid)
                await wait_active_subscriptions(quiet, 1)
                await wait_until(lambda idle=idle: _operation_tasks() == idle + 1, 10, "its task")
                await op.stop()
                await wait_active_subscriptions(quiet, 0)
        assert MESSAGE_NEW in quiet.app.graphql.accepted
