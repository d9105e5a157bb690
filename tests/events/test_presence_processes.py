"""Presence across processes: two `chatgql serve` processes on one Redis bus (the setup of the webhooks'
presence test). A user is online while a websocket of theirs is open on either; the watcher, on the other
process, is told online and offline over the bus; when the user's last two sockets close on both
processes at once, the last process to let them go finds them offline and says so."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path

from ..conftest import free_port, make_settings
from ..support.infra import JWT_SECRET, ChatProcess, chat_env
from ..support.live import ChatApi, Operation, WsClient, bearer, wait_until
from .test_multiprocess import redis_url  # noqa: F401  the fixture

PRESENCE = "query($u: [ID!]!) { presence(userIds: $u) { userId online } }"
CHANGED = "subscription($u: [ID!]!) { presenceChanged(userIds: $u) { userId visible online lastSeenAt } }"


async def _next(op: Operation) -> tuple:
    p = (await op.next(timeout=30))["presenceChanged"]
    return p["userId"], p["visible"], p["online"]


async def test_presence_crosses_processes_and_the_last_process_to_let_a_user_go_tells_offline(
    migrated_url: str,
    redis_url: str,  # noqa: F811
    http,
) -> None:
    log_dir = Path(tempfile.mkdtemp(prefix="chatgql-presence-"))
    env = chat_env(migrated_url, "", "unused", redis_url)
    env["CHATGQL_PRESENCE_HEARTBEAT_SECONDS"] = "1"
    ports = [free_port(), free_port()]
    processes = [ChatProcess(f"api-{i}", ["serve", "--port", str(p)], env, log_dir, p) for i, p in enumerate(ports)]
    for process in processes:
        process.start()
    settings = make_settings(migrated_url, jwt_secret=JWT_SECRET)
    apis = [ChatApi(http, f"http://127.0.0.1:{port}/graphql", settings) for port in ports]
    tag = uuid.uuid4().hex[:8]
    member, watcher = f"pp-{tag}-member", f"pp-{tag}-watcher"

    async def socket(on: int, user: str) -> WsClient:
        return await WsClient.connect(f"ws://127.0.0.1:{ports[on]}/graphql", bearer(settings, user))  # type: ignore[arg-type]

    async def online_for(on: int) -> bool | None:
        return (await apis[on].data(PRESENCE, {"u": [member]}, user=watcher))["presence"][0]["online"]

    try:
        for process in processes:
            await process.wait_ready(90)
        await apis[0].create_group(member, [watcher])  # type: ignore[arg-type]
        watching = await socket(1, watcher)
        try:
            changes = await watching.subscribe(CHANGED, {"u": [member]})
            assert await _next(changes) == (member, True, False)
            first = await socket(0, member)  # on the other process
            assert await _next(changes) == (member, True, True)
            second = await socket(1, member)
            await wait_until(lambda: _listed_by(redis_url, member, 2), 10, "both processes list the member in Redis")
            await first.close()  # still on the second process
            await wait_until(lambda: _is(online_for(0), True), 10, "online, as process 0 learns from Redis")
            assert await online_for(1) is True
            await second.close()
            assert await _next(changes) == (member, True, False)
            assert await online_for(0) is False

            both = [await socket(0, member), await socket(1, member)]
            assert await _next(changes) == (member, True, True)
            await wait_until(lambda: _listed_by(redis_url, member, 2), 10, "both processes list the member in Redis")
            await asyncio.gather(*(s.close() for s in both))  # both at once: neither may leave them online
            assert await _next(changes) == (member, True, False)
            await wait_until(lambda: _is(online_for(0), False), 10, "offline for process 0 too")
            assert await online_for(1) is False
        finally:
            await watching.close()
    finally:
        for process in processes:
            process.stop()


async def _is(answer, expected: bool) -> bool:  # type: ignore[no-untyped-def]
    return await answer is expected


async def _listed_by(redis_url: str, user: str, processes: int) -> bool:  # noqa: F811
    """Whether that many processes' presence entries in Redis list the user."""
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    try:
        keys = [k for k in await client.keys("{chatgql.presence}.*") if not k.endswith(b".processes")]
        return sum([bool(await client.sismember(k, user)) for k in keys]) == processes
    finally:
        await client.aclose()
