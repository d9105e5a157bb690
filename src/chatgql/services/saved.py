"""Saved messages and reminders: a member saves a message of a conversation they read, optionally to be
reminded at a time; their paginated list; and the reminder, fired once at its time.

The rows are the user's own state (store/saved.py). Each change of them (a save, an unsave, a reminder
fired) takes the user's next saved version in its transaction, with its event in the outbox for all of
the user's devices (SavedChanged, ReminderDue: OWN events): a device holds the highest version it saw and
reads what changed after it (read_changes), then follows the events. `now` is the caller's clock (the
API's Deps.clock, the scheduler's), so the tests control the time. A reminder is a source of the durable
scheduler (services/scheduler.py): its due row is claimed FOR UPDATE SKIP LOCKED and fired in that
transaction, which marks it reminded, so it fires once across crashes and processes. A message the user
no longer reads (deleted, left, banned) leaves the list, and its reminder is marked done with no event.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime

from ..db import Connection, Database, Row
from ..errors import BadUserInput, Conflict, NotFound
from ..events.types import ReminderDue, SavedChanged
from ..store import messages, outbox, saved
from ..store import scheduler as wakeup
from .checks import check_seq
from .scheduler import DueSource, register

MAX_SAVED_PAGE = 100
MAX_CHANGES_PAGE = 500


@dataclass(frozen=True, slots=True)
class SaveResult:
    saved: Row | None  # the row after the call (store.saved.SAVED_COLUMNS); None: not saved
    message: Row | None  # the message as it is now (None: the viewer does not read it)
    changed: bool


@dataclass(frozen=True, slots=True)
class SavedPage:
    rows: list[Row]  # saved columns and message columns
    has_next: bool
    version: int


@dataclass(frozen=True, slots=True)
class SavedChangesPage:
    rows: list[Row]  # saved columns, live, message columns (null unless live)
    has_more: bool
    version: int


async def do_save(
    database: Database,
    viewer_id: str,
    conversation_id: int,
    seq: int,
    *,
    now: datetime,
    remind_at: datetime | None = None,
) -> SaveResult:
    """Save the message (again: its reminder replaced), to be reminded at remind_at (None: never). A message
    the viewer does not read (not a member, hidden history, none at seq): NOT_FOUND; a deleted one: CONFLICT
    (MESSAGE_DELETED); remind_at not after now: BAD_USER_INPUT (REMIND_AT_IN_THE_PAST)."""
    check_seq(seq)
    if remind_at is not None and remind_at <= now:
        raise BadUserInput("remindAt must be in the future", reason="REMIND_AT_IN_THE_PAST")
    async with database.transaction() as conn:
        message = await messages.readable_txn(conn, viewer_id, conversation_id, seq)
        if message is None:
            raise NotFound(f"message {seq} not found in conversation {conversation_id}")
        if message["deleted_at"] is not None:
            raise Conflict("the message is deleted", reason="MESSAGE_DELETED", conversationId=str(conversation_id))
        await saved.lock_txn(conn, viewer_id, conversation_id, seq)
        row = await saved.save_txn(conn, viewer_id, conversation_id, seq, now, remind_at)
        await _told_txn(database, conn, viewer_id, row, saved=True)
        if remind_at is not None:
            await wakeup.notify_txn(conn)  # the schedulers look again once this commits
    return SaveResult(row, message, changed=True)


async def do_unsave(database: Database, viewer_id: str, conversation_id: int, seq: int) -> SaveResult:
    """Unsave the message (its reminder with it). One that is not saved changes nothing (changed False)."""
    check_seq(seq)
    async with database.transaction() as conn:
        message = await messages.readable_txn(conn, viewer_id, conversation_id, seq)
        row = await saved.lock_txn(conn, viewer_id, conversation_id, seq)
        if row is None or row["removed"]:
            if message is None:  # neither saved nor readable: as if there were none
                raise NotFound(f"message {seq} not found in conversation {conversation_id}")
            return SaveResult(None, message, changed=False)
        row = await saved.unsave_txn(conn, viewer_id, conversation_id, seq)
        await _told_txn(database, conn, viewer_id, row, saved=False)
    return SaveResult(None, message, changed=True)


async def _told_txn(database: Database, conn: Connection, viewer_id: str, row: Row, *, saved: bool) -> None:
    event = SavedChanged(
        conversation_id=row["conversation_id"],
        user_id=viewer_id,
        seq=row["seq"],
        version=row["version"],
        saved=saved,
        saved_at=row["saved_at"] if saved else None,
        remind_at=row["remind_at"],
    )
    await outbox.append(conn, [event.outbox_row()])
    database.events_written(conn)


def encode_cursor(row: Row) -> str:
    text = f"{row['saved_at'].isoformat()}|{row['conversation_id']}|{row['seq']}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def check_cursor(cursor: str | None) -> tuple[datetime, int, int] | None:
    """A savedMessages cursor (an endCursor it gave), else BAD_USER_INPUT."""
    if cursor is None:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        at, cid, seq = text.split("|")
        when = datetime.fromisoformat(at)
        if when.tzinfo is None:
            raise ValueError(at)
        return when, int(cid), int(seq)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise BadUserInput("after must be an endCursor of savedMessages") from None


async def read_saved(database: Database, viewer_id: str, first: int, after: str | None) -> SavedPage:
    """The viewer's saved messages they still read, newest save first, first (1..MAX_SAVED_PAGE) after the
    cursor `after` (savedMessages' endCursor)."""
    if not 1 <= first <= MAX_SAVED_PAGE:
        raise BadUserInput(f"first must be between 1 and {MAX_SAVED_PAGE}")
    before = check_cursor(after)
    async with database.transaction() as conn:  # the page and its version: one snapshot
        rows = await saved.page(conn, viewer_id, before, first + 1)
        version = await saved.version(conn, viewer_id)
    return SavedPage(list(rows[:first]), len(rows) > first, version)


async def read_changes(database: Database, viewer_id: str, after_version: int, first: int) -> SavedChangesPage:
    """What changed of the viewer's saved rows after after_version (a version a device holds), in version
    order, at most first (1..MAX_CHANGES_PAGE)."""
    if after_version < 0:
        raise BadUserInput("afterVersion must not be negative")
    if not 1 <= first <= MAX_CHANGES_PAGE:
        raise BadUserInput(f"first must be between 1 and {MAX_CHANGES_PAGE}")
    async with database.transaction() as conn:
        rows = await saved.changes(conn, viewer_id, after_version, first + 1)
        version = await saved.version(conn, viewer_id)
    return SavedChangesPage(list(rows[:first]), len(rows) > first, version)


async def fire_reminder(database: Database, conn: Connection, row: Row, now: datetime) -> None:
    """A claimed due reminder (store.saved.claim_due_txn), in the claim's transaction: marked reminded at now,
    at the user's next version; its ReminderDue event for the user's devices (and webhooks) when the user
    still reads the message, else nothing told."""
    user_id, conversation_id, seq = row["user_id"], row["conversation_id"], row["seq"]
    done = await saved.mark_reminded_txn(conn, user_id, conversation_id, seq, now)
    if row["live"]:
        event = ReminderDue(
            conversation_id=conversation_id,
            user_id=user_id,
            seq=seq,
            version=done["version"],
            remind_at=row["remind_at"],
            reminded_at=now,
        )
        await outbox.append(conn, [event.outbox_row()])
        database.events_written(conn)


SOURCE = register(DueSource("reminder", saved.claim_due_txn, fire_reminder, saved.next_due))
