"""One trace of Jaeger's query API (/api/traces/ID) as a waterfall page, for a screenshot in chromium
(tests/events/test_tracing.py makes docs/images/trace.png with it): a row per span, indented under
its parent, its bar where and as long as it ran, coloured by the process that made it."""

from __future__ import annotations

import html
from typing import Any

COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1"]


def _parent(span: dict) -> str | None:
    return next((ref["spanID"] for ref in span.get("references", []) if ref["refType"] == "CHILD_OF"), None)


def _rows(trace: dict) -> list[tuple[int, dict]]:
    """(depth, span), each span after its parent, siblings by start time."""
    spans = trace["spans"]
    ids = {span["spanID"] for span in spans}
    children: dict[str | None, list[dict]] = {}
    for span in spans:
        parent = _parent(span)
        children.setdefault(parent if parent in ids else None, []).append(span)
    rows: list[tuple[int, dict]] = []

    def walk(parent: str | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s["startTime"]):
            rows.append((depth, span))
            walk(span["spanID"], depth + 1)

    walk(None, 0)
    return rows


def waterfall(trace: dict[str, Any], title: str) -> str:
    rows = _rows(trace)
    start = min(span["startTime"] for _, span in rows)
    end = max(span["startTime"] + span["duration"] for _, span in rows)
    total = max(end - start, 1)
    services = sorted({p["serviceName"] for p in trace["processes"].values()})
    colour = {name: COLOURS[i % len(COLOURS)] for i, name in enumerate(services)}
    lines = []
    for depth, span in rows:
        service = trace["processes"][span["processID"]]["serviceName"]
        left = 85 * (span["startTime"] - start) / total  # the last 15% for the durations
        width = max(85 * span["duration"] / total, 0.3)
        ms = span["duration"] / 1000
        lines.append(
            f'<div class="row"><div class="name" style="padding-left:{8 + depth * 14}px">'
            f'<span class="svc" style="background:{colour[service]}"></span>{html.escape(span["operationName"])}'
            f'<span class="who">{html.escape(service)}</span></div>'
            f'<div class="lane"><div class="bar" style="left:{left:.3f}%;width:{width:.3f}%;background:{colour[service]}">'
            f'</div><span class="ms" style="left:calc({left + width:.3f}% + 4px)">{ms:.2f} ms</span></div></div>'
        )
    legend = " ".join(
        f'<span class="key"><span class="svc" style="background:{colour[name]}"></span>{html.escape(name)}</span>'
        for name in services
    )
    return f"""<!doctype html><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font: 13px system-ui, sans-serif; margin: 16px; color: #222; }}
h1 {{ font-size: 16px; margin: 0 0 4px; }}
.meta {{ color: #666; margin-bottom: 12px; }}
.row {{ display: flex; align-items: center; height: 24px; border-bottom: 1px solid #eee; }}
.name {{ width: 420px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }}
.who {{ color: #888; margin-left: 8px; font-size: 11px; }}
.lane {{ position: relative; flex: 1; height: 14px; }}
.bar {{ position: absolute; top: 0; height: 14px; border-radius: 2px; }}
.ms {{ position: absolute; top: -1px; font-size: 11px; color: #555; white-space: nowrap; }}
.svc {{ display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px; }}
.key {{ margin-right: 14px; }}
</style>
<h1>{html.escape(title)}</h1>
<div class="meta">trace {html.escape(trace["traceID"])} · {len(rows)} spans · {total / 1000:.1f} ms · {legend}</div>
{"".join(lines)}
"""
