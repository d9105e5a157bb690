"""The proof's report: the table of counts (docs/design/guarantees.md), one row per
subscriber, the measured takeover and rebalance times, and what happened when."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..faults.scenario import Result
from ..support.load import Subscriber


@dataclass
class SubscriberCounts:
    user: int
    api: int  # the API process it is connected to (1-based)
    conversations: int
    expected: int  # stored messages of its conversations
    live: int  # of those, pushed live (deduped)
    duplicates: int  # pushes of a seq it already had
    via_sync: int  # fetched with sync after a drop or a resync
    missing: int  # neither live nor fetched
    reorders: int
    resyncs: int  # subscriptions ended with the resync error (it subscribed again)
    drops: int  # connections lost (it reconnected)
    failures: list[str]

    @classmethod
    def of(
        cls, user: int, api: int, conversations: int, mine: list[dict], result: Result, s: Subscriber, fetched: list
    ) -> SubscriberCounts:
        keys = {(m["conversationId"], m["seq"]) for m in mine}
        have = set(s.unique()) | {(m["conversationId"], m["seq"]) for m in fetched}
        return cls(
            user,
            api,
            conversations,
            len(mine),
            len(keys & set(s.unique())),
            result.duplicates,
            result.via_sync,
            len(keys - have),
            result.reorders,
            sum(s.resyncs.values()),
            s.disconnects,
            result.failures,
        )


@dataclass
class Report:
    events: list[str] = field(default_factory=list)
    timings: list[tuple[str, str, float]] = field(default_factory=list)
    total: Result = field(default_factory=lambda: Result("proof"))
    subscribers: list[SubscriberCounts] = field(default_factory=list)
    outbox_end: int = -1
    lag_end: int = -1
    reads: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    resync_reasons: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def timing(self, process: str, what: str, seconds: float) -> None:
        self.timings.append((process, what, seconds))

    @property
    def failures(self) -> list[str]:
        out = list(self.total.failures)
        for s in self.subscribers:
            out += [f"subscriber {s.user} (api{s.api}): {f}" for f in s.failures]
        if not self.subscribers:
            out.append("no subscriber was checked")
        return out

    def counts(self) -> list[tuple[str, int]]:
        t, subs = self.total, self.subscribers
        interrupted = [s for s in subs if s.resyncs or s.drops]
        return [
            ("messages sent (distinct clientMsgIds)", t.sent),
            ("acknowledged", t.acked),
            ("retried by the client (same clientMsgId)", t.retried),
            ("answered duplicate: true (a retry of a stored send)", t.duplicate_acks),
            ("stored", t.stored),
            ("acknowledged but not stored", t.lost),
            ("stored more than once", t.stored_twice),
            ("conversations with a seq gap", t.gaps),
            ("markRead answered", self.reads),
            ("watermark or lastSeq regressions", t.watermark_back),
            ("subscribers (websockets over 3 API processes)", len(subs)),
            ("deliveries owed (stored messages x subscribers of their conversation)", sum(s.expected for s in subs)),
            ("delivered live (after dedupe)", sum(s.live for s in subs)),
            ("duplicates pushed (deduped by conversationId, seq)", sum(s.duplicates for s in subs)),
            ("fetched with sync after a drop or a resync", sum(s.via_sync for s in subs)),
            ("missing after sync", sum(s.missing for s in subs)),
            ("live events out of seq order", sum(s.reorders for s in subs)),
            ("subscriptions ended with the resync error (recovered)", sum(s.resyncs for s in subs)),
            ("connections dropped (reconnected)", sum(s.drops for s in subs)),
            ("subscribers interrupted, all recovered with sync", len(interrupted)),
            ("outbox rows at the end", self.outbox_end),
            ("consumer group lag at the end", self.lag_end),
        ]

    def markdown(self) -> str:
        lines = ["# The scaled topology on one machine: the proof", ""]
        lines += [f"Result: **{'green' if not self.failures else 'FAILED'}** in {self.seconds:.0f} s.", ""]
        lines += ["| count | |", "|---|---:|", *(f"| {what} | {n} |" for what, n in self.counts()), ""]
        lines += ["| process killed | measured | seconds |", "|---|---|---:|"]
        lines += [f"| {p} | {what} | {s:.2f} |" for p, what, s in self.timings]
        lines += [
            "",
            "| subscriber | api | conversations | owed | live | duplicates | via sync | missing | out of order "
            "| resyncs | drops | ok |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for s in self.subscribers:
            lines.append(
                f"| {s.user} | {s.api} | {s.conversations} | {s.expected} | {s.live} | {s.duplicates} | {s.via_sync} "
                f"| {s.missing} | {s.reorders} | {s.resyncs} | {s.drops} | {'yes' if not s.failures else 'NO'} |"
            )
        lines += ["", "What happened, when (seconds from the load's start):", ""]
        lines += [f"- {e}" for e in self.events]
        if self.errors:
            lines += ["", "What the clients saw and retried: " + ", ".join(f"{k} x{v}" for k, v in self.errors.items())]
        if self.resync_reasons:
            lines += ["", "Why subscriptions ended: " + ", ".join(f"{k} x{v}" for k, v in self.resync_reasons.items())]
        for failure in self.failures:
            lines.append(f"- FAILED: {failure[:1000]}")
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.markdown())
        return path
