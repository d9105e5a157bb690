"""A real webhook endpoint for the tests: uvicorn on 127.0.0.1, in the test's event loop.

It records every request (attempts included), checks each signature with the Standard Webhooks
reference library, and answers as its `policy` says: "ok" (204), "fail" (503) or "hang" (answers
204 only after the deliverer's timeout: the deliverer counts a failure although the endpoint did
the work, so a duplicate follows, as with a real slow endpoint); "busy <status> <Retry-After>"
(that status with that Retry-After header); "trickle" (200, then a body of a byte every
trickle_seconds, never ending: only the deliverer's timeout ends it).
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn
from standardwebhooks import Webhook
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..conftest import free_port


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


@dataclass
class Received:
    webhook_id: str
    body: bytes
    event: dict  # the verified, parsed body
    attempt: int  # 1 for the first request with this webhook-id
    answer: str  # the policy's answer

    @property
    def key(self) -> tuple[int, int]:
        """(conversationId, seq) of a message.new."""
        data = self.event["data"]
        return int(data["conversationId"]), int(data["seq"])


Policy = Callable[[dict, int], str]  # (event, attempt) -> "ok" | "fail" | "hang"


class Receiver:
    def __init__(self, secret: str, hang_seconds: float = 1.0, trickle_seconds: float = 0.05) -> None:
        self.verifier = Webhook(secret)
        self.hang_seconds = hang_seconds
        self.trickle_seconds = trickle_seconds
        self.policy: Policy = lambda event, attempt: "ok"
        self.requests: list[Received] = []  # in arrival order
        self.unverified = 0
        self._attempts: Counter[str] = Counter()
        self.port = free_port()
        app = Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])
        self._server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        )
        self._task: asyncio.Task | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _hook(self, request: Request) -> Response:
        body = await request.body()
        try:
            event = self.verifier.verify(body, dict(request.headers))
        except Exception:  # noqa: BLE001  a bad signature is counted, and refused
            self.unverified += 1
            return Response(status_code=401)
        webhook_id = request.headers["webhook-id"]
        self._attempts[webhook_id] += 1
        attempt = self._attempts[webhook_id]
        answer = self.policy(event, attempt)
        self.requests.append(Received(webhook_id, body, event, attempt, answer))
        if answer == "fail":
            return Response(status_code=503)
        if answer == "hang":
            await asyncio.sleep(self.hang_seconds)
        if answer.startswith("busy "):
            _, status, retry_after = answer.split(" ", 2)
            return Response(status_code=int(status), headers={"retry-after": retry_after})
        if answer == "trickle":
            return StreamingResponse(self._trickle(), status_code=200)
        return Response(status_code=204)

    async def _trickle(self):  # noqa: ANN202
        while True:
            yield b" "
            await asyncio.sleep(self.trickle_seconds)

    def done(self) -> list[Received]:
        """The requests the endpoint took (a hung one too: it did the work)."""
        return [r for r in self.requests if r.answer in ("ok", "hang")]

    def taken_keys(self) -> set[tuple[int, int]]:
        return {r.key for r in self.done() if r.event["type"] == "message.new"}

    def check_order_and_ids(self) -> None:
        """Per conversation, requests arrive in seq order (all attempts of one event before any of
        the next); every request for one event has the same webhook-id and the same body."""
        by_key: dict[tuple[int, int], set[tuple[str, bytes]]] = {}
        last: dict[int, int] = {}
        for r in self.requests:
            conversation, seq = r.key
            assert seq >= last.get(conversation, 0), (
                f"conversation {conversation}: seq {seq} after {last[conversation]}"
            )
            last[conversation] = seq
            by_key.setdefault(r.key, set()).add((r.webhook_id, r.body))
        for key, variants in by_key.items():
            assert len(variants) == 1, f"{key} was sent with {len(variants)} different ids or bodies"
        ids = [next(iter(v))[0] for v in by_key.values()]
        assert len(set(ids)) == len(ids), "two events share a webhook-id"

    async def __aenter__(self) -> Receiver:
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.02)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.should_exit = True
        await self._task
