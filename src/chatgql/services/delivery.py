"""Delivered receipts: a second monotonic, clamped watermark per member (read implies delivered).

Big groups (more members than CHATGQL_BIG_GROUP_THRESHOLD), as Sendbird does for supergroups:
the member's delivered watermark is still stored, but no delivery.updated event is written
(no fanout to thousands of members for every device that syncs), and deliveredCount is not
answered (null); `delivered` there is `seen`.
"""

from __future__ import annotations

from ..db import Database
from ..errors import BadUserInput, LimitExceeded, conversation_not_found
from ..events.types import DELIVERY_KEYS, DeliveryUpdated
from ..store import delivery
from .checks import check_seq
from .delivery_coalescing import DeliveredResult, DeliveryCoalescer


async def do_mark_delivered(
    database: Database,
    viewer_id: str,
    items: list[tuple[int, int]],
    *,
    whole_up_to: int,
    max_items: int,
    coalescer: DeliveryCoalescer | None = None,
) -> list[DeliveredResult]:
    """Raise the viewer's delivered watermark to min(seq, lastSeq) in each (conversation, seq), never
    lower; one statement for all of them, all or nothing: NOT_FOUND for a conversation the viewer is
    not in, and then nothing is written. A delivery.updated event per conversation that moved (not
    in big groups). With a coalescer, the call joins the process's next flush (delivery_coalescing.py:
    merged per (conversation, user) with the other calls, one write per flush), answered after it committed."""
    if len(items) > max_items:
        raise LimitExceeded(f"at most {max_items} conversations in one markDelivered")
    if len({cid for cid, _ in items}) != len(items):
        raise BadUserInput("each conversationId may appear once")
    for _, seq in items:
        check_seq(seq)
    if not items:
        return []
    cids = [cid for cid, _ in items]
    events = [DeliveryUpdated(conversation_id=cid, user_id=viewer_id).payload() for cid in cids]
    if coalescer is not None:
        return await coalescer.mark_delivered(viewer_id, list(items), events)
    async with database.transaction() as conn:
        rows = await delivery.advance_delivered(
            conn, viewer_id, cids, [seq for _, seq in items], events, whole_up_to, DELIVERY_KEYS
        )
        found = {row["conversation_id"]: row for row in rows}
        for cid in cids:
            if cid not in found:
                raise conversation_not_found(cid)  # rolls the others back
        if any(row["moved"] and row["member_count"] <= whole_up_to for row in rows):
            database.events_written(conn)
    return [
        DeliveredResult(
            conversation_id=cid,
            delivered_seq=found[cid]["delivered_seq"],
            last_seq=max(found[cid]["last_seq"], found[cid]["delivered_seq"]),
            advanced=found[cid]["moved"],
        )
        for cid in cids
    ]
