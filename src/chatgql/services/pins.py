"""Pinned messages: pinning and unpinning (a change each), and a conversation's pinned list.

Who may pin and unpin: in a DIRECT conversation either member; in a GROUP its OWNER and ADMINs
(a plain MEMBER: FORBIDDEN, reason PIN_NOT_ALLOWED). A pin may expire (expires_at, after `now`);
at most MAX_PINS live pins per conversation. `now` is the caller's clock (the API's Deps.clock),
so the tests control the time. A pin or an unpin takes the conversation's next change seq
(kinds PINNED, UNPINNED) in the one transaction that writes the pin, the change log row and the
outbox event; it never takes a message seq and never counts as unread. A deleted message leaves the
list with its delete (its DELETED change); an expired pin leaves it at expires_at, with no change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..db import Database, Row
from ..errors import BadUserInput, Conflict, Forbidden, LimitExceeded, conversation_not_found
from ..events.types import MessagePinned, MessageUnpinned
from ..store import changes, conversations, outbox, pins
from .changes import GROUP_ADMINS, change_event, message_not_found
from .checks import check_seq

MAX_PINS = 50  # live pins per conversation


@dataclass(frozen=True, slots=True)
class PinResult:
    message: Row  # the message as it is now (store.messages.MESSAGE_COLUMNS)
    pin: Row | None  # its pin after the call (pinned_by, pinned_at, expires_at); None: not pinned
    change_seq: int | None  # None: nothing changed


async def do_pin(
    database: Database,
    viewer_id: str,
    conversation_id: int,
    seq: int,
    *,
    pin: bool,
    now: datetime,
    expires_at: datetime | None = None,
) -> PinResult:
    """Pin the message until expires_at (None: until unpinned), or unpin it (pin=False).

    Pinning a pinned message with the same expiry, or unpinning one that is not pinned, changes
    nothing (no change seq, no event); pinning it with another expiry replaces its pin. A deleted
    message: CONFLICT (MESSAGE_DELETED); an expiry not after now: BAD_USER_INPUT; a new pin past
    MAX_PINS: LIMIT_EXCEEDED (PINS_PER_CONVERSATION)."""
    check_seq(seq)
    if pin and expires_at is not None and expires_at <= now:
        raise BadUserInput("expiresAt must be in the future", reason="EXPIRES_IN_THE_PAST")
    async with database.transaction() as conn:
        conv = await conversations.lock_for_member_txn(conn, conversation_id, viewer_id)
        if conv is None or conv.role is None:
            raise conversation_not_found(conversation_id)
        if conv.type == "GROUP" and conv.role not in GROUP_ADMINS:
            raise Forbidden("only a group's OWNER or an ADMIN may pin or unpin", reason="PIN_NOT_ALLOWED")
        # a message from before the viewer's join to a group that hid it: as if there were none
        message = await changes.lock_message_txn(conn, conversation_id, seq) if seq >= conv.visible_from_seq else None
        if message is None:
            raise message_not_found(conversation_id, seq)
        if message["deleted_at"] is not None:
            raise Conflict("the message is deleted", reason="MESSAGE_DELETED", conversationId=str(conversation_id))
        await pins.prune_txn(conn, conversation_id, now)  # what is left is live
        held = await pins.pin_of_txn(conn, conversation_id, seq)
        if pin:
            if held is not None and held["expires_at"] == expires_at:
                return PinResult(message, held, None)
            if held is None and await pins.count_txn(conn, conversation_id) >= MAX_PINS:
                raise LimitExceeded(
                    f"a conversation has at most {MAX_PINS} pinned messages", reason="PINS_PER_CONVERSATION"
                )
            kept = await pins.put_txn(conn, conversation_id, seq, viewer_id, now, expires_at)
        else:
            if held is None:
                return PinResult(message, None, None)
            await pins.unpin_txn(conn, conversation_id, seq)
            kept = None
        kind = MessagePinned if pin else MessageUnpinned
        change_seq = await changes.record_change_txn(conn, conversation_id, seq, kind.KIND, viewer_id)
        extra = {} if kept is None else {"pinned_at": kept["pinned_at"], "expires_at": kept["expires_at"]}
        event = change_event(kind, message, change_seq, viewer_id, **extra)
        await outbox.append(conn, [event.outbox_row()])
        database.events_written(conn)
    return PinResult(message, kept, change_seq)


async def read_pins(database: Database, viewer_id: str, conversation_id: int, now: datetime) -> list[Row]:
    """The conversation's live pins, newest first, each with its message (store.pins.pinned's rows);
    NOT_FOUND unless the viewer is a member. The pins of messages the viewer may not read (sent before they
    joined a group hiding its history) are left out."""
    async with database.connection() as conn:
        if not await conversations.member_rows(conn, [(conversation_id, viewer_id)]):
            raise conversation_not_found(conversation_id)
        return await pins.pinned(conn, conversation_id, now, viewer_id)
