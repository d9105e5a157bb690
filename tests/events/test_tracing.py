"""Traces over OTLP, end to end (runtime/tracing.py, docs/operating/tracing.md): a send is one trace
from the sender's HTTP request to the subscriber's websocket frame, across three processes and
Kafka, in a real Jaeger (scripts/jaeger.sh) the test starts.

The sender's API process (no relay, no consumer), a relay process (`chatgql relay`) and the
subscriber's API process (the Kafka consumer, no relay) share the database and the topic: the
event crosses the outbox to the relay, Kafka to the consumer, and the consumer's dispatcher to
the websocket. The test sends with a traceparent header of its own and reads that trace back. Its
picture, drawn from Jaeger's answer in chromium, is tests/out/tracing/trace.png
(docs/images/trace.png is a copy).
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from chatgql.settings import load_settings

from ..conftest import REPO, drop_database, scratch_database
from ..support.infra import JWT_SECRET, ChatProcess, chat_env
from ..support.live import ChatApi, WsClient, bearer, read_topic, subscribe_messages, wait_until
from ..support.tracepage import waterfall

JAEGER_SH = REPO / "scripts" / "jaeger.sh"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
OUT = REPO / "tests" / "out" / "tracing"
SECRET_BODY = "a body no span may carry"


def _free_run(count: int) -> int:
    """A port P with P..P+count-1 all free on 127.0.0.1."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65000:
            continue
        held = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError("no run of free ports")


@pytest.fixture(scope="module")
def jaeger() -> Iterator[SimpleNamespace]:
    """A Jaeger of this module's own (built by scripts/jaeger.sh once per machine, cached)."""
    port = _free_run(5)
    run_dir = Path(tempfile.mkdtemp(prefix="chatgql-test-jaeger-"))
    command = [str(JAEGER_SH), "start", "--port", str(port), "--dir", str(run_dir)]
    otlp = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True, timeout=1800).stdout.strip()
    try:
        yield SimpleNamespace(query=f"http://127.0.0.1:{port}", otlp=otlp, log=run_dir / "jaeger.log")
    finally:
        subprocess.run([str(JAEGER_SH), "stop", "--port", str(port), "--dir", str(run_dir)], check=False)
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
async def three_processes(migrated_url, kafka, topic, jaeger, tmp_path) -> AsyncIterator[SimpleNamespace]:
    name = f"tracing_{uuid.uuid4().hex[:8]}"
    url = await scratch_database(migrated_url, name)
    base = chat_env(url, kafka.bootstrap, topic, "memory://")
    base.update(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "100",  # spans leave within 0.1 s, not 5
        }
    )
    base.pop("OTEL_SDK_DISABLED", None)
    base.pop("OTEL_TRACES_EXPORTER", None)
    sender_port, receiver_port = _free_run(1), _free_run(1)

    def process(role: str, args: list[str], port: int | None = None) -> ChatProcess:
        env = {**base, "OTEL_SERVICE_NAME": f"chatgql-{role}"}
        return ChatProcess(role, args, env, tmp_path, port=port)

    def serve(port: int, *flags: str) -> list[str]:
        return ["serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", *flags]

    sender = process("sender", serve(sender_port, "--no-relay", "--no-consumer"), sender_port)
    relay = process("relay", ["relay"])
    receiver = process("receiver", serve(receiver_port, "--no-relay"), receiver_port)
    processes = [sender, relay, receiver]
    try:
        for p in processes:
            p.start()
        await sender.wait_ready()
        await receiver.wait_ready()  # its consumer has its partitions
        settings = load_settings(database_url=url, jwt_secret=JWT_SECRET, kafka_bootstrap_servers=None)
        yield SimpleNamespace(
            sender=sender, relay=relay, receiver=receiver, settings=settings, topic=topic, kafka=kafka.bootstrap
        )
    finally:
        for p in processes:
            p.stop()
        await drop_database(migrated_url, name)


async def _trace(jaeger: SimpleNamespace, trace_id: str, complete: Any, timeout: float = 60) -> dict:
    """The trace as Jaeger's query API gives it, once complete(trace) holds."""
    found: dict = {}

    async def fetched() -> bool:
        async with httpx.AsyncClient(timeout=5) as http:
            response = await http.get(f"{jaeger.query}/api/traces/{trace_id}")
        if response.status_code != 200:
            return False
        data = response.json().get("data") or []
        if not data:
            return False
        found.clear()
        found.update(data[0])
        return complete(found)

    await wait_until(fetched, timeout, lambda: f"trace {trace_id} to be complete in Jaeger; have {_names(found)}")
    return found


def _names(trace: dict) -> list[str]:
    return sorted(span["operationName"] for span in trace.get("spans", []))


def _service(trace: dict, span: dict) -> str:
    return trace["processes"][span["processID"]]["serviceName"]


def _parent(span: dict) -> str | None:
    return next((ref["spanID"] for ref in span.get("references", []) if ref["refType"] == "CHILD_OF"), None)


def _chain(trace: dict, span: dict) -> list[dict]:
    """span, its parent, the parent's parent... up to the root the trace holds."""
    by_id = {s["spanID"]: s for s in trace["spans"]}
    chain = [span]
    while (parent := _parent(chain[-1])) in by_id:
        chain.append(by_id[parent])
    return chain


@pytest.mark.kafka
async def test_one_trace_goes_from_the_senders_request_through_kafka_to_the_subscribers_frame(three_processes, jaeger):
    ps = three_processes
    sender_url = f"http://127.0.0.1:{ps.sender.port}/graphql"
    receiver_ws = f"ws://127.0.0.1:{ps.receiver.port}/graphql"
    async with httpx.AsyncClient(timeout=30) as http:
        api = ChatApi(http, sender_url, ps.settings)
        cid = await api.create_group(1, [2])
        client = await WsClient.connect(receiver_ws, bearer(ps.settings, 2))
        try:
            subscription = await subscribe_messages(client, cid)

            async def subscribed() -> bool:
                text = (await http.get(f"http://127.0.0.1:{ps.receiver.port}/metrics")).text
                return "chatgql_subscriptions_active 1.0" in text

            await wait_until(subscribed, 30, "the receiver's subscription")

            # The send, in a trace the test started: its id is what Jaeger is asked for.
            trace_id, caller = secrets.token_hex(16), secrets.token_hex(8)
            client_msg_id = str(uuid.uuid4())
            sent = await api.execute(
                "mutation Send($c: ID!, $m: UUID!, $b: String!) "
                "{ sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { seq } } }",
                {"c": cid, "m": client_msg_id, "b": SECRET_BODY},
                user=1,
                headers={"traceparent": f"00-{trace_id}-{caller}-01"},
            )
            assert sent["data"]["sendMessage"]["message"]["seq"] == 1, sent
            frame = await subscription.next(timeout=60)
            assert frame["messageNew"]["message"]["body"] == SECRET_BODY
        finally:
            await client.ws.close()

    def complete(trace: dict) -> bool:
        frames = [span for span in trace["spans"] if span["operationName"] == "websocket.frame"]
        whole = bool(frames) and _parent(_chain(trace, frames[0])[-1]) == caller
        return whole and "store.messages.send" in _names(trace)

    trace = await _trace(jaeger, trace_id, complete)
    spans = trace["spans"]

    # the frame's ancestry is the whole path, each hop in the process that made it
    (frame_span,) = [span for span in spans if span["operationName"] == "websocket.frame"]
    chain = _chain(trace, frame_span)
    path = [(span["operationName"], _service(trace, span)) for span in chain]
    assert path == [
        ("websocket.frame", "chatgql-receiver"),
        ("bus.deliver", "chatgql-receiver"),
        (f"receive {ps.topic}", "chatgql-receiver"),
        (f"send {ps.topic}", "chatgql-relay"),
        ("outbox.relay", "chatgql-relay"),
        ("mutation Send", "chatgql-sender"),
        ("POST /graphql", "chatgql-sender"),
    ], path
    # ... continuing the caller's trace: the request's span is the child of the test's
    assert _parent(chain[-1]) == caller

    # the service's unit of work, its statements (by store function) and, in the sender, nothing else
    sender_spans = [span for span in spans if _service(trace, span) == "chatgql-sender"]
    statement_names = {span["operationName"] for span in sender_spans if span["operationName"].startswith("store.")}
    assert "store.messages.send" in statement_names, _names(trace)
    units = [span for span in sender_spans if span["operationName"].startswith("services.")]
    assert units, _names(trace)

    # no variables, no bodies, no parameters anywhere in the trace
    everything = repr(trace)
    assert SECRET_BODY not in everything
    assert client_msg_id not in everything

    # the outbox row's trace went on in the record's headers, not in the event's JSON
    def sent_one(records: list) -> bool:
        return any(r.value["type"] == "message.new" for r in records)

    records = await read_topic(ps.kafka, ps.topic, sent_one, 30)
    assert not [r.value for r in records if "traceparent" in r.value]
    (record,) = [r for r in records if r.value["type"] == "message.new"]
    headers = dict(record.headers)
    send_span = chain[3]
    assert headers["traceparent"].decode() == f"00-{trace_id}-{send_span['spanID']}-01"

    await _screenshot(trace)


async def _screenshot(trace: dict) -> None:
    """The trace as a waterfall in chromium: tests/out/tracing/trace.png (docs/images/trace.png is a copy)."""
    from playwright.async_api import async_playwright

    assert shutil.which(CHROMIUM), "the screenshot needs Debian's chromium (scripts/test installs it)"
    OUT.mkdir(parents=True, exist_ok=True)
    page_file = OUT / "trace.html"
    page_file.write_text(waterfall(trace, "sendMessage, from the sender's request to the subscriber's frame"))
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 300})
            await page.goto(page_file.as_uri())
            await page.screenshot(path=str(OUT / "trace.png"), full_page=True)
        finally:
            await browser.close()


async def test_a_fan_out_traces_the_frames_of_the_first_subscribers_only():
    """A traced event to 100 subscribers in one process: one bus hop, and frame spans for the first
    CHATGQL_TRACING_FRAMES_PER_EVENT (here 16) of them, each the hop's child; every subscriber gets the event."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from chatgql.events import types as events
    from chatgql.events.dispatch import Dispatcher, MembershipCache
    from chatgql.runtime import tracing

    async def members(conversation_id: int, subscribed: list[str]) -> tuple[int, list[str]]:
        return 100_000, list(subscribed)  # a big group: the members among those subscribed here

    exporter = InMemorySpanExporter()
    tracing.start(True, "test", frames_per_event=16, exporter=exporter)
    try:
        dispatcher = Dispatcher(MembershipCache(members), buffer=10)
        event = {
            "type": events.MESSAGE_NEW,
            "conversationId": 1,
            "seq": 1,
            "senderId": "sender",
            "clientMsgId": str(uuid.uuid4()),
            "body": "hello",
            "createdAt": "2026-01-01T00:00:00+00:00",
        }
        trace_id, caller = secrets.token_hex(16), secrets.token_hex(8)
        async with contextlib.AsyncExitStack() as stack:
            subs = [
                await stack.enter_async_context(dispatcher.subscribe(str(user), 1, events.MESSAGE_NEW))
                for user in range(100)
            ]
            await dispatcher.dispatch_many([tracing.arrived(event, None, f"00-{trace_id}-{caller}-01")])
            assert [sub.take()["seq"] for sub in subs] == [1] * 100
            assert [sub.take() for sub in subs] == [None] * 100  # each frame is sent: its span ends
        spans = exporter.get_finished_spans()
        (hop,) = [span for span in spans if span.name == "bus.deliver"]
        assert f"{hop.parent.span_id:016x}" == caller and f"{hop.context.trace_id:032x}" == trace_id
        frames = [span for span in spans if span.name == "websocket.frame"]
        assert len(frames) == 16
        assert all(frame.parent.span_id == hop.context.span_id for frame in frames)
    finally:
        tracing.stop()
