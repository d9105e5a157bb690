"""The member's own state: settings (mute, archive, pin) and own unread start."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from ..db import Database, Row
from ..errors import BadUserInput, conversation_not_found
from ..events.types import MembershipUpdated
from ..store import membership, outbox, reads


@dataclass(frozen=True, slots=True)
class SettingsChange:
    """What updateMembership asks for; None: leave as is."""

    muted: bool | None = None
    muted_until: datetime | None = None
    archived: bool | None = None
    keep_archived: bool | None = None
    pinned: bool | None = None
    private_receipts: bool | None = None

    def empty(self) -> bool:
        return all(getattr(self, name) is None for name in self.__slots__)


def check_settings(change: SettingsChange) -> SettingsChange:
    """mutedUntil implies muted (muted: false with a mutedUntil is BAD_USER_INPUT) and must be in
    the future; keepArchived: false with archived: true is the default, keepArchived: true with
    archived: false contradicts it."""
    muted = change.muted
    if change.muted_until is not None:
        if muted is False:
            raise BadUserInput("mutedUntil goes with muted: true (or no muted)")
        if change.muted_until.tzinfo is None:
            raise BadUserInput("mutedUntil must carry a time zone")
        if change.muted_until <= datetime.now(UTC):
            raise BadUserInput("mutedUntil must be in the future")
        muted = True
    if change.keep_archived and change.archived is False:
        raise BadUserInput("keepArchived: true goes with archived: true (or no archived)")
    return SettingsChange(
        muted, change.muted_until, change.archived, change.keep_archived, change.pinned, change.private_receipts
    )


def own_event(conversation_id: int, user_id: str, row: Row) -> MembershipUpdated:
    """The membership.updated event of a member's row (store.conversations.VIEWER_COLUMNS)."""
    return MembershipUpdated(
        conversation_id=conversation_id,
        user_id=user_id,
        muted=row["muted"],
        archived=row["archived"],
        pinned=row["pinned_at"] is not None,
        last_read_seq=row["own_read"],
    )


async def do_update_membership(
    database: Database, viewer_id: str, conversation_id: int, change: SettingsChange
) -> None:
    """Change the viewer's own settings of a conversation they are in (NOT_FOUND otherwise), and
    tell the viewer's devices (membership.updated, for the viewer only). Nothing asked: nothing
    written. One statement for the row, one for the event, one transaction."""
    change = check_settings(change)
    if change.empty():
        async with database.connection() as conn:
            if not await membership.is_member(conn, conversation_id, viewer_id):
                raise conversation_not_found(conversation_id)
        return
    async with database.transaction() as conn:
        row = await membership.update_settings_txn(
            conn,
            conversation_id,
            viewer_id,
            muted=change.muted,
            muted_until=change.muted_until,
            archived=change.archived,
            keep_archived=change.keep_archived,
            pinned=change.pinned,
            private_receipts=change.private_receipts,
        )
        if row is None:
            raise conversation_not_found(conversation_id)
        await outbox.append(conn, [own_event(conversation_id, viewer_id, row).outbox_row()])
        database.events_written(conn)


async def do_mark_unread(database: Database, viewer_id: str, conversation_id: int, from_seq: int) -> Row:
    """The viewer's own unread starts again at from_seq (1..lastSeq, else BAD_USER_INPUT); it never
    makes anything read (a from_seq past the viewer's own read position changes nothing). What
    others see (the watermark behind seen / seenBy) does not move. The viewer's devices are told
    (membership.updated). Returns the viewer's row (store.conversations.VIEWER_COLUMNS)."""
    if from_seq < 1:
        raise BadUserInput("fromSeq must be at least 1")
    async with database.transaction() as conn:
        row = await membership.mark_unread_txn(conn, conversation_id, viewer_id, from_seq)
        if row is None:
            current = await reads.watermark(conn, conversation_id, viewer_id)
            if current is None:
                raise conversation_not_found(conversation_id)
            raise BadUserInput(f"fromSeq must be at most lastSeq ({current.last_seq})")
        await outbox.append(conn, [own_event(conversation_id, viewer_id, row).outbox_row()])
        database.events_written(conn)
        return row


async def raise_own_read(database: Database, viewer_id: str, conversation_id: int, seq: int) -> Row | None:
    """markRead's part during a markUnread rewind, or with private receipts (services/reads.py): the own
    read position rises to min(seq, lastSeq), ending a rewind at the watermark, and the viewer's devices
    are told. Returns the member's read state after it, risen or not (another device may have raised it
    meanwhile): (last_read_seq, last_seq, own_read, unread_deleted); None when no longer a member."""
    async with database.transaction() as conn:
        row = await membership.raise_own_read_txn(conn, conversation_id, viewer_id, seq)
        if row is None:
            return await reads.watermark(conn, conversation_id, viewer_id)
        await outbox.append(conn, [own_event(conversation_id, viewer_id, row).outbox_row()])
        database.events_written(conn)
        return row


async def do_set_private_receipts(database: Database, viewer_id: str, private: bool) -> None:
    """The viewer's default for private read receipts, applied to every conversation where they did not
    choose otherwise (updateMembership(privateReceipts:)). One transaction."""
    async with database.transaction() as conn:
        await membership.set_private_receipts(conn, viewer_id, private)


async def private_receipts_of(database: Database, user_id: str) -> bool:
    async with database.connection() as conn:
        return (await membership.private_receipts(conn, [user_id])).get(user_id, False)
