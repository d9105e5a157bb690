"""Events sent to sockets their clients just closed (issue 13, item 5).

A 15-minute soak from outside logged "an event sent to a socket the client
just closed" as an ERROR with a traceback, 51 times: a subscription's task
writes its next result while the connection is already gone (the client
closed it, or its TCP connection dropped, and the handler's read loop has not
seen it yet). That is the client's doing and nothing the operator can act
on: the subscription ends, quietly. Here a production-mode server delivers a
steady stream to a few hundred subscriptions of both protocols while their
clients go away abruptly (TCP dropped without a close frame) or politely,
and its log must hold no ERROR and no traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from ..support.live import LEGACY_WS, TRANSPORT_WS, ChatApi, WsClient, bearer, subscribe_messages, subscribe_reads
from .conftest import ServeProcess, serve_process

pytestmark = pytest.mark.timeout(180)

OWNER = 1
MEMBERS = list(range(2, 42))


@pytest.fixture(scope="module")
async def server(migrated_url: str) -> AsyncIterator[ServeProcess]:
    async with serve_process(
        migrated_url,
        CHATGQL_MAX_UNAUTHENTICATED_WS_PER_ADDRESS="0",  # every client here is 127.0.0.1
        CHATGQL_RATE_SEND_PER_SECOND="0",
    ) as process:
        yield process


async def _connect(server: ServeProcess, user: int, protocol: str) -> WsClient:
    return await WsClient.connect(server.ws_url, bearer(server.settings, user), protocol=protocol, timeout=30)


def _problems(log: str) -> list[str]:
    return [line for line in log.splitlines() if "ERROR" in line or "Traceback" in line or "never retrieved" in line]


async def test_events_sent_to_sockets_their_clients_just_closed_are_not_logged_as_errors(
    server: ServeProcess,
) -> None:
    api = ChatApi(httpx.AsyncClient(timeout=30), server.url, server.settings)
    conversation = await api.create_group(OWNER, MEMBERS)
    rounds, per_round = 6, 60
    stop = asyncio.Event()
    sent = 0

    async def sender(user: int) -> None:
        nonlocal sent
        while not stop.is_set():
            await api.send(user, conversation, "x" * 200)
            sent += 1

    senders = [asyncio.create_task(sender(user)) for user in (OWNER, *MEMBERS[:5])]
    delivered = 0
    try:
        for round_ in range(rounds):
            clients = await asyncio.gather(
                *(
                    _connect(server, MEMBERS[i % len(MEMBERS)], TRANSPORT_WS if i % 3 else LEGACY_WS)
                    for i in range(per_round)
                )
            )
            for client in clients:
                # Three subscriptions a socket: more results in flight when it goes.
                await subscribe_messages(client, conversation)
                await subscribe_messages(client)
                await subscribe_reads(client, conversation)
            await asyncio.sleep(0.5)
            # Their frames are in flight, unread: the server writes into sockets now going.
            for i, client in enumerate(clients):
                if (i + round_) % 2:
                    client.ws.transport.abort()  # the TCP connection dropped: no close frame
                else:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(client.ws.close(), 0.01)  # polite, but gone at once
                    client.ws.transport.abort()
                client.closed = True
            delivered += len(clients)
            await asyncio.sleep(random.uniform(0.05, 0.2))
        await asyncio.sleep(1.0)  # the server sees the last ones go
    finally:
        stop.set()
        await asyncio.gather(*senders, return_exceptions=True)
        await api.http.aclose()
    assert sent > 50, f"only {sent} messages were sent: the server was not delivering while clients left"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # a task whose exception nobody retrieved is logged when collected
        await asyncio.sleep(0.5)
    problems = _problems(server.output())
    assert not problems, (
        f"{len(problems)} ERROR/traceback line(s) in the server's log:\n"
        + "\n".join(problems[:20])
        + "\n"
        + server.output()[-3000:]
    )
