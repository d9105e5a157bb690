"""The operator's erases: all of one user's messages (GDPR), and the messages older than the retention bound.

Both make tombstones exactly as deleteMessage does (changes.tombstone_txn: content erased, unread counts
corrected, a change seq and a message.deleted event each), with deletedBy null (the operator). They work in
bounded batches, one transaction each, at most batch_size messages of one conversation under its lock, so
sends to it wait for one batch at most. Killed between batches, they lose nothing: what committed is done,
and a new run skips the tombstones it finds and finishes (a tombstone is never made twice).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ..db import Database
from ..store import changes, drafts, reports
from .changes import tombstone_txn

log = logging.getLogger(__name__)
_CANDIDATES = 1000  # conversations read per retention query
ERASE, RETENTION = "ERASE", "RETENTION"  # the reason of the operator's change (MessageChange.reason)


@dataclass(frozen=True, slots=True)
class Batch:
    conversation_id: int
    erased: int  # tombstones this batch made
    total: int  # tombstones made so far by this run


OnBatch = Callable[[Batch], None]


class _Run:
    def __init__(self, on_batch: OnBatch | None) -> None:
        self.total = 0
        self._on_batch = on_batch

    def done(self, conversation_id: int, erased: int) -> None:
        self.total += erased
        if self._on_batch is not None and erased:
            self._on_batch(Batch(conversation_id, erased, self.total))


async def erase_user(
    database: Database, user_id: str, *, batch_size: int = 100, on_batch: OnBatch | None = None
) -> int:
    """Tombstone every message user_id sent, in every conversation (left ones too), blank the evidence of
    the resolved reports of them and delete their drafts; returns how many messages."""
    run = _Run(on_batch)
    async with database.connection() as conn:
        conversation_ids = await changes.conversations_with_messages_of(conn, user_id)
    for cid in conversation_ids:
        after, more = 0, True
        while more:
            async with database.transaction() as conn:
                if await changes.lock_conversation_txn(conn, cid) is None:
                    break
                seqs = await changes.seqs_of_sender_txn(conn, cid, user_id, after, batch_size)
                erased = await tombstone_txn(database, conn, cid, seqs, None, ERASE) if seqs else []
            run.done(cid, len(erased))
            after, more = (seqs[-1] if seqs else after), len(seqs) == batch_size
    async with database.transaction() as conn:  # the copies of resolved reports (docs/guide/moderation.md)
        await reports.blank_resolved_evidence(conn, user_id)
        await drafts.erase_user_txn(conn, user_id)  # their unsent text too (docs/guide/drafts.md)
    return run.total


async def run_retention(
    database: Database, older_than: datetime, *, batch_size: int = 100, on_batch: OnBatch | None = None
) -> int:
    """Tombstone every message sent before older_than; returns how many. Each conversation's retained_seq
    moves past what was erased, so the next run starts there (never walking the tombstones again)."""
    run = _Run(on_batch)
    after_id = 0
    while True:
        async with database.connection() as conn:
            conversation_ids = await changes.retention_candidates(conn, older_than, after_id, _CANDIDATES)
        for cid in conversation_ids:
            more = True
            while more:
                async with database.transaction() as conn:
                    retained = await changes.lock_conversation_txn(conn, cid)
                    if retained is None:
                        break
                    seqs, last, more = await changes.expired_txn(conn, cid, retained, older_than, batch_size)
                    erased = await tombstone_txn(database, conn, cid, seqs, None, RETENTION) if seqs else []
                    if last > retained:
                        await changes.set_retained_txn(conn, cid, last)
                run.done(cid, len(erased))
        if len(conversation_ids) < _CANDIDATES:
            return run.total
        after_id = conversation_ids[-1]


def retention_bound(days: float) -> datetime:
    """What the retention policy erases: messages sent before this (the process's clock; days apart)."""
    return datetime.now(UTC) - timedelta(days=days)


async def retention_loop(database: Database, days: float, *, interval_seconds: float, batch_size: int) -> None:
    """The retention policy in the background (app.py runs it with the relay): a pass, then a pause."""
    while True:
        try:
            erased = await run_retention(database, retention_bound(days), batch_size=batch_size)
            if erased:
                log.info("retention: erased %d messages older than %g days", erased, days)
        except Exception:  # the next pass tries again; what committed is done
            log.exception("retention: the pass failed")
        await asyncio.sleep(interval_seconds)
