"""Blocking another user: no direct conversation between the two is created or written in, and
neither adds the other to a group (docs/guide/moderation.md)."""

from __future__ import annotations

from collections.abc import Sequence

from ..db import Connection, Database, Row
from ..errors import BadUserInput, blocked
from ..events.types import BlockChanged
from ..store import blocks, outbox


def _pair(a: str, b: str) -> tuple[str, str]:
    low, high = sorted((a, b))
    return low, high


async def do_set_block(database: Database, viewer_id: str, other_id: str, block: bool) -> bool:
    """The viewer blocks (block=True) or unblocks other_id; idempotent. Returns whether anything changed
    (a block.changed event for the viewer's devices is written only then).

    Under the pair's lock and the lock of their direct conversation's row (if they have one), so a
    send to it, or its creation, either committed before the block or sees it."""
    if other_id == viewer_id:
        raise BadUserInput("a user cannot block themselves")
    async with database.transaction() as conn:
        await blocks.lock_pair_txn(conn, *_pair(viewer_id, other_id))
        await blocks.lock_direct_txn(conn, *_pair(viewer_id, other_id))
        if block:
            changed = await blocks.insert(conn, viewer_id, other_id)
        else:
            changed = await blocks.delete(conn, viewer_id, other_id)
        if changed:
            event = BlockChanged(user_id=viewer_id, other_id=other_id, blocked=block)
            await outbox.append(conn, [event.outbox_row()])
            database.events_written(conn)
    return changed


async def check_not_blocked_txn(conn: Connection, user_id: str, others: Sequence[str]) -> None:
    """FORBIDDEN (reason BLOCKED) when any of others has a block with user_id, either way."""
    if others and await blocks.blocked_either_way(conn, user_id, others):
        raise blocked()


async def check_direct_allowed_txn(conn: Connection, viewer_id: str, other_id: str) -> None:
    """Inside the transaction that creates the pair's direct conversation: the pair's lock, then no block."""
    await blocks.lock_pair_txn(conn, *_pair(viewer_id, other_id))
    await check_not_blocked_txn(conn, viewer_id, [other_id])


async def blocked_page(database: Database, viewer_id: str, after: str, limit: int) -> list[Row]:
    """The users the viewer blocked: (blocked_id, created_at), by id ascending after `after`."""
    async with database.connection() as conn:
        return await blocks.page(conn, viewer_id, after, limit)


async def blocked_among(database: Database, viewer_id: str, user_ids: Sequence[str]) -> set[str]:
    """Those of user_ids the viewer blocked."""
    async with database.connection() as conn:
        return await blocks.blocked_by(conn, viewer_id, user_ids)
