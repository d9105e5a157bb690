"""Disappearing messages: a conversation's time to live (message_ttl_seconds, 0: off).

Who sets it: in a group its OWNER or an ADMIN (anyone else FORBIDDEN, reason NOT_GROUP_ADMIN, as for
slow mode); in a direct chat either member. The members are told (conversationUpdated,
SETTINGS_CHANGED). Each message sent while it is on expires its time to live after its createdAt
(chat_send writes message_expiry); a later change of the setting leaves the expiries written as they
are. At its time the scheduler (services/scheduler.py) makes the message a tombstone through the one
delete path (changes.tombstone_txn: content erased, unread fixed, a change seq, a message.deleted
event with reason EXPIRED) in the claim's transaction, which deletes the expiry: once, whatever
crashes. A message deleted before its time is left as it is.
"""

from __future__ import annotations

from datetime import datetime

from ..db import Connection, Database, Row
from ..errors import BadUserInput, Forbidden, conversation_not_found
from ..store import changes, conversations, disappearing
from .changes import tombstone_txn
from .groups import MANAGERS
from .moderation import settings_changed_txn
from .scheduler import DueSource, register

EXPIRED = "EXPIRED"  # the reason of the change that erases an expired message (MessageChange.reason)
MIN_TTL_SECONDS = 5
MAX_TTL_SECONDS = 366 * 86400


def check_ttl(seconds: int) -> int:
    if seconds != 0 and not MIN_TTL_SECONDS <= seconds <= MAX_TTL_SECONDS:
        raise BadUserInput(f"seconds must be 0 (off) or {MIN_TTL_SECONDS} to {MAX_TTL_SECONDS}")
    return seconds


async def do_set_message_ttl(database: Database, viewer_id: str, conversation_id: int, seconds: int) -> None:
    """Set the conversation's time to live (who may: the module's docstring); the members are told
    (conversationUpdated, SETTINGS_CHANGED) when it changed."""
    check_ttl(seconds)
    async with database.transaction() as conn:
        conv = await conversations.lock_for_member_txn(conn, conversation_id, viewer_id)
        if conv is None or conv.role is None:
            raise conversation_not_found(conversation_id)
        if conv.type == "GROUP" and conv.role not in MANAGERS:
            raise Forbidden("only the OWNER or an ADMIN may change a group's settings", reason="NOT_GROUP_ADMIN")
        if not await disappearing.set_ttl_txn(conn, conversation_id, seconds):
            return
        await settings_changed_txn(database, conn, conversation_id, viewer_id, conv)


async def fire_expiry(database: Database, conn: Connection, row: Row, now: datetime) -> None:
    """Erase an expired message (a tombstone, unless it is one already), in the claim's transaction,
    and delete its expiry. The conversation is locked after the expiry row, as no other writer locks
    them the other way round (chat_send inserts expiries under the conversation's lock, new rows only)."""
    cid, seq = row["conversation_id"], row["seq"]
    if await changes.lock_conversation_txn(conn, cid) is not None:
        await tombstone_txn(database, conn, cid, [seq], None, EXPIRED)
    await disappearing.done_txn(conn, cid, seq)


SOURCE = register(DueSource("message_expiry", disappearing.claim_due_txn, fire_expiry, disappearing.next_due))
