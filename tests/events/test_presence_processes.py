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


VISIBILITY = "mutation($v: PresenceVisibility!) { setPresenceVisibility(visibility: $v) { visibility } }"


async def test_presence_crosses_the_workers_of_one_serve_on_the_hub(migrated_url: str, tmp_path: Path) -> None:
    """`chatgql serve --workers 2` without Redis: the workers tell the supervisor's hub and ask it. A
    member with a socket on one worker only is online for a watcher on the other; a socket closing on
    one worker while another stays open on the other tells nobody anything; the last one closing, on
    either worker, tells offline to the watcher on the other and writes the last seen; both closing at
    once leave the member offline. (A worker asks the hub on the connection it tells it on, so a
    presence call on a worker about a user with no socket anywhere is how the test knows the hub read
    what that worker told it before.)"""
    import httpx
    from sqlalchemy import text

    from .test_workers import only_one_accepting, workers_server

    async with workers_server(migrated_url, tmp_path, None, "unused", "hub") as server:
        w0, w1 = server.process.workers()[:2]
        tag = uuid.uuid4().hex[:8]
        member, watcher, other = f"ph-{tag}-member", f"ph-{tag}-watcher", f"ph-{tag}-other"
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as http:
            api = ChatApi(http, server.url, server.settings)

            async def on(worker: int, call):  # type: ignore[no-untyped-def]
                with only_one_accepting(server.process, worker):
                    return await call()

            async def socket(worker: int, user: str) -> WsClient:
                return await on(worker, lambda: WsClient.connect(server.ws_url, bearer(server.settings, user)))

            async def online_for(worker: int, user: str = member) -> bool | None:
                data = await on(worker, lambda: api.data(PRESENCE, {"u": [user]}, user=watcher))
                return data["presence"][0]["online"]

            async def visibility(worker: int, value: str) -> None:
                await on(worker, lambda: api.data(VISIBILITY, {"v": value}, user=member))

            async def stored_last_seen():  # type: ignore[no-untyped-def]
                async with server.engine.connect() as conn:
                    return (
                        await conn.execute(
                            text("SELECT last_seen_at FROM user_presence WHERE user_id = :u"), {"u": member}
                        )
                    ).scalar_one()

            await api.create_group(member, [watcher, other])  # type: ignore[arg-type]
            watching = await socket(w1, watcher)
            try:
                changes = await watching.subscribe(CHANGED, {"u": [member]})
                assert await _next(changes) == (member, True, False)

                second = await socket(w1, member)
                assert await _next(changes) == (member, True, True)
                assert await online_for(w0) is True  # w0 holds no socket of theirs: it asks the hub
                first = await socket(w0, member)
                assert await online_for(w0, other) is False  # w0 asked the hub after telling it of first

                await second.close()  # w1's last, w0's still open: nothing changes for the watcher
                await visibility(w0, "CONTACTS")  # the next change the watcher sees is this one
                assert await _next(changes) == (member, False, None)
                await visibility(w0, "EVERYONE")
                assert await _next(changes) == (member, True, True)
                assert await online_for(w1) is True
                assert await online_for(w0) is True

                async with server.engine.begin() as conn:  # as if the member connected minutes ago
                    backdate = (
                        "UPDATE user_presence SET last_seen_at = last_seen_at - interval '5 minutes' WHERE user_id = :u"
                    )
                    await conn.execute(text(backdate), {"u": member})
                before = await stored_last_seen()
                await first.close()  # the last one, on w0: offline for the watcher on w1
                event = (await changes.next(timeout=30))["presenceChanged"]
                assert (event["visible"], event["online"]) == (True, False)
                written = await stored_last_seen()
                assert (written - before).total_seconds() >= 5 * 60 - 1
                assert event["lastSeenAt"] is not None
                assert await online_for(w1) is False
                assert await online_for(w0) is False

                both = [await socket(w0, member), await socket(w1, member)]
                assert await _next(changes) == (member, True, True)
                assert await online_for(w0) is True
                await asyncio.gather(*(s.close() for s in both))  # both at once: neither leaves them online
                assert await _next(changes) == (member, True, False)
                await wait_until(lambda: _is(online_for(w0), False), 10, "offline for w0")
                assert await online_for(w1) is False
            finally:
                await watching.close()
