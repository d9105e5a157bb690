"""sse: a subscription's delivery over plain HTTP (graphql-sse, multipart) against the websocket's, same run.

`python -m bench.sse [--rounds N] [--events K] [--subscribers S] [--idle I]`

One `chatgql serve` (one process, its in-process bus, no Kafka), a group of S + 1 members. A
round holds, for each transport in turn (graphql-transport-ws, graphql-sse distinct connections,
graphql-sse single connection, multipart; the order rotated each round), S subscribers of the
group's messageNew (bench/queries.py SUB_CONVERSATION) over that transport, and K sends, one at a
time, by the S + 1st member (the next once every subscriber has the last event). Per round and
transport: the server's CPU (user + system) from the first send until every subscriber has the
last event, per event; and each subscriber's send -> receipt time (from the send request's start
to the event's arrival, parsed, at the subscriber: the clients run in this process, one
asyncio loop), its median and its 99th percentile over the round. The transports differ in the
encoding and the writing of each event only: the send, the relay and the dispatcher are the same.

And the memory of an idle subscription: per transport, a fresh server (same database), I users
each subscribed to messageNew over all of their conversations (SUB_ALL) and idle; the server's
RSS after they all are, less before, per subscription (the websocket's is parked: no task).

Writes bench/results/sse.md (or --report).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import websockets

from .fastpaths import _spawn
from .infra import REPO, Postgres, Server, log, raise_fd_limit
from .perf import _create_databases
from .queries import SUB_ALL, SUB_CONVERSATION, send_body, token

TRANSPORTS = ("graphql-transport-ws", "graphql-sse", "graphql-sse single", "multipart")
MULTIPART_ACCEPT = 'multipart/mixed;boundary="graphql";subscriptionSpec=1.0,application/json'


def _query(cid: str | None) -> dict:
    """messageNew of one conversation, or (None) of all of the viewer's."""
    return {"query": SUB_ALL} if cid is None else {"query": SUB_CONVERSATION, "variables": {"c": cid}}


class Subscriber:
    """One subscriber: `got[client_msg_id]` is when (perf_counter_ns) its event arrived."""

    def __init__(self) -> None:
        self.got: dict[str, int] = {}
        self.changed = asyncio.Event()

    def on_event(self, data: dict) -> None:
        self.got[data["messageNew"]["message"]["clientMsgId"]] = time.perf_counter_ns()
        self.changed.set()


async def _ws(url: str, tok: str, cid: str | None, sub: Subscriber, ready: asyncio.Event) -> None:
    async with websockets.connect(url, subprotocols=["graphql-transport-ws"], compression=None, proxy=None) as ws:
        await ws.send(json.dumps({"type": "connection_init", "payload": {"Authorization": f"Bearer {tok}"}}))
        await ws.recv()
        query = _query(cid)
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": query}))
        ready.set()
        async for raw in ws:
            message = orjson.loads(raw)
            if message.get("type") == "next":
                sub.on_event(message["payload"]["data"])


def _sse_events(buffer: str) -> tuple[list[tuple[str, str]], str]:
    events = []
    while "\r\n\r\n" in buffer:
        block, buffer = buffer.split("\r\n\r\n", 1)
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if fields:
            events.append((fields.get("event", ""), fields.get("data", "")))
    return events, buffer


async def _sse(
    http: httpx.AsyncClient, url: str, tok: str, cid: str | None, sub: Subscriber, ready: asyncio.Event
) -> None:
    headers = {"authorization": f"Bearer {tok}", "accept": "text/event-stream"}
    body = _query(cid)
    async with http.stream("POST", url, json=body, headers=headers) as response:
        ready.set()
        buffer = ""
        async for chunk in response.aiter_text():
            events, buffer = _sse_events(buffer + chunk)
            for event, data in events:
                if event == "next":
                    sub.on_event(orjson.loads(data)["data"])


async def _single(
    http: httpx.AsyncClient, url: str, tok: str, cid: str | None, sub: Subscriber, ready: asyncio.Event
) -> None:
    headers = {"authorization": f"Bearer {tok}"}
    stream_token = (await http.put(url, headers=headers)).text
    headers["x-graphql-event-stream-token"] = stream_token
    async with http.stream("GET", url, headers={**headers, "accept": "text/event-stream"}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"the stream: {response.status_code} {(await response.aread())[:200]!r}")
        body = {**_query(cid), "extensions": {"operationId": "1"}}
        accepted = await http.post(url, json=body, headers=headers)
        if accepted.status_code != 202:
            raise RuntimeError(f"{accepted.status_code} {accepted.text}")
        ready.set()
        buffer = ""
        async for chunk in response.aiter_text():
            events, buffer = _sse_events(buffer + chunk)
            for event, data in events:
                if event == "next":
                    sub.on_event(orjson.loads(data)["payload"]["data"])


async def _multipart(
    http: httpx.AsyncClient, url: str, tok: str, cid: str | None, sub: Subscriber, ready: asyncio.Event
) -> None:
    headers = {"authorization": f"Bearer {tok}", "accept": MULTIPART_ACCEPT}
    body = _query(cid)
    async with http.stream("POST", url, json=body, headers=headers) as response:
        ready.set()
        buffer = ""
        async for chunk in response.aiter_text():
            parts = (buffer + chunk).split("--graphql")
            buffer = parts.pop()
            for part in parts:
                payload = part.partition("\r\n\r\n")[2].strip()
                if payload and payload != "{}":
                    sub.on_event(orjson.loads(payload)["payload"]["data"])


async def _round(
    server: Server, http: httpx.AsyncClient, transport: str, cid: str, users: list[int], events: int
) -> dict:
    url = f"{server.base}/graphql"
    subs = [Subscriber() for _ in users[1:]]
    readies = [asyncio.Event() for _ in subs]
    run: Callable = {
        "graphql-transport-ws": None,
        "graphql-sse": _sse,
        "graphql-sse single": _single,
        "multipart": _multipart,
    }[transport]
    tasks = []
    for user, sub, ready in zip(users[1:], subs, readies, strict=True):
        if run is None:
            tasks.append(asyncio.create_task(_ws(server.ws_url, token(user), cid, sub, ready)))
        else:
            tasks.append(asyncio.create_task(run(http, url, token(user), cid, sub, ready)))
    try:
        for ready in readies:
            await asyncio.wait_for(ready.wait(), 30)
        deadline = time.monotonic() + 30
        while server.active_subscriptions() < len(subs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{transport}: {server.active_subscriptions()} of {len(subs)} subscribed")
            await asyncio.sleep(0.05)
        sender = token(users[0])
        latencies: list[float] = []
        cpu0 = server.cpu_seconds()
        for _ in range(events):
            msg_id = str(uuid.uuid4())
            start = time.perf_counter_ns()
            answer = await http.post(
                url,
                content=send_body(int(cid), "bench", msg_id),
                headers={"authorization": f"Bearer {sender}", "content-type": "application/json"},
            )
            assert answer.status_code == 200 and "errors" not in answer.json(), answer.text
            for sub in subs:
                while msg_id not in sub.got:
                    sub.changed.clear()
                    await asyncio.wait_for(sub.changed.wait(), 30)
                latencies.append((sub.got[msg_id] - start) / 1e6)
        cpu = server.cpu_seconds() - cpu0
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
    deadline = time.monotonic() + 30
    while server.active_subscriptions() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    latencies.sort()
    return {
        "cpu_ms_per_event": 1000 * cpu / events,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))],
    }


def _subscribe(
    server: Server,
    http: httpx.AsyncClient,
    transport: str,
    cid: str | None,
    users: list[int],
    subs: list[Subscriber],
    readies: list[asyncio.Event],
) -> list[asyncio.Task]:
    url = f"{server.base}/graphql"
    run: Callable | None = {"graphql-sse": _sse, "graphql-sse single": _single, "multipart": _multipart}.get(transport)
    gate = asyncio.Semaphore(32)  # subscriptions being set up at once (a reservation is opened in time)

    async def one(user: int, sub: Subscriber, ready: asyncio.Event) -> None:
        async with gate:
            if run is None:
                task = asyncio.create_task(_ws(server.ws_url, token(user), cid, sub, ready))
            else:
                task = asyncio.create_task(run(http, url, token(user), cid, sub, ready))
            waiting = asyncio.create_task(ready.wait())
            await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
        try:
            await task
        except asyncio.CancelledError:
            task.cancel()
            raise
        except Exception as error:
            log(f"sse {transport}: a subscriber failed: {error!r}")
            raise

    return [asyncio.create_task(one(u, s, r)) for u, s, r in zip(users, subs, readies, strict=True)]


async def _subscribed(server: Server, transport: str, readies: list[asyncio.Event]) -> None:
    for ready in readies:
        await asyncio.wait_for(ready.wait(), 60)
    deadline = time.monotonic() + 60
    while server.active_subscriptions() < len(readies):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{transport}: {server.active_subscriptions()} of {len(readies)} subscribed")
        await asyncio.sleep(0.05)


async def _idle_memory(server: Server, transport: str, count: int) -> float:
    """Bytes of the server's RSS per idle subscription, `count` of them over `transport`."""
    users = list(range(890_001, 890_001 + count))
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=2 * count + 20)) as http:
        warm = [Subscriber() for _ in range(20)]
        warm_ready = [asyncio.Event() for _ in warm]
        tasks = _subscribe(server, http, transport, None, users[:20], warm, warm_ready)
        await _subscribed(server, transport, warm_ready)
        await asyncio.sleep(2)  # the server settles (its collector's passes, the heap trim)
        before = server.rss()
        subs = [Subscriber() for _ in users[20:]]
        readies = [asyncio.Event() for _ in subs]
        tasks += _subscribe(server, http, transport, None, users[20:], subs, readies)
        try:
            await _subscribed(server, transport, warm_ready + readies)
            await asyncio.sleep(2)
            after = server.rss()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
    return (after - before) / len(subs)


async def _measure(server: Server, rounds: int, events: int, subscribers: int) -> dict[str, list[dict]]:
    users = list(range(880_001, 880_002 + subscribers))
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=4 * subscribers + 20)) as http:
        created = await http.post(
            f"{server.base}/graphql",
            json={
                "query": 'mutation($m: [ID!]!) { createGroup(title: "bench", memberIds: $m) { id } }',
                "variables": {"m": [str(u) for u in users[1:]]},
            },
            headers={"authorization": f"Bearer {token(users[0])}"},
        )
        cid = created.json()["data"]["createGroup"]["id"]
        results: dict[str, list[dict]] = {t: [] for t in TRANSPORTS}
        for r in range(rounds + 1):  # round 0 warms up, not counted
            order = TRANSPORTS[r % len(TRANSPORTS) :] + TRANSPORTS[: r % len(TRANSPORTS)]
            for transport in order:
                result = await _round(server, http, transport, cid, users, events)
                if r:
                    results[transport].append(result)
                log(f"sse round {r} {transport}: {result}")
    return results


def report(results: dict[str, list[dict]], memory: dict[str, float], args: argparse.Namespace) -> str:
    def med(transport: str, key: str) -> float:
        return statistics.median(r[key] for r in results[transport])

    base = "graphql-transport-ws"
    lines = [
        "# Subscriptions over plain HTTP against the websocket (bench/sse.py)",
        "",
        f"`python -m bench.sse --rounds {args.rounds} --events {args.events} --subscribers {args.subscribers}`: one",
        "`chatgql serve` process, in-process bus; per round and transport (order rotated), that many subscribers of",
        "one group's messageNew and that many sends, one at a time. Medians over the rounds; CPU is the server's",
        "per event (all its subscribers' deliveries); latency is send start -> event parsed at the subscriber.",
        "",
        "| transport | server CPU per event (ms) | vs websocket | send -> receipt p50 (ms) | p99 (ms) |",
        "|---|---|---|---|---|",
    ]
    for transport in TRANSPORTS:
        cpu = med(transport, "cpu_ms_per_event")
        ratio = cpu / med(base, "cpu_ms_per_event")
        lines.append(
            f"| {transport} | {cpu:.2f} | {ratio:.2f}x | {med(transport, 'p50_ms'):.2f} | {med(transport, 'p99_ms'):.2f} |"
        )
    if memory:
        lines += [
            "",
            f"An idle subscription ({args.idle} of them, messageNew over all of the viewer's conversations, a fresh",
            "server per transport): the server's RSS per subscription.",
            "",
            "| transport | RSS per idle subscription (KB) |",
            "|---|---|",
        ]
        lines += [
            f"| {transport} | {memory[transport] / 1024:.1f} |" for transport in TRANSPORTS if transport in memory
        ]
    lines += ["", "Every round (CPU ms per event / p50 ms / p99 ms):", ""]
    for transport in TRANSPORTS:
        cells = ", ".join(
            f"{r['cpu_ms_per_event']:.2f}/{r['p50_ms']:.1f}/{r['p99_ms']:.1f}" for r in results[transport]
        )
        lines.append(f"- {transport}: {cells}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sse", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5; one more warms up)")
    parser.add_argument("--events", type=int, default=50, help="sends per round and transport (default 50)")
    parser.add_argument("--subscribers", type=int, default=50, help="subscribers per transport (default 50)")
    parser.add_argument("--idle", type=int, default=300, help="idle subscriptions per transport (0: none)")
    parser.add_argument("--report", type=Path, default=REPO / "bench" / "results" / "sse.md")
    args = parser.parse_args()
    raise_fd_limit()
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-sse-"))
    pg = Postgres.start(scratch / "pg")
    try:
        asyncio.run(_create_databases(pg, ["sse"]))
        server = _spawn(pg, scratch, "sse", "sse", {"CHATGQL_RATE_SEND_PER_SECOND": "0"})
        try:
            server.wait_ready()
            results = asyncio.run(_measure(server, args.rounds, args.events, args.subscribers))
        finally:
            server.stop()
        memory: dict[str, float] = {}
        for transport in TRANSPORTS if args.idle else ():
            server = _spawn(pg, scratch, f"sse-idle-{len(memory)}", "sse", {})
            try:
                server.wait_ready()
                memory[transport] = asyncio.run(_idle_memory(server, transport, args.idle + 20))
                log(f"sse idle {transport}: {memory[transport] / 1024:.1f} KB per subscription")
            finally:
                server.stop()
    finally:
        pg.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    text = report(results, memory, args)
    args.report.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
