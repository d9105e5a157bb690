"""The before-send hook (services/beforesend.py): a real HTTP endpoint in the test (uvicorn on
127.0.0.1), every request's signature checked with the Standard Webhooks reference library.

- accept, reject (the reason reaches the sender), rewrite (the stored body is the new one);
- idempotence: a retry of a rejected clientMsgId is rejected the same way and never stored, a retry
  of an accepted or rewritten one answers the stored message, and neither asks the hook again; the
  clientMsgId with another body is CONFLICT; concurrent retries store at most once;
- failures (no answer within the timeout, an error status, an answer that is no verdict): fail
  closed, UNAVAILABLE and nothing stored; fail open, stored as sent;
- a non-member's send never reaches the hook;
- over the API: the coded errors sendMessage answers.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import uvicorn
from standardwebhooks import Webhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from chatgql.db import Database
from chatgql.errors import ChatError, Conflict, Forbidden, NotFound, Unavailable
from chatgql.events.webhooks import parse_secret
from chatgql.services.beforesend import BeforeSendHook
from chatgql.services.conversations import do_create_group
from chatgql.services.messages import do_send_message
from tests.conftest import free_port, make_settings
from tests.support.live import ChatApi
from tests.support.webhooks import new_secret
from tests.support.writepath import open_quiet_server

Answer = Callable[[dict], Any]  # the request's data -> a JSON answer, or a Response


class Endpoint:
    """The app's before-send endpoint: answers as `answer` says, records what it was asked."""

    def __init__(self, secret: str) -> None:
        self.secret = secret
        self.verifier = Webhook(secret)
        self.answer: Answer = lambda data: {"action": "accept"}
        self.asked: list[dict] = []
        self.unverified = 0
        self.release = asyncio.Event()  # what a "hang" answer waits for
        self.port = free_port()
        app = Starlette(routes=[Route("/before-send", self._hook, methods=["POST"])])
        self._server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        )
        self._task: asyncio.Task | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/before-send"

    async def _hook(self, request: Request) -> Response:
        try:
            event = self.verifier.verify(await request.body(), dict(request.headers))
        except Exception:  # noqa: BLE001  counted, and refused
            self.unverified += 1
            return Response(status_code=401)
        assert event["type"] == "message.before_send"
        self.asked.append(event["data"])
        answer = self.answer(event["data"])
        if answer == "hang":
            await self.release.wait()
            return JSONResponse({"action": "accept"})
        return answer if isinstance(answer, Response) else JSONResponse(answer)

    async def __aenter__(self) -> Endpoint:
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.02)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        self._server.should_exit = True
        assert self._task is not None
        await self._task


@pytest.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    async with Endpoint(new_secret()) as running:
        yield running
    assert running.unverified == 0


@pytest.fixture
async def database(migrated_url: str) -> AsyncIterator[Database]:
    database = await Database(migrated_url, max_size=8).open()
    yield database
    await database.close()


def hook_of(endpoint: Endpoint, *, fail_open: bool = False, timeout: float = 10.0) -> BeforeSendHook:
    return BeforeSendHook(
        endpoint.url, parse_secret(endpoint.secret), timeout_seconds=timeout, fail_open=fail_open, max_body_chars=100
    )


async def stored(database: Database, cid: int) -> list[tuple[str, str]]:
    async with database.connection() as conn:
        rows = await conn.fetch("SELECT sender_id, body FROM message WHERE conversation_id = $1 ORDER BY seq", cid)
    return [(r["sender_id"], r["body"]) for r in rows]


async def test_accepted_rejected_and_rewritten_messages_and_their_retries(database, endpoint):
    cid = await do_create_group(database, "1", "g", ["2"], max_members=10)
    verdicts = {
        "fine": {"action": "accept"},
        "spam": {"action": "reject", "reason": "  no spam here  "},
        "darn": {"action": "rewrite", "body": "d**n"},
        "quiet": {"action": "reject"},
    }
    endpoint.answer = lambda data: verdicts[data["body"]]
    keys = {body: uuid.uuid4() for body in verdicts}
    async with hook_of(endpoint) as hook:

        async def send(body: str, key: uuid.UUID | None = None, user: str = "2") -> Any:
            return await do_send_message(database, user, cid, key or keys[body], body, hook=hook)

        accepted = await send("fine")
        assert (accepted.message.seq, accepted.message.body, accepted.duplicate) == (1, "fine", False)
        assert endpoint.asked == [
            {"conversationId": str(cid), "senderId": "2", "clientMsgId": str(keys["fine"]), "body": "fine"}
        ]
        for _ in range(2):
            with pytest.raises(Forbidden) as raised:
                await send("spam")
            assert raised.value.extensions == {"reason": "MESSAGE_REJECTED", "rejectReason": "no spam here"}
            assert raised.value.message == "the message was rejected: no spam here"
        with pytest.raises(Forbidden) as raised:
            await send("quiet")
        assert raised.value.extensions["rejectReason"] is None
        rewritten = await send("darn")
        assert (rewritten.message.seq, rewritten.message.body, rewritten.duplicate) == (2, "d**n", False)
        assert len(endpoint.asked) == 4
        # retries: the same answers, the hook not asked again
        again = await send("darn")
        assert (again.message.seq, again.message.body, again.duplicate) == (2, "d**n", True)
        again = await send("fine")
        assert (again.message.seq, again.duplicate) == (1, True)
        with pytest.raises(Forbidden):
            await send("spam")
        assert len(endpoint.asked) == 4
        # the clientMsgId of a decided message with another body, or by another sender: CONFLICT
        for body, key, user in (("fine", keys["spam"], "2"), ("fine", keys["darn"], "2"), ("spam", keys["spam"], "1")):
            with pytest.raises(Conflict):
                await send(body, key, user)
        assert len(endpoint.asked) == 4
        # an outsider never reaches the hook
        with pytest.raises(NotFound):
            await send("fine", uuid.uuid4(), "9")
        assert len(endpoint.asked) == 4
    assert await stored(database, cid) == [("2", "fine"), ("2", "d**n")]


@pytest.mark.parametrize("fail_open", [False, True], ids=["fail-closed", "fail-open"])
async def test_a_hook_that_fails_refuses_the_send_or_lets_it_through_as_configured(database, endpoint, fail_open):
    cid = await do_create_group(database, "1", "g", ["2"], max_members=10)
    failures: list[Answer] = [
        lambda data: "hang",  # no answer within the timeout
        lambda data: Response(status_code=500),
        lambda data: Response(b"not json", status_code=200),
        lambda data: {"action": "maybe"},
        lambda data: {"action": "rewrite", "body": "x" * 101},  # longer than the server takes
        lambda data: {"action": "rewrite", "body": "   "},
    ]
    async with hook_of(endpoint, fail_open=fail_open, timeout=0.5) as hook:
        for k, failure in enumerate(failures):
            endpoint.answer = failure
            key = uuid.uuid4()
            if fail_open:
                result = await do_send_message(database, "2", cid, key, f"as sent {k}", hook=hook)
                assert result.message.body == f"as sent {k}"
            else:
                with pytest.raises(Unavailable) as raised:
                    await do_send_message(database, "2", cid, key, f"as sent {k}", hook=hook)
                assert raised.value.extensions == {"reason": "BEFORE_SEND_UNAVAILABLE", "retryAfter": 1}
                # nothing was decided: the retry asks again, and the hook, back, accepts
                endpoint.answer = lambda data: {"action": "accept"}
                assert (await do_send_message(database, "2", cid, key, f"as sent {k}", hook=hook)).duplicate is False
        endpoint.release.set()
    assert await stored(database, cid) == [("2", f"as sent {k}") for k in range(len(failures))]


@pytest.mark.parametrize("verdict", ["rewrite", "reject", "accept"])
async def test_concurrent_retries_of_one_client_msg_id_are_decided_once(database, endpoint, verdict):
    cid = await do_create_group(database, "1", "g", ["2"], max_members=10)
    count = 0

    def answer(data: dict) -> dict:  # a hook that changes its mind: only the first decision may stand
        nonlocal count
        count += 1
        if verdict == "rewrite":
            return {"action": "rewrite", "body": f"rewritten {count}"}
        if verdict == "reject":
            return {"action": "reject", "reason": f"no {count}"} if count % 2 else {"action": "accept"}
        return {"action": "accept"} if count % 2 else {"action": "reject", "reason": "late"}

    endpoint.answer = answer
    key = uuid.uuid4()
    async with hook_of(endpoint) as hook:
        results = await asyncio.gather(
            *(do_send_message(database, "2", cid, key, "original", hook=hook) for _ in range(12)),
            return_exceptions=True,
        )
        later = await asyncio.gather(
            *(do_send_message(database, "2", cid, key, "original", hook=hook) for _ in range(3)), return_exceptions=True
        )
    messages = await stored(database, cid)
    assert len(messages) <= 1
    unexpected = [r for r in results + later if isinstance(r, Exception) and not isinstance(r, ChatError)]
    assert not unexpected, unexpected
    later_answers = {
        ("error", r.code, r.extensions.get("rejectReason"))
        if isinstance(r, ChatError)
        else ("ok", r.message.seq, r.message.body)
        for r in later
    }
    assert len(later_answers) == 1, later_answers  # once decided, every retry gets the same answer
    (settled,) = later_answers
    if messages:
        assert settled == ("ok", 1, messages[0][1])
        assert all(isinstance(r, ChatError) or (r.message.seq, r.message.body) == (1, messages[0][1]) for r in results)
    else:
        assert settled[:2] == ("error", "FORBIDDEN")


SEND = (
    "mutation($c: ID!, $m: UUID!, $b: String!) "
    "{ sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { seq body } duplicate } }"
)


async def test_over_the_api_the_sender_is_shown_the_reason_and_the_rewrite(migrated_url, endpoint, http):
    def settings(url: str) -> Any:
        return make_settings(
            url,
            run_relay=False,
            before_send_url=endpoint.url,
            before_send_secret=endpoint.secret,
            webhook_allow_private=True,
        )

    endpoint.answer = lambda data: (
        {"action": "reject", "reason": "links are not allowed"}
        if "http" in data["body"]
        else {"action": "rewrite", "body": data["body"].upper()}
    )
    async with open_quiet_server(migrated_url, "beforesend", settings) as quiet:
        api = ChatApi.of(quiet.server, http)
        cid = await api.create_group(1, [2])
        key = str(uuid.uuid4())
        for duplicate in (False, True):
            body = await api.data(SEND, {"c": cid, "m": key, "b": "hello"}, user=2)
            assert body["sendMessage"] == {"message": {"seq": 1, "body": "HELLO"}, "duplicate": duplicate}
        refused = await api.execute(SEND, {"c": cid, "m": str(uuid.uuid4()), "b": "see http://x"}, user=2)
        assert refused["data"] is None
        (error,) = refused["errors"]
        assert error["extensions"] == {
            "code": "FORBIDDEN",
            "reason": "MESSAGE_REJECTED",
            "rejectReason": "links are not allowed",
        }
        assert error["message"] == "the message was rejected: links are not allowed"
        assert "errors" in await api.execute(SEND, {"c": cid, "m": key, "b": "hello"}, user=9)  # an outsider
        assert len(endpoint.asked) == 2
        assert json.dumps(endpoint.asked[0]) == json.dumps(
            {"conversationId": cid, "senderId": "2", "clientMsgId": key, "body": "hello"}
        )
