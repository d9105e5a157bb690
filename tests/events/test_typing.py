"""typing(conversationId:): ephemeral (the bus only, never PostgreSQL or the outbox), members only,
rate-limited, with an `until`; across processes through a Redis bus; off in big groups."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

from tests.conftest import RunningServer, error_code, make_settings
from tests.support.live import ChatApi, wait_active_subscriptions, ws_connect

from ..graphql.test_query_count import counting_statements
from .test_multiprocess import redis_url  # noqa: F401  (a fixture: a redis-server of the test's own)

TYPING = "mutation($c: ID!) { typing(conversationId: $c) { conversationId until sent } }"
EVENTS = "subscription($c: ID) { typing(conversationId: $c) { conversationId userId until } }"


async def typing(api: ChatApi, user: int, cid: str) -> dict:
    return (await api.data(TYPING, {"c": cid}, user=user))["typing"]


async def test_the_other_members_are_told_until_when_and_nothing_is_written(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2, 3])
    elsewhere = await api.create_group(4, [5])
    clients = await asyncio.gather(*(ws_connect(server, user) for user in (1, 2, 3, 5)))
    try:
        own, two, three, outsider = [await c.subscribe(EVENTS, {}) for c in clients]
        three_here = await clients[2].subscribe(EVENTS, {"c": cid})
        await wait_active_subscriptions(server, 5)
        before = datetime.now(UTC)
        with counting_statements(server) as statements:
            answer = await typing(api, 1, cid)
            await asyncio.sleep(0.05)  # the last statements' loggers run on the loop's next turns
        after = datetime.now(UTC)
        # reads only (is the viewer a member; the dispatcher's member list): no outbox, nothing written
        assert statements and all(s.startswith("SELECT") and "outbox" not in s for s in statements), statements
        assert answer["conversationId"] == cid and answer["sent"] is True
        until = datetime.fromisoformat(answer["until"])
        seconds = server.settings.typing_seconds
        assert before + timedelta(seconds=seconds - 1) <= until <= after + timedelta(seconds=seconds + 1)
        expected = {"conversationId": cid, "userId": "1", "until": answer["until"]}
        for op in (two, three, three_here):
            assert (await op.next())["typing"] == expected
        # the typer's own devices and non-members got nothing: their next event is the next one for them
        await typing(api, 2, cid)
        assert (await own.next())["typing"]["userId"] == "2"
        await typing(api, 4, elsewhere)
        assert (await outsider.next())["typing"]["conversationId"] == elsewhere
    finally:
        await asyncio.gather(*(c.close() for c in clients))


async def test_members_only(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2])
    assert error_code(await api.error(TYPING, {"c": cid}, user=3)) == "NOT_FOUND"
    assert error_code(await api.error(TYPING, {"c": "987654"}, user=1)) == "NOT_FOUND"
    assert error_code(await api.error(TYPING, {"c": "x"}, user=1)) == "BAD_USER_INPUT"
    client = await ws_connect(server, 3)
    try:
        op = await client.subscribe(EVENTS, {"c": cid})
        assert (await op.error()).code == "NOT_FOUND"
    finally:
        await client.close()


async def test_big_groups_have_no_typing(server, http):
    api = ChatApi.of(server, http)
    threshold = server.settings.big_group_threshold
    big = await api.create_group(1, range(2, threshold + 3))
    small = await api.create_group(1, [2])
    client = await ws_connect(server, 2)
    try:
        op = await client.subscribe(EVENTS, {})
        await wait_active_subscriptions(server, 1)
        assert (await typing(api, 1, big))["sent"] is False
        assert (await typing(api, 1, small))["sent"] is True
        assert (await op.next())["typing"]["conversationId"] == small
    finally:
        await client.close()


async def test_across_processes_through_a_redis_bus_and_rate_limited(migrated_url, http, redis_url):  # noqa: F811
    a = RunningServer(
        make_settings(migrated_url, broadcast_url=redis_url, rate_typing_per_second=0.01, rate_typing_burst=3)
    )
    b = RunningServer(make_settings(migrated_url, broadcast_url=redis_url, run_relay=False))
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(a)
        await stack.enter_async_context(b)
        api_a = ChatApi.of(a, http)
        cid = await api_a.create_group(1, [2])
        async with await ws_connect(b, 2) as on_b:
            op = await on_b.subscribe(EVENTS, {"c": cid})
            await wait_active_subscriptions(b, 1)
            answer = await typing(api_a, 1, cid)  # typed through A, subscribed on B
            assert (await op.next())["typing"] == {"conversationId": cid, "userId": "1", "until": answer["until"]}
            await typing(api_a, 1, cid)
            await typing(api_a, 1, cid)
            limited = await api_a.error(TYPING, {"c": cid}, user=1)  # the burst of 3 is spent
            assert error_code(limited) == "LIMIT_EXCEEDED"
