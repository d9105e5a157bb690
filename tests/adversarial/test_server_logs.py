"""What a production server writes to its log, read from a real `chatgql serve`'s output.

- No token and no query string: uvicorn's access lines and its per-websocket lines name
  the request's path with its query string, where a `?token=...` would land; they log it
  as `?<redacted>`.
- A cancelled request (cut by the request timeout, or its client gone mid-request) leaves
  no "coroutine ... was never awaited" behind (engine/gather.py).
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import websockets
from sqlalchemy import text

from ..support.history import seed_history
from ..support.live import TRANSPORT_WS, WsClient
from .conftest import serve_process

SECRET_TOKEN = "tok3n-n0t-f0r-l0gs"  # what a client puts in a URL; never valid, never to be logged


async def test_no_token_or_query_string_reaches_a_production_log_line(migrated_url):
    async with serve_process(migrated_url, log_level="info", CHATGQL_ACCESS_LOG="true") as server:
        # A websocket with the token in its URL (accepted), and one from a foreign origin (refused).
        ws = await WsClient.connect(f"{server.ws_url}?token={SECRET_TOKEN}&x=1", f"Bearer {server.token(1)}")
        await ws.close()
        try:
            refused = await websockets.connect(
                f"{server.ws_url}?token={SECRET_TOKEN}",
                subprotocols=[TRANSPORT_WS],
                origin="https://evil.example",
                proxy=None,
            )
            await refused.close()
        except websockets.exceptions.InvalidStatus as error:
            assert error.response.status_code == 403
        async with httpx.AsyncClient(timeout=30) as http:
            params = {"query": "{ viewer { userId } }", "token": SECRET_TOKEN}
            got = await http.get(server.url, params=params, headers=server.headers(1))
            assert got.json() == {"data": {"viewer": {"userId": "1"}}}
            posted = await http.post(
                f"{server.url}?access_token={SECRET_TOKEN}", json=params, headers=server.headers(1)
            )
            assert posted.json() == {"data": {"viewer": {"userId": "1"}}}
    log = server.output()
    assert SECRET_TOKEN not in log and server.token(1) not in log
    assert "token=" not in log and "viewer" not in log, log[-3000:]
    lines = log.splitlines()
    # The lines are there, with the path and without its query string.
    assert any('"WebSocket /graphql?<redacted>" [accepted]' in line for line in lines), log[-3000:]
    assert any('"WebSocket /graphql?<redacted>" 403' in line for line in lines), log[-3000:]
    assert any('"GET /graphql?<redacted> HTTP/1.1" 200' in line for line in lines), log[-3000:]
    assert any('"POST /graphql?<redacted> HTTP/1.1" 200' in line for line in lines), log[-3000:]


HEAVY = (
    "query($c: ID!) { "
    + " ".join(
        f"a{i}: messages(conversationId: $c, last: 200) {{ nodes {{ id seq body seenByCount seen seenBy(first: 1000) }} }}"
        for i in range(20)
    )
    + " }"
)


async def test_a_cancelled_request_leaves_no_coroutine_unawaited(migrated_url, engine):
    async with engine.begin() as conn:  # not through the API: its 0.2 s timeout would cut that too
        cid = str(
            (
                await conn.execute(
                    text("INSERT INTO conversation (type, title) VALUES ('GROUP', 'heavy') RETURNING id")
                )
            ).scalar_one()
        )
        await conn.execute(
            text(
                "INSERT INTO conversation_member (conversation_id, user_id) SELECT :c, u FROM generate_series(1, 3) u"
            ),
            {"c": int(cid)},
        )
    await seed_history(migrated_url, int(cid), "1", 200)
    # The price and CPU bounds would refuse HEAVY before it runs: this test wants it running, then cut.
    async with serve_process(
        migrated_url,
        CHATGQL_REQUEST_TIMEOUT_SECONDS="0.2",
        CHATGQL_MAX_OPERATION_COST="1000000000",
        CHATGQL_MAX_REQUEST_CPU_MS="600000",
    ) as server:
        async with httpx.AsyncClient(timeout=60) as http:
            headers = server.headers(1)
            # Cut by the request timeout: 20 pages of 200 messages, each with three async fields.
            timed_out = 0
            for _ in range(12):
                answer = (
                    await http.post(server.url, json={"query": HEAVY, "variables": {"c": cid}}, headers=headers)
                ).json()
                if answer.get("errors") and answer["errors"][0]["extensions"].get("reason") == "TIMEOUT":
                    timed_out += 1
                    if timed_out == 4:
                        break
            assert timed_out >= 1, "no request was cut by the timeout: nothing was cancelled"
        # Clients gone mid-request: the whole request sent, the connection closed while it runs.
        body = json.dumps({"query": HEAVY, "variables": {"c": cid}}).encode()
        head = (
            "POST /graphql HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"authorization: {headers['authorization']}\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode()
        for _ in range(6):
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(head + body)
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.close()
        async with httpx.AsyncClient(timeout=60) as http:  # still serving once the abandoned work is done
            deadline = time.monotonic() + 60
            while (
                answer := (await http.post(server.url, json={"query": "{ viewer { userId } }"}, headers=headers)).json()
            ) != {"data": {"viewer": {"userId": "1"}}}:
                assert answer["errors"][0]["extensions"].get("reason") == "TIMEOUT", answer
                assert time.monotonic() < deadline, "the server never became idle again"
                await asyncio.sleep(0.2)
    log = server.output()
    assert "never awaited" not in log, log[-4000:]
    assert "Traceback" not in log, log[-4000:]
