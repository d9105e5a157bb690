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

import httpx
import pytest
from pydantic import ValidationError
from standardwebhooks import Webhook

from chatgql.events.hub import Hub, HubPresenceLink
from chatgql.events.presence import Presence
from chatgql.events.webhooks import Deliverer, parse_retry_after, parse_secret, retry_delay, sign
from chatgql.server import cli
from chatgql.services.changes import CONTENT_KINDS
from chatgql.services.erase import erase_user
from chatgql.settings import load_settings
from chatgql.store import outbox
from chatgql.store import webhooks as webhook_store

from ..conftest import REPO, RunningServer, free_port, make_settings
from ..support.infra import JWT_SECRET, ChatProcess, chat_env, tail
from ..support.live import ChatApi, WsClient, bearer, metrics, wait_until, ws_connect
from ..support.webhooks import Receiver, new_secret
from .test_multiprocess import redis_url  # noqa: F401  the fixture
from .test_workers import only_one_accepting, sockets_by_worker, workers_server

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
        ({"webhook_events": "presence.changed"}, "unknown event kind(s) presence.changed"),
        ({"webhook_events": "message.new,draft.updated"}, "unknown event kind(s) draft.updated"),
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


# --- deletes and erases reach the webhooks ---------------------------------------------------

SECRETS = ("alpha-secret", "bravo-secret", "bravo-secret-edited", "charlie-secret", "delta-secret")
EDIT = "mutation($c: ID!, $s: Long!, $b: String!) { editMessage(conversationId: $c, seq: $s, body: $b) { changeSeq } }"
DELETE = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }"


async def _stored_secrets(conn) -> list[str]:
    """Every stored event row (outbox, webhook queue, dead letters) that holds one of SECRETS."""
    rows = await conn.fetch(
        """
        SELECT 'outbox ' || payload::text AS row FROM outbox
        UNION ALL SELECT 'queue ' || payload::text || ' ' || coalesce(body, '') FROM webhook_queue
        UNION ALL SELECT 'dead ' || payload::text || ' ' || coalesce(body, '') FROM webhook_dead
        """
    )
    return [r["row"] for r in rows if any(secret in r["row"] for secret in SECRETS)]


async def test_a_deleted_or_erased_message_is_withdrawn_from_the_webhook_queue_and_dead_letters(
    migrated_url: str, http, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Messages whose webhooks wait (their endpoint refusing: one dead-lettered, two held back by a
    Retry-After) are deleted, edited then deleted, and erased with the user: their text is in no
    stored row afterwards, and the endpoint, once it takes everything, never gets it; it gets their
    message.deleted (body empty), and every id in a body is a string."""
    secret = new_secret()
    async with Receiver(secret) as receiver:
        settings = make_settings(
            migrated_url,
            webhook_url=receiver.url,
            webhook_secret=secret,
            webhook_events="message.new,message.edited,message.deleted",
            webhook_max_attempts=3,
            **{**FAST, "webhook_max_backoff_seconds": 600, "big_group_threshold": 10},
        )

        def refuse_secrets(event: dict, attempt: int) -> str:
            body = event["data"].get("body") or ""
            if body.startswith("alpha"):
                return "fail"  # three attempts, then a dead letter
            if any(body.startswith(s) for s in ("bravo", "charlie")):
                return "busy 429 3600"  # held back for 600 s (the cap) after its first attempt
            return "ok"

        receiver.policy = refuse_secrets
        async with RunningServer(settings) as server:
            api = ChatApi.of(server, http)
            dead, held = await api.create_group(1, [2]), await api.create_group(1, [2])
            erased = await api.create_group(1, [2, 4])
            alpha = await api.send(1, dead, "alpha-secret")
            bravo = await api.send(1, held, "bravo-secret")
            await api.data(EDIT, {"c": held, "s": bravo, "b": "bravo-secret-edited"}, user=1)  # queued behind it
            charlie = await api.send(4, erased, "charlie-secret")
            database = server.runtime.deps.database

            async def waiting() -> bool:
                async with database.connection() as conn:
                    dead_rows = await conn.fetchval("SELECT count(*) FROM webhook_dead")
                    held_rows = await conn.fetchval(
                        "SELECT count(*) FROM webhook_queue WHERE attempts >= 1 AND body IS NOT NULL"
                    )
                return dead_rows == 1 and held_rows == 2

            await wait_until(waiting, 30, "alpha dead-lettered, bravo and charlie held back after an attempt")
            async with database.connection() as conn:
                assert len(await _stored_secrets(conn)) == 4  # the texts are there, waiting

            await api.data(DELETE, {"c": dead, "s": alpha}, user=1)
            await api.data(DELETE, {"c": held, "s": bravo}, user=1)
            assert await erase_user(database, "4") == 1
            async with database.connection() as conn:
                assert await _stored_secrets(conn) == []
                assert await conn.fetchval("SELECT count(*) FROM webhook_dead") == 0

            # The conversations go on: what is sent next reaches the endpoint, in order, with no
            # deleted text before it (their heads were the withdrawn rows).
            after = [await api.send(1, cid, "delta-after") for cid in (dead, held, erased)]
            assert after == [alpha + 1, bravo + 1, charlie + 1]
            await wait_until(
                lambda: (
                    {(r.event["data"]["conversationId"], r.event["data"]["seq"]) for r in receiver.done()}
                    >= {(dead, after[0]), (held, after[1]), (erased, after[2])}
                ),
                30,
                "the messages sent after the deletes taken",
            )
            monkeypatch.setenv("CHATGQL_DATABASE_URL", migrated_url)
            assert "queued again: 0" in await _cli("webhooks", "replay", "--all")
            async with database.connection() as conn:
                await wait_until(
                    lambda: conn.fetchval("SELECT count(*) = 0 FROM webhook_queue"), 30, "the queue drained"
                )
                assert await _stored_secrets(conn) == []

        taken = receiver.done()
        assert not [r.body for r in taken if any(s.encode() in r.body for s in SECRETS)]
        deleted = {
            (r.event["data"]["conversationId"], r.event["data"]["seq"]): r.event["data"]
            for r in taken
            if r.event["type"] == "message.deleted"
        }
        assert set(deleted) == {(dead, alpha), (held, bravo), (erased, charlie)}
        assert all(data["body"] == "" and data["deletedAt"] for data in deleted.values())
        for r in receiver.requests:  # ids are strings, as in the GraphQL API
            data = r.event["data"]
            assert isinstance(data["conversationId"], str) and isinstance(data["senderId"], str), data
        assert receiver.unverified == 0


async def test_a_message_deleted_before_its_event_is_relayed_is_relayed_without_its_text_and_never_posted(
    migrated_url: str, http
) -> None:
    """The relay stopped: a message, its edit and its delete wait in the outbox. The delete erased
    the body of the first two there; relayed later, they are not queued for the webhooks (only the
    message.deleted is posted), and the text is in no stored row at any point after the delete."""
    secret = new_secret()
    async with Receiver(secret) as receiver:
        base = make_settings(
            migrated_url,
            webhook_url=receiver.url,
            webhook_secret=secret,
            webhook_events="message.new,message.edited,message.deleted",
            **FAST,
        )
        async with RunningServer(base.model_copy(update={"run_relay": False})) as server:
            api = ChatApi.of(server, http)
            cid = await api.create_group(1, [2])
            kept = await api.send(1, cid, "kept")
            seq = await api.send(1, cid, "echo alpha-secret")
            await api.data(EDIT, {"c": cid, "s": seq, "b": "bravo-secret-edited"}, user=1)
            async with server.runtime.deps.database.connection() as conn:
                assert len(await _stored_secrets(conn)) == 2
                await api.data(DELETE, {"c": cid, "s": seq}, user=1)
                assert await _stored_secrets(conn) == []
                erased = await conn.fetch(
                    "SELECT payload->>'type' AS type, payload->>'body' AS body FROM outbox WHERE payload ? 'erased' ORDER BY id"
                )
                assert [(r["type"], r["body"]) for r in erased] == [("message.new", ""), ("message.edited", "")]
        async with RunningServer(base) as server:  # the relay runs: the outbox drains
            async with server.runtime.deps.database.connection() as conn:
                await wait_until(lambda: conn.fetchval("SELECT count(*) = 0 FROM outbox"), 30, "the outbox relayed")
            await wait_until(lambda: len(receiver.done()) == 2, 30, "two events posted")
            async with server.runtime.deps.database.connection() as conn:
                await wait_until(lambda: conn.fetchval("SELECT count(*) = 0 FROM webhook_queue"), 30, "queue drained")
                assert await _stored_secrets(conn) == []
        posted = [(r.event["type"], r.event["data"]["seq"], r.event["data"]["body"]) for r in receiver.done()]
        assert posted == [("message.new", kept, "kept"), ("message.deleted", seq, "")]


async def test_retry_after_of_a_429_or_503_is_honoured_up_to_the_backoffs_cap(migrated_url: str, http) -> None:
    """The next attempt's time is stored when an attempt fails: read it, no waiting. A 429 asking for
    20 s waits 20 s (the backoff alone: 0.02 s); a 503 asking for 9999 s waits the cap, 30 s."""
    secret = new_secret()
    async with Receiver(secret) as receiver:
        settings = make_settings(
            migrated_url,
            webhook_url=receiver.url,
            webhook_secret=secret,
            **{**FAST, "webhook_max_backoff_seconds": 30},
        )
        async with RunningServer(settings) as server:
            api = ChatApi.of(server, http)
            slow, down = await api.create_group(1, [2]), await api.create_group(1, [2])
            answers = {slow: "busy 429 20", down: "busy 503 9999"}
            receiver.policy = lambda event, attempt: answers[event["data"]["conversationId"]]
            await api.send(1, slow)
            await api.send(1, down)
            async with server.runtime.deps.database.connection() as conn:

                async def waits() -> dict[str, tuple]:
                    rows = await conn.fetch(
                        "SELECT msg_key, attempts, last_error,"
                        " extract(epoch FROM next_attempt_at - now())::float8 AS wait FROM webhook_queue"
                    )
                    return {r["msg_key"]: (r["attempts"], r["last_error"], r["wait"]) for r in rows}

                await wait_until(lambda: _all_attempted(waits()), 30, "one attempt of each")
                got = await waits()
            assert len(receiver.requests) == 2, [r.answer for r in receiver.requests]
        (slow_attempts, slow_error, slow_wait), (down_attempts, down_error, down_wait) = got[slow], got[down]
        assert (slow_attempts, slow_error, down_attempts, down_error) == (1, "HTTP 429", 1, "HTTP 503")
        assert 15 < slow_wait <= 20, got
        assert 25 < down_wait <= 30, got


async def _all_attempted(waits) -> bool:  # noqa: ANN001
    rows = await waits
    return len(rows) == 2 and all(attempts == 1 for attempts, _, _ in rows.values())


def test_retry_after_is_read_as_seconds_or_an_http_date_and_bounded_by_the_backoff() -> None:
    now = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC
    assert parse_retry_after("20", now) == 20
    assert parse_retry_after("Thu, 01 Jan 2026 00:01:30 GMT", now) == 90
    assert parse_retry_after("Wed, 31 Dec 2025 23:00:00 GMT", now) == 0  # past: now
    assert parse_retry_after("soon", now) is None and parse_retry_after(None, now) is None
    assert retry_delay(1, 0.02, 30, 20) == 20
    assert retry_delay(1, 0.02, 30, 9999) == 30  # never past the cap
    assert 2 <= retry_delay(3, 1, 30, 0.5) <= 4  # never shorter than the backoff


async def test_a_2xx_whose_body_trickles_is_cut_at_the_timeout_for_the_whole_exchange() -> None:
    """The endpoint answers 200 at once, then a byte every 0.05 s forever: each read is well within
    the 1 s timeout, the exchange is not. It is cut at 1 s, a failed attempt (time measured only
    against a bound the old cut, at the timeout + 1 s, could not meet)."""
    secret = new_secret()
    async with Receiver(secret) as receiver:
        receiver.policy = lambda event, attempt: "trickle"
        deliverer = Deliverer(
            "postgresql://unused",
            Presence(None),
            url=receiver.url,
            secret=parse_secret(secret),
            big_group_threshold=2,
            timeout_seconds=1.0,
        )
        body = b'{"type":"message.new","data":{"conversationId":"1","seq":1}}'
        async with httpx.AsyncClient(timeout=1.0) as client:
            started = time.monotonic()
            outcome = await deliverer.post(client, "msg_1", body)
            elapsed = time.monotonic() - started
        assert outcome.error == "TimeoutError", outcome
        assert [r.answer for r in receiver.requests] == ["trickle"]
        assert 1.0 <= elapsed < 1.9, elapsed


async def test_presence_on_the_hub_lists_the_users_of_every_worker_and_drops_a_workers_users_with_it(
    tmp_path: Path,
) -> None:
    """The supervisor's presence reads its hub; each worker tells it its users over a connection of
    its own, and asks it on that connection about the users it has no socket of. A user is online
    while any worker lists them; a worker whose connection ends drops out, counts its own sockets
    only meanwhile, and tells its whole set again when it connects again."""
    hub = Hub(str(tmp_path / "hub.sock"))
    async with hub.serving():
        supervisor = Presence(None, hub=hub)
        workers = [Presence(None, heartbeat_seconds=0.05, hub_link=HubPresenceLink(hub.url)) for _ in range(2)]
        tasks = [asyncio.create_task(w.run()) for w in workers]
        try:
            first, second = workers
            first.connected("7")
            first.connected("7")  # two sockets on one worker
            second.connected("8")
            await wait_until(lambda: _online(supervisor, ["7", "8", "9"], {"7", "8"}), 5, "7 and 8 online")
            assert await first.online(["7", "8", "9"]) == {"7", "8"}  # 8 from the hub
            first.disconnected("7")
            second.connected("7")  # and one on the other
            first.disconnected("7")
            await wait_until(lambda: _online(first, ["7"], {"7"}), 5, "7 online on the second, for the first")
            await wait_until(lambda: _online(supervisor, ["7", "8"], {"7", "8"}), 5, "7 online on the second")
            second.disconnected("7")
            assert await second.online(["7", "8"]) == {"8"}  # asked after it told the hub 7 went
            await wait_until(lambda: _online(supervisor, ["7", "8"], {"8"}), 5, "7 offline once no worker lists it")
            tasks[1].cancel()  # the second worker's link ends: its users drop out
            with contextlib.suppress(asyncio.CancelledError):
                await tasks[1]
            await wait_until(lambda: _online(supervisor, ["8"], set()), 5, "a gone worker's users offline")
            assert await first.online(["8"]) == set()
            assert await second.online(["8", "1"]) == {"8"}  # no hub to ask: its own sockets
            tasks[1] = asyncio.create_task(second.run())
            await wait_until(lambda: _online(supervisor, ["8"], {"8"}), 5, "told again on a new connection")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _online(presence: Presence, users: list[str], expected: set[str]) -> bool:
    return await presence.online(users) == expected


async def test_on_the_default_two_worker_serve_a_member_online_on_either_worker_is_not_pushed(
    migrated_url: str, tmp_path: Path, http
) -> None:
    """`chatgql serve` with 2 workers and no Redis (the hub): user 2's websocket on one worker, user
    3's on the other (the other worker stopped while each connects); the supervisor's deliverer
    lists only user 4, who has none, as offline."""
    secret = new_secret()
    async with Receiver(secret) as receiver:
        env = {
            "CHATGQL_WEBHOOK_URL": receiver.url,
            "CHATGQL_WEBHOOK_SECRET": secret,
            **{f"CHATGQL_{k.upper()}": str(v).lower() for k, v in {**FAST, "big_group_threshold": 10}.items()},
        }
        async with workers_server(migrated_url, tmp_path, None, "unused", bus="hub", env_extra=env) as server:
            pids = server.process.workers()
            assert len(pids) == 2, tail(server.process.log)
            api = ChatApi(http, server.url, server.settings)
            cid = await api.create_group(1, [2, 3, 4])
            sockets = []
            try:
                for user, pid in ((2, pids[0]), (3, pids[1])):
                    with only_one_accepting(server.process, pid):
                        sockets.append(await WsClient.connect(server.ws_url, bearer(server.settings, user)))
                held = sockets_by_worker(server.process, server.port)
                assert all(held[pid] for pid in pids), f"a socket on each worker: {held}"
                seq = await api.send(1, cid, "hello")
                await wait_until(lambda: len(receiver.done()) == 1, 30, "the message posted")
            finally:
                await asyncio.gather(*(s.close() for s in sockets), return_exceptions=True)
        (posted,) = receiver.done()
        assert (posted.event["data"]["conversationId"], posted.event["data"]["seq"]) == (cid, seq)
        assert posted.event["recipients"] == {"memberCount": 4, "offline": ["4"]}


async def test_a_delete_racing_the_relays_move_into_the_queue_leaves_no_text_whichever_commits_first(
    migrated_url: str, http
) -> None:
    """The relay's statement that moves a message.new from the outbox into the webhook queue, and the
    delete of that message, each made to wait for the other's row lock (two transactions held
    open, each wait seen in pg_stat_activity): relay first, the delete's later statement withdraws
    the queued row; delete first, the relay moves the erased row, which is not queued."""
    secret = new_secret()
    async with Receiver(secret) as receiver:
        settings = make_settings(migrated_url, webhook_url=receiver.url, webhook_secret=secret, **FAST)
        async with RunningServer(settings.model_copy(update={"run_relay": False, "run_webhooks": False})) as server:
            api = ChatApi.of(server, http)
            cid = await api.create_group(1, [2])
            relay_first = await api.send(1, cid, "alpha-secret")
            delete_first = await api.send(1, cid, "bravo-secret")
            database = server.runtime.deps.database
            kinds = ["message.new"]

            async def outbox_id(seq: int) -> int:
                async with database.connection() as conn:
                    return await conn.fetchval(
                        "SELECT id FROM outbox WHERE payload->>'type' = 'message.new' AND (payload->>'seq')::int = $1",
                        seq,
                    )

            async def someone_waits_for_a_lock() -> bool:
                async with database.connection() as conn:
                    return await conn.fetchval(
                        "SELECT count(*) > 0 FROM pg_stat_activity"
                        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )

            # The relay first: its move is uncommitted while the delete runs into its row lock.
            async with database.connection() as relay:
                moving = relay.transaction()
                await moving.start()
                await outbox.delete(relay, [await outbox_id(relay_first)], kinds)
                deleting = asyncio.create_task(api.data(DELETE, {"c": cid, "s": relay_first}, user=1))
                await wait_until(someone_waits_for_a_lock, 10, "the delete waits for the relay's move")
                await moving.commit()
                await deleting
            # The delete first: its erase is uncommitted while the relay's move runs into it.
            row = await outbox_id(delete_first)
            async with database.connection() as deleter:
                erasing = deleter.transaction()
                await erasing.start()
                await outbox_store_erase(deleter, cid, delete_first)
                async with database.connection() as relay:
                    moving_task = asyncio.create_task(outbox.delete(relay, [row], kinds))
                    await wait_until(someone_waits_for_a_lock, 10, "the relay's move waits for the erase")
                    await erasing.commit()
                    await moving_task
            async with database.connection() as conn:
                assert await _stored_secrets(conn) == []
                assert await conn.fetchval("SELECT count(*) FROM webhook_queue") == 0


async def outbox_store_erase(conn, cid: str, seq: int) -> None:  # noqa: ANN001
    """What the delete's transaction does to the stored events, in its order (services.changes.tombstone_txn)."""
    await outbox.erase_txn(conn, cid, [seq], CONTENT_KINDS)
    await webhook_store.withdraw_txn(conn, cid, [seq], CONTENT_KINDS)
