"""live: send-to-subscriber latency at a fixed rate, next to a bare aiokafka round trip.

Product path: sendMessage over HTTP (raw keep-alive client) -> chat_send commit ->
outbox -> relay -> Kafka -> consumer (group fanout) -> bus -> dispatcher ->
graphql-transport-ws. One subscriber (a separate process) holds messageNew over
all of its conversations; latency = its receive time - the request's start
(CLOCK_MONOTONIC is one clock for every process of the machine).

Baseline: the product's producer settings (KafkaPublisher: acks=all, idempotent,
linger 2 ms) -> the same broker -> a consumer in another process with the
product's consumer settings (group, getmany, commit per batch), same rate,
payloads of the same size.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import time
import uuid

import orjson

from . import layout
from .infra import CpuMeter, die_with_parent, log, process_cpu, queue_get, use_uvloop
from .queries import SUB_ALL, send_body, token
from .rawhttp import Pool


def stats_ms(latencies_ns: list[int]) -> dict:
    if not latencies_ns:
        return {"count": 0}
    xs = sorted(latencies_ns)

    def pct(p: float) -> float:
        return round(xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] / 1e6, 3)

    return {
        "count": len(xs),
        "p50": pct(50),
        "p90": pct(90),
        "p99": pct(99),
        "max": round(xs[-1] / 1e6, 3),
        "mean": round(sum(xs) / len(xs) / 1e6, 3),
    }


# --------------------------------------------------------------------- receivers (child processes)


def _ws_receiver(url: str, tok: str, ready, stop, out) -> None:
    die_with_parent()
    use_uvloop()
    from .ws import receive, subscribe

    got: dict[str, int] = {}

    def on_event(now: int, data: dict) -> None:
        got[data["messageNew"]["message"]["clientMsgId"]] = now

    ended: list[str] = []

    async def main() -> None:
        ws = await subscribe(url, tok, SUB_ALL)
        ready.set()
        task = asyncio.create_task(receive(ws, on_event))
        while not stop.is_set() and not task.done():
            await asyncio.sleep(0.05)
        if task.done() and task.exception() is not None:
            ended.append(repr(task.exception()))  # the server ended the subscription: report it
        task.cancel()
        await ws.close()

    try:
        asyncio.run(main())
        out.put(("ok", (got, ended[0] if ended else None)))
    except Exception as error:  # noqa: BLE001 - reported to the parent
        ready.set()
        out.put(("error", repr(error)))


def _kafka_receiver(bootstrap: str, topic: str, group: str, ready, stop, out, stamps: bool = False) -> None:
    """Receive times by clientMsgId; stamps: also each record's Kafka timestamp (ms since the epoch:
    the producer's send time), reported in place of the ws receiver's `ended`."""
    die_with_parent()
    use_uvloop()
    from aiokafka import AIOKafkaConsumer

    got: dict[str, int] = {}
    kafka_ms: dict[str, int] = {}

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, auto_offset_reset="latest"
        )
        await consumer.start()
        try:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=500, max_records=1000)
                now = time.monotonic_ns()
                if consumer.assignment() and not ready.is_set():
                    for tp in consumer.assignment():
                        await consumer.position(tp)
                    ready.set()
                for records in batches.values():
                    for record in records:
                        key = orjson.loads(record.value).get("clientMsgId")
                        got[key] = now
                        if stamps:
                            kafka_ms[key] = record.timestamp
                if batches:
                    await consumer.commit()
        finally:
            await consumer.stop()

    try:
        asyncio.run(main())
        out.put(("ok", (got, kafka_ms if stamps else None)))
    except Exception as error:  # noqa: BLE001
        ready.set()
        out.put(("error", repr(error)))


# --------------------------------------------------------------------- fixed-rate senders


async def fixed_rate(rate: float, count: int, send_one) -> tuple[dict[str, int], dict]:
    """Call send_one(i) -> (id, start_ns) awaitable at t0 + i/rate, open loop.
    Returns ids -> start times, and how late the schedule ran and how long the sends took."""
    starts: dict[str, int] = {}
    acks: list[int] = []
    late: list[int] = []
    failures: list[str] = []
    tasks = []
    t0 = time.monotonic_ns()
    interval = 1e9 / rate

    async def run(i: int) -> None:
        try:
            key, start = await send_one(i)
            acks.append(time.monotonic_ns() - start)
            starts[key] = start
        except Exception as error:  # noqa: BLE001 - counted and reported
            failures.append(repr(error))

    for i in range(count):
        target = t0 + int(i * interval)
        delay = (target - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        late.append(max(0, time.monotonic_ns() - target))
        tasks.append(asyncio.create_task(run(i)))
    await asyncio.gather(*tasks)
    sent_for = (time.monotonic_ns() - t0) / 1e9
    return starts, {
        "schedule_late_ms": stats_ms(late),
        "send_ack_ms": stats_ms(acks),
        "failures": len(failures),
        "first_failure": failures[0] if failures else None,
        "send_seconds": round(sent_for, 3),
    }


def _collect(proc, out, stop, timeout: float = 60) -> tuple[dict[str, int], str | None]:
    stop.set()
    try:
        kind, data = queue_get(out, [proc], timeout, "live receiver")
    except RuntimeError:
        proc.kill()
        raise
    proc.join(10)
    if kind != "ok":
        raise RuntimeError(f"receiver failed: {data}")
    return data


def _latencies(starts: dict[str, int], got: dict[str, int], warm: set[str]) -> tuple[list[int], int]:
    lat = [got[k] - s for k, s in starts.items() if k in got and k not in warm]
    missing = sum(1 for k in starts if k not in got and k not in warm)
    return lat, missing


def _gc(metrics: dict[str, float]) -> dict:
    """The server's collector pauses (chatgql_gc_pause_seconds) from a /metrics reading."""
    out: dict = {"longest_since_start_ms": round(1000 * metrics.get("chatgql_gc_pause_longest_seconds", 0.0), 1)}
    for gen in ("0", "1", "2"):
        out[f"gen{gen}"] = {
            "count": metrics.get(f'chatgql_gc_pause_seconds_count{{generation="{gen}"}}', 0.0),
            "seconds": metrics.get(f'chatgql_gc_pause_seconds_sum{{generation="{gen}"}}', 0.0),
        }
    return out


def _gc_during(before: dict, after: dict, seconds: float) -> dict:
    gens = {
        g: {
            "collections": int(after[g]["count"] - before[g]["count"]),
            "pause_ms": round(1000 * (after[g]["seconds"] - before[g]["seconds"]), 1),
        }
        for g in ("gen0", "gen1", "gen2")
    }
    total = sum(v["pause_ms"] for v in gens.values())
    return {
        **gens,
        "pause_ms": round(total, 1),
        "pause_share": round(total / 1000 / seconds, 4) if seconds else None,
        "longest_since_start_ms": after["longest_since_start_ms"],
    }


# The server's waits (server/metrics.py): histograms read before and after the measured window.
WAITS = {
    "event_loop_lag": ("chatgql_event_loop_lag_seconds", ""),
    "pool_wait": ("chatgql_db_pool_wait_seconds", ""),
    "relay_read": ("chatgql_relay_step_seconds", 'step="read"'),
    "relay_publish": ("chatgql_relay_step_seconds", 'step="publish"'),
    "relay_delete": ("chatgql_relay_step_seconds", 'step="delete"'),
}


def _buckets(metrics: dict[str, float], name: str, label: str) -> dict[float, float]:
    """A histogram's cumulative bucket counts by upper bound (seconds), from a /metrics reading."""
    out: dict[float, float] = {}
    prefix = name + "_bucket{"
    for key, value in metrics.items():
        if key.startswith(prefix) and (not label or label in key):
            bound = key.split('le="', 1)[1].split('"', 1)[0]
            out[float(bound)] = value
    return out


def _waits_during(before: dict[str, float], after: dict[str, float]) -> dict:
    """Each of WAITS in the window: how many, how many took over 25 ms and over 100 ms, and the
    bucket bound its p99 is under (None: too few)."""
    out = {}
    for what, (name, label) in WAITS.items():
        then, now = _buckets(before, name, label), _buckets(after, name, label)
        counts = {bound: now[bound] - then.get(bound, 0.0) for bound in sorted(now)}
        total = counts.get(float("inf"), 0.0)
        if not total:
            out[what] = {"count": 0}
            continue
        p99 = next((bound for bound, count in counts.items() if count >= 0.99 * total), float("inf"))
        out[what] = {
            "count": int(total),
            "over_25ms": int(total - counts.get(0.025, 0.0)),
            "over_100ms": int(total - counts.get(0.1, 0.0)),
            "p99_under_ms": None if p99 == float("inf") else round(1000 * p99, 1),
        }
    return out


async def _sample_backlog(backlog, samples: list[int]) -> None:
    while True:
        samples.append(await backlog())
        await asyncio.sleep(0.1)


async def product(
    server, sizes: layout.Sizes, cpu_sources: dict, rate: float, backlog=None, keep: dict | None = None
) -> dict:
    """backlog(): the outbox's row count (sampled every 0.1 s while measuring, when given).
    keep: filled with the measured sends' start, answer and receive times by clientMsgId
    ("starts", "acked", "got"), for a caller that breaks the latency down (bench/livescale.py)."""
    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(
        target=_ws_receiver, args=(server.ws_url, token(layout.LIVE_USER), ready, stop, out), daemon=True
    )
    proc.start()
    await asyncio.to_thread(ready.wait, 60)
    for _ in range(200):
        if await asyncio.to_thread(server.active_subscriptions) >= 1:
            break
        await asyncio.sleep(0.05)
    pool = await Pool("127.0.0.1", server.port, 32).open()
    tokens = {k: f"Bearer {token(layout.LIVE_USER + k)}" for k in range(1, sizes.live_conversations + 1)}
    errors: list[str] = []
    acked: dict[str, int] = {}

    async def send_one(i: int) -> tuple[str, int]:
        k = i % sizes.live_conversations + 1
        cmid = str(uuid.uuid4())
        body = send_body(layout.LIVE_CID0 + k, f"live {i}", cmid)
        start = time.monotonic_ns()
        status, payload = await pool.post(body, tokens[k])
        acked[cmid] = time.monotonic_ns()
        if status != 200 or b'"errors"' in payload:
            errors.append(payload[:300].decode(errors="replace"))
            raise RuntimeError(f"send failed: HTTP {status}")
        return cmid, start

    # warm-up: the whole path (and the subscriber) is live before measuring
    warm_starts, _ = await fixed_rate(min(50.0, rate), max(10, int(rate // 10)), send_one)
    await asyncio.sleep(1.0)
    count = int(rate * sizes.live_seconds)
    metrics_before = await asyncio.to_thread(server.metrics)
    gc_before = _gc(metrics_before)
    backlog_samples: list[int] = []
    sampler = asyncio.create_task(_sample_backlog(backlog, backlog_samples)) if backlog is not None else None
    meter = CpuMeter({**cpu_sources, "subscriber": lambda: process_cpu(proc.pid)}).start()
    t0 = time.monotonic()
    starts, sched = await fixed_rate(rate, count, send_one)
    await asyncio.sleep(2.0 if sizes.mode == "full" else 0.5)  # the last ones in flight
    cpu = meter.stop()
    if sampler is not None:
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    metrics_after = await asyncio.to_thread(server.metrics)
    diagnosis = {
        "gc": _gc_during(gc_before, _gc(metrics_after), time.monotonic() - t0),
        "waits": _waits_during(metrics_before, metrics_after),
    }
    if backlog_samples:
        diagnosis["outbox_backlog"] = {
            "mean": round(sum(backlog_samples) / len(backlog_samples), 1),
            "max": max(backlog_samples),
            "samples": len(backlog_samples),
        }
    got, ended = await asyncio.to_thread(_collect, proc, out, stop)
    pool.close()
    lat, missing = _latencies(starts, got, set(warm_starts))
    # The event path alone: from the send's answer (its commit done) to the subscriber. Below 0 when
    # the event reached the subscriber before the answer reached the sender.
    after_answer = [got[k] - acked[k] for k in starts if k in got and k in acked and k not in warm_starts]
    if keep is not None:
        keep.update(starts=starts, acked=acked, got=got)
    return {
        "rate_per_s": rate,
        "seconds": sizes.live_seconds,
        "sent": count,
        "acknowledged": len(starts),
        "received": len(lat),
        "missing": missing,
        "subscription_ended": ended,
        "latency_ms": stats_ms(lat),
        "answer_to_subscriber_ms": stats_ms(after_answer),
        **sched,
        "send_errors": errors[:3],
        "cpu": cpu,
        "diagnosis": diagnosis,
    }


async def kafka_baseline(bootstrap: str, sizes: layout.Sizes, cpu_sources: dict, rate: float) -> dict:
    from datetime import datetime

    from chatgql.events import types as events

    CREATED_AT = datetime.fromisoformat("2026-11-30T04:49:51.123456+00:00")
    from chatgql.events.publish import KafkaPublisher, ensure_topic

    topic = f"bench.roundtrip.{uuid.uuid4().hex[:8]}"
    await ensure_topic(bootstrap, topic, 16, 1)
    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_kafka_receiver, args=(bootstrap, topic, f"bench-{topic}", ready, stop, out), daemon=True)
    proc.start()
    await asyncio.to_thread(ready.wait, 90)
    publisher = KafkaPublisher(bootstrap, topic)
    await publisher.start()
    acks: list = []

    async def send_one(i: int) -> tuple[str, int]:
        k = i % sizes.live_conversations + 1
        cmid = uuid.uuid4()
        event = events.MessageNew(
            conversation_id=layout.LIVE_CID0 + k,
            sender_id=str(layout.LIVE_USER + k),
            client_msg_id=cmid,
            body=f"live {i}",
            seq=i + 1,
            created_at=CREATED_AT,
        )
        key, payload = str(event.conversation_id), event.to_wire()
        start = time.monotonic_ns()
        acks.append(await publisher.producer.send(topic, value=payload, key=key))
        return str(cmid), start

    try:
        warm_starts, _ = await fixed_rate(min(50.0, rate), max(10, int(rate // 10)), send_one)
        await asyncio.sleep(1.0)
        count = int(rate * sizes.live_seconds)
        meter = CpuMeter({**cpu_sources, "subscriber": lambda: process_cpu(proc.pid)}).start()
        starts, sched = await fixed_rate(rate, count, send_one)
        await asyncio.gather(*acks)
        await asyncio.sleep(1.0)
        cpu = meter.stop()
        got, _ = await asyncio.to_thread(_collect, proc, out, stop)
    finally:
        await publisher.stop()
    lat, missing = _latencies(starts, got, set(warm_starts))
    return {
        "kind": "bare aiokafka producer -> broker -> consumer (product settings), same broker",
        "topic_partitions": 16,
        "rate_per_s": rate,
        "seconds": sizes.live_seconds,
        "sent": count,
        "received": len(lat),
        "missing": missing,
        "latency_ms": stats_ms(lat),
        **sched,
        "cpu": cpu,
    }


async def bus_baseline(sizes: layout.Sizes, rate: float, url: str | None = None) -> dict:
    """No Kafka: a publish -> subscriber round trip on the bus the server uses: memory:// (in
    this process), or with workers the same redis-server, through the product's own backend
    (events/backends.py) driven alone, without the Bus, on a channel of its own."""
    from chatgql.events.backends import backend_for

    url = url or "memory://"
    bus = backend_for(url)
    await bus.connect()
    got: dict[str, int] = {}
    try:
        sub_channel = f"bench.roundtrip.{uuid.uuid4().hex[:8]}"
        await bus.subscribe(sub_channel)

        async def reader() -> None:
            while True:
                event = await bus.next_published()
                got[event.message] = time.monotonic_ns()

        task = asyncio.create_task(reader())

        async def send_one(i: int) -> tuple[str, int]:
            key = str(uuid.uuid4())
            start = time.monotonic_ns()
            await bus.publish(sub_channel, key)
            return key, start

        count = int(rate * sizes.live_seconds)
        starts, sched = await fixed_rate(rate, count, send_one)
        await asyncio.sleep(0.2)
        task.cancel()
    finally:
        await bus.disconnect()
    lat, missing = _latencies(starts, got, set())
    kind = (
        "in-process memory:// bus round trip"
        if url.startswith("memory")
        else "redis:// bus publish -> subscribe round trip, same redis-server"
    )
    return {
        "kind": kind + " (no Kafka in this run; not a Kafka baseline)",
        "rate_per_s": rate,
        "seconds": sizes.live_seconds,
        "sent": count,
        "received": len(lat),
        "missing": missing,
        "latency_ms": stats_ms(lat),
        **sched,
    }


async def _pair(
    server,
    kafka,
    sizes: layout.Sizes,
    cpu_sources: dict,
    rate: float,
    bus_url: str | None,
    backlog=None,
    keep: dict | None = None,
    commit_baseline=None,
) -> dict:
    """commit_baseline(rate): the database's own latency for the send's statement at that rate
    (pgbench.fixed_rate_latency), run after the product's sends; None: not measured."""
    if kafka is not None:
        log(f"live: bare Kafka round trip at {rate:g}/s")
        baseline = await kafka_baseline(kafka.bootstrap, sizes, cpu_sources, rate)
    else:
        baseline = await bus_baseline(sizes, rate, bus_url)
    log(f"live: product path at {rate:g}/s")
    result = await product(server, sizes, cpu_sources, rate, backlog, keep)
    p99, base_p99 = result["latency_ms"].get("p99"), baseline["latency_ms"].get("p99")
    p50, base_p50 = result["latency_ms"].get("p50"), baseline["latency_ms"].get("p50")
    commits = None
    if commit_baseline is not None:
        log(f"live: the send's statement alone (pgbench) at {rate:g}/s")
        try:
            commits = await commit_baseline(rate)
        except Exception as error:  # noqa: BLE001 - a baseline that failed is reported, not fatal
            commits = {"error": str(error)[:500]}
    return {
        "product": result,
        "baseline": baseline,
        "commit_baseline": commits,
        "ratio_p99": round(p99 / base_p99, 2) if p99 and base_p99 else None,
        "ratio_p50": round(p50 / base_p50, 2) if p50 and base_p50 else None,
    }


async def run(
    server,
    kafka,
    sizes: layout.Sizes,
    cpu_sources: dict,
    settle,
    bus_url: str | None = None,
    backlog=None,
    profile_dir=None,
    commit_baseline=None,
) -> dict:
    """The target rate, and first a lower one (what the path costs when the server is not saturated).
    settle(): waits until the server has relayed everything (between the two). bus_url: the redis://
    bus the server's workers share (None: the in-process bus). backlog(): the outbox's row count.
    profile_dir: after the measured runs, one more run at the target rate (not counted) with py-spy
    recording the server, so the report can say where its time goes. commit_baseline(rate): see _pair
    (at the target rate only)."""
    bus = "redis bus" if bus_url else "in-process bus"
    out: dict = {
        "transport": f"kafka + {bus}" if kafka is not None and bus_url else "kafka" if kafka is not None else bus
    }
    if sizes.live_low_rate:
        out["lower_rate"] = await _pair(server, kafka, sizes, cpu_sources, sizes.live_low_rate, bus_url)
        await settle()
    out.update(
        await _pair(
            server, kafka, sizes, cpu_sources, sizes.live_rate, bus_url, backlog, commit_baseline=commit_baseline
        )
    )
    if profile_dir is not None:
        await settle()
        out["profile"] = await _profiled(server, sizes, cpu_sources, profile_dir, out["product"])
    return out


async def _profiled(server, sizes: layout.Sizes, cpu_sources: dict, profile_dir, measured: dict) -> dict:
    """py-spy over one more product run at the target rate; shares -> server CPU per event, with the
    measured run's server CPU."""
    from . import profiles

    raw = profile_dir / "live.txt"
    info: dict = {"seconds": sizes.live_seconds, "rate_hz": profiles.RATE, "raw_file": str(raw)}
    recorder = profiles.Recorder(server.pid, sizes.live_seconds, raw, subprocesses=server.workers > 1)
    try:
        recorder.start()
        if not await asyncio.to_thread(recorder.attached):
            info["error"] = "py-spy did not start sampling"
            return info
        run = await product(server, sizes, cpu_sources, sizes.live_rate)
        info.update(await asyncio.to_thread(recorder.wait))
        info["latency_ms_while_profiling"] = run["latency_ms"]
        summary = profiles.summarize(raw.read_text(errors="replace"))
        info.update(summary)
        cpu = measured["cpu"]
        server_s = cpu["pct_of_one_core"].get("server", 0.0) / 100 * cpu["wall_s"]
        per_event = round(1000 * server_s / measured["received"], 3) if measured["received"] else None
        info["server_cpu_ms_per_event"] = per_event
        info["us_per_event"] = profiles.per_request(summary, per_event)
    except Exception as error:  # noqa: BLE001 - profiling is optional: reported, the run goes on
        info["error"] = repr(error)
    finally:
        recorder.stop()
    return info
