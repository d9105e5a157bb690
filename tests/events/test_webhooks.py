"""Webhooks against a real endpoint (tests/support/webhooks.py) that fails, times out and recovers:
nothing lost, each conversation in order, duplicates with the same webhook-id and body, every
signature checked by the Standard Webhooks reference library; dead letters replayed with the CLI;
and a deliverer process killed with SIGKILL mid-stream, presence shared through Redis."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError
from standardwebhooks import Webhook

from chatgql import cli
from chatgql.events.presence import Presence
from chatgql.events.webhooks import parse_secret, sign
from chatgql.settings import load_settings

from ..conftest import REPO, RunningServer, free_port, make_settings
from ..support.infra import JWT_SECRET, ChatProcess, chat_env
from ..support.live import ChatApi, WsClient, bearer, metrics, wait_until, ws_connect
from ..support.webhooks import Receiver, new_secret
from .test_multiprocess import redis_url  # noqa: F401  the fixture

FAST = {
    "webhook_allow_private": True,  # the endpoint is 127.0.0.1, over http
    "webhook_timeout_seconds": 0.3,
    "webhook_backoff_seconds": 0.02,
    "webhook_max_backoff_seconds": 0.1,
    "webhook_poll_seconds": 0.05,
    "webhook_concurrency": 4,
    "big_group_threshold": 2,  # a group of 3 is big: its message.new carries a notice, no list
}


def _policy(event: dict, attempt: int) -> str:
    """Every third message: refused (503), then too slow (past the timeout), then taken; what user
    4 sends: always refused (dead letters)."""
    data = event["data"]
    if data["senderId"] == "4":
        return "fail"
    if data["seq"] % 3 == 1:
        return {1: "fail", 2: "hang"}.get(attempt, "ok")
    return "ok"


async def _cli(*args: str) -> str:
    """`chatgql <args>` in a thread (it runs its own event loop); what it printed."""
    out = io.StringIO()

    def run() -> None:
        with contextlib.redirect_stdout(out):
            cli.main(list(args))

    await asyncio.to_thread(run)
    return out.getvalue()


async def test_webhooks_survive_failures_and_timeouts_in_order_signed_and_dead_letters_replay(
    migrated_url: str, http, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = new_secret()
    async with Receiver(secret, hang_seconds=0.6) as receiver:
        settings = make_settings(
            migrated_url,
            webhook_url=receiver.url,
            webhook_secret=secret,
            webhook_max_attempts=4,
            relay_shards=1,  # the relay reads all slots at once (the SIGKILL test: 4 shards, by slot)
            **FAST,
        )
        async with RunningServer(settings) as server:
            api = ChatApi.of(server, http)
            pair = await api.create_group(1, [2])
            big = await api.create_group(1, [2, 3])
            doomed = await api.create_group(4, [5])
            receiver.policy = _policy
            async with await ws_connect(server, 2):  # user 2 online, user 1 not
                await wait_until(lambda: server.runtime.presence.here("2"), 5, "user 2 online")
                for _ in range(6):
                    await api.send(1, pair)
                    await api.send(2, pair)
                    await api.send(1, big)
                for _ in range(3):
                    await api.send(4, doomed)

                def delivered() -> bool:
                    return len(receiver.taken_keys()) == 18 and sum(r.answer == "fail" for r in receiver.requests) >= 12

                await wait_until(delivered, 30, "18 messages taken and 4 x 3 refused")
                async with server.runtime.deps.database.connection() as conn:
                    await wait_until(
                        lambda: conn.fetchval("SELECT count(*) = 3 FROM webhook_dead"), 10, "3 dead letters"
                    )
            assert receiver.unverified == 0
            receiver.check_order_and_ids()  # before the replay: the dead letters come back after the rest
            retried = [r for r in receiver.requests if r.answer == "hang"]
            assert retried and all(
                any(d.webhook_id == r.webhook_id and d.answer == "ok" for d in receiver.requests) for r in retried
            ), "a timed-out request was sent again (a duplicate, same id)"

            by_sender = {}
            for r in receiver.done():
                by_sender.setdefault((r.event["data"]["senderId"], r.event["data"]["conversationId"]), []).append(r)
            recipients = {key: rs[0].event["recipients"] for key, rs in by_sender.items()}
            assert sorted(map(str, recipients.values())) == sorted(
                map(
                    str,
                    [
                        {"memberCount": 2, "offline": []},  # 1 -> pair: 2 is online
                        {"memberCount": 2, "offline": ["1"]},  # 2 -> pair
                        {"memberCount": 3, "bigGroup": True, "offline": None},  # 1 -> big: a notice
                    ],
                )
            ), recipients
            assert {r.event["type"] for r in receiver.requests} == {"message.new"}

            # The dead letters: listed, queued again by the CLI, then taken with their old ids.
            monkeypatch.setenv("CHATGQL_DATABASE_URL", migrated_url)
            listing = await _cli("webhooks", "dead")
            assert len(listing.strip().splitlines()) == 4 and "HTTP 503" in listing, listing
            receiver.policy = lambda event, attempt: "ok"
            assert "queued again: 3" in await _cli("webhooks", "replay", "--all")
            await wait_until(lambda: len(receiver.taken_keys()) == 21, 10, "the 3 replayed messages taken")
            dead_ids = {r.webhook_id for r in receiver.requests if r.event["data"]["senderId"] == "4"}
            assert len(dead_ids) == 3  # the same id before and after the replay
            seen = await metrics(http, server)
            assert seen["chatgql_webhooks_delivered_total"] >= 21
            assert seen["chatgql_webhooks_retried_total"] >= 1
            assert seen["chatgql_webhooks_dead_lettered_total"] == 3
            assert seen["chatgql_webhooks_dead"] == 0 and seen["chatgql_webhooks_pending"] == 0
            assert "chatgql_webhooks_oldest_pending_age_seconds" in seen


def test_the_signature_is_the_one_standard_webhooks_libraries_compute() -> None:
    secret, old = new_secret(), new_secret()
    body = b'{"type":"message.new"}'
    expected = Webhook(secret).sign("msg_1", datetime.fromtimestamp(1767225600, UTC), body.decode())
    assert sign(parse_secret(secret), "msg_1", 1767225600, body) == expected
    # Rotation: two secrets, two signatures; an endpoint knowing either one verifies.
    both = sign(parse_secret(f"{old} {secret}"), "msg_1", int(time.time()), body)
    assert both.count("v1,") == 2
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(int(time.time())), "webhook-signature": both}
    for known in (old, secret):
        Webhook(known).verify(body, headers)


@pytest.mark.node
def test_the_documented_verifiers_accept_a_signed_request_and_refuse_a_forged_one() -> None:
    """The Python and Node verification code of docs/operating/webhooks.md, run as printed."""
    page = (REPO / "docs" / "operating" / "webhooks.md").read_text()
    python = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "def verify(" in b)
    node = re.findall(r"```js\n(.*?)```", page, re.S)[0]
    secret, body = new_secret(), b'{"type":"message.new","data":{"seq":1}}'
    timestamp = int(time.time())
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(timestamp),
        "webhook-signature": "v1,Zm9yZ2Vk " + sign(parse_secret(secret), "msg_1", timestamp, body),
    }
    scope: dict = {}
    exec(python, scope)  # noqa: S102  the page's own code
    scope["verify"](secret, headers, body)
    for forged in (body + b" ", b'{"type":"message.new","data":{"seq":2}}'):
        with pytest.raises(ValueError, match="no valid webhook signature"):
            scope["verify"](secret, headers, forged)
    script = node + (
        "const [secret, headers, body, forged] = JSON.parse(process.argv[1]);"
        "verify(secret, headers, Buffer.from(body));"
        "try { verify(secret, headers, Buffer.from(forged)); console.log('forged accepted'); }"
        "catch (e) { console.log('ok: ' + e.message); }"
    )
    argument = json.dumps([secret, headers, body.decode(), body.decode() + " "])
    out = subprocess.run(["node", "-e", script, argument], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.strip() == "ok: no valid webhook signature", out


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"webhook_url": "http://hooks.example.com/x"}, "must be https://"),
        ({"webhook_url": "https://127.0.0.1/x"}, "private, loopback"),
        ({"webhook_url": "https://10.1.2.3/x"}, "private, loopback"),
        ({"webhook_url": "https://[::1]/x"}, "private, loopback"),
        ({"webhook_url": "https://169.254.169.254/latest"}, "private, loopback"),
        ({"webhook_url": "https://localhost:8443/x"}, "private, loopback"),
        ({"webhook_url": "ftp://hooks.example.com/x"}, "must be an https:// URL"),
        ({"webhook_secret": None}, "needs CHATGQL_WEBHOOK_SECRET"),
        ({"webhook_secret": "whsec_not base64!"}, "must be base64"),
        ({"webhook_secret": "whsec_c2hvcnQ="}, "24 to 64 bytes"),
        ({"webhook_events": "message.new,typing"}, "unknown event kind(s) typing"),
    ],
)
def test_a_bad_webhook_setting_is_refused_at_start_with_what_to_do(overrides: dict, message: str) -> None:
    base = {"webhook_url": "https://hooks.example.com/chat", "webhook_secret": new_secret()}
    with pytest.raises(ValidationError, match=re.escape(message)):
        load_settings(**{**base, **overrides})
    load_settings(**base)  # the good one starts
    load_settings(**{**base, "webhook_url": "http://127.0.0.1:9/x", "webhook_allow_private": True})


async def test_a_deliverer_killed_mid_stream_loses_nothing_and_presence_crosses_processes(
    migrated_url: str,
    redis_url: str,  # noqa: F811
    http,
) -> None:
    """`chatgql serve --no-webhooks` (API and relay) and two `chatgql webhooks` (deliverers: one
    delivers, one stands by) as processes on one Redis bus: the delivering one is SIGKILLed while
    it posts, the other takes over, the killed one is started again."""
    secret = new_secret()
    log_dir = Path(tempfile.mkdtemp(prefix="chatgql-webhooks-"))
    async with Receiver(secret) as receiver:
        env = chat_env(migrated_url, "", "unused", redis_url)
        env.update(
            {
                "CHATGQL_WEBHOOK_URL": receiver.url,
                "CHATGQL_WEBHOOK_SECRET": secret,
                "CHATGQL_RELAY_STANDBY_SECONDS": "0.2",
                "CHATGQL_PRESENCE_HEARTBEAT_SECONDS": "1",
                **{f"CHATGQL_{k.upper()}": str(v).lower() for k, v in FAST.items()},
            }
        )
        port = free_port()
        api_process = ChatProcess("api", ["serve", "--no-webhooks", "--port", str(port)], env, log_dir, port)
        deliverers = [ChatProcess(f"webhooks-{i}", ["webhooks"], env, log_dir) for i in (1, 2)]
        api_process.start()
        for process in deliverers:
            process.start()
        try:
            await api_process.wait_ready(60)
            settings = make_settings(migrated_url, jwt_secret=JWT_SECRET)
            api = ChatApi(http, f"http://127.0.0.1:{port}/graphql", settings)
            conversations = [await api.create_group(1, [2]) for _ in range(3)]
            online = await WsClient.connect(f"ws://127.0.0.1:{port}/graphql", bearer(settings, 2))
            try:
                await _wait_online(redis_url, 2)
                sent = 0

                async def send(count: int) -> None:
                    nonlocal sent
                    for _ in range(count):
                        await api.send(1, conversations[sent % 3])
                        sent += 1

                await send(30)
                await wait_until(lambda: len(receiver.taken_keys()) >= 5, 30, "a deliverer to post")
                leader = next(p for p in deliverers if "deliverer leads" in p.log.read_text())
                leader.kill()  # mid-stream: 25 of the 30 may wait still
                await send(30)  # sends go on meanwhile
                leader.start()  # stands by: the other took over
                await wait_until(lambda: len(receiver.taken_keys()) == sent, 30, f"all {sent} messages taken")
                standby = next(p for p in deliverers if p is not leader)
                assert "deliverer leads" in standby.log.read_text()
            finally:
                await online.close()
            receiver.check_order_and_ids()
            assert receiver.unverified == 0
            # User 2's socket is on the API process; the deliverer learnt it through Redis.
            assert {str(r.event["recipients"]) for r in receiver.done()} == {str({"memberCount": 2, "offline": []})}
        finally:
            for process in (*deliverers, api_process):
                process.stop()


async def _wait_online(redis_url: str, user: int) -> None:
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    try:

        async def listed() -> bool:
            keys = [k for k in await client.keys("{chatgql.presence}.*") if not k.endswith(b".processes")]
            return any([await client.sismember(k, str(user)) for k in keys])

        await wait_until(listed, 10, f"user {user} online in Redis")
    finally:
        await client.aclose()


async def test_presence_is_shared_through_redis_and_a_silent_process_drops_out(redis_url: str) -> None:  # noqa: F811
    """A user online in one process is online for another; offline once their last socket
    closes; and a process that stops writing (killed) drops out when its entry expires."""
    api, deliverer, dying = (Presence(redis_url, heartbeat_seconds=s) for s in (5, 5, 0.1))
    writer = asyncio.create_task(api.run())
    try:
        api.connected(7)
        api.connected(7)  # two sockets
        await wait_until(lambda: deliverer.online([7, 8]), 5, "user 7 online elsewhere")
        assert await deliverer.online([7, 8]) == {7}
        api.disconnected(7)
        assert await deliverer.online([7]) == {7}  # one socket left
        api.disconnected(7)
        await wait_until(lambda: _offline(deliverer, 7), 5, "user 7 offline once both sockets closed")
        dying.connected(9)
        await dying._write()  # one heartbeat, then silence: as if SIGKILLed
        assert await deliverer.online([9]) == {9}
        await wait_until(lambda: _offline(deliverer, 9), 5, "a silent process's users offline")
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
        await deliverer.close()
        await dying.close()


async def _offline(presence: Presence, user: int) -> bool:
    return not await presence.online([user])
