"""The operator's moderation (docs/guide/moderation.md): reports listed and resolved with an action, bans
app-wide and from one conversation, each action audited (who, when, why) in its own transaction.

Reached from the command line (`chatgql reports`, `chatgql ban`: server/cli.py) with the database's
credentials, and from the operator's API (graphql/operator.py) with the operator's token, never through
the public API: no end-user token can act as the operator."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..db import Connection, Database, Row
from ..errors import BadUserInput, Conflict, NotFound
from ..events.types import MemberRemoved, UserBanned, UserUnbanned
from ..store import app_bans, bans, changes, conversations, messages, outbox, reports
from .changes import tombstone_txn

DISMISS, DELETE_MESSAGE, BAN_FROM_CONVERSATION, BAN_APP = (
    "DISMISS",
    "DELETE_MESSAGE",
    "BAN_FROM_CONVERSATION",
    "BAN_APP",
)
ACTIONS = (DISMISS, DELETE_MESSAGE, BAN_FROM_CONVERSATION, BAN_APP)
UNBAN_APP = "UNBAN_APP"
MODERATION = "MODERATION"  # the reason of the operator's delete (MessageChange.reason)
OWNER = "OWNER"
OPEN, RESOLVED = "OPEN", "RESOLVED"


@dataclass(frozen=True, slots=True)
class ReportFilter:
    status: str | None = None  # OPEN, RESOLVED, or None: both
    conversation_id: int | None = None
    user_id: str | None = None  # the reported user


def _check_reason(reason: str) -> str:
    reason = reason.strip()
    if not reason:
        raise BadUserInput("every moderation action needs a reason (it is audited)")
    return reason


async def list_reports(database: Database, wanted: ReportFilter, after_id: int = 0, limit: int = 100) -> list[Row]:
    """Reports by id ascending after after_id, filtered."""
    if wanted.status not in (None, OPEN, RESOLVED):
        raise BadUserInput("status must be OPEN or RESOLVED")
    open_only = None if wanted.status is None else wanted.status == OPEN
    async with database.connection() as conn:
        return await reports.page(
            conn,
            open_only=open_only,
            conversation_id=wanted.conversation_id,
            user_id=wanted.user_id,
            after_id=after_id,
            limit=limit,
        )


async def audit_log(database: Database, after_id: int = 0, limit: int = 100) -> list[Row]:
    async with database.connection() as conn:
        return await reports.audit_page(conn, after_id, limit)


async def do_resolve_report(
    database: Database, operator: str, report_id: int, action: str, reason: str, *, until: datetime | None = None
) -> Row:
    """Resolve an open report with an action (ACTIONS), in one transaction with the action and its audit row.
    DELETE_MESSAGE tombstones the reported message as deleteMessage does (deletedBy null, reason MODERATION);
    BAN_FROM_CONVERSATION removes the reported user from its conversation until `until` (None: until lifted);
    BAN_APP bans them app-wide until `until`. A report of a user erased since loses its evidence."""
    if action not in ACTIONS:
        raise BadUserInput(f"action must be one of {', '.join(ACTIONS)}")
    reason = _check_reason(reason)
    async with database.transaction() as conn:
        report = await reports.lock_txn(conn, report_id)
        if report is None:
            raise NotFound(f"report {report_id} not found")
        if report["resolved_at"] is not None:
            raise Conflict(f"report {report_id} was resolved already", reason="ALREADY_RESOLVED")
        cid, seq, user_id = report["conversation_id"], report["seq"], report["reported_user_id"]
        erased = seq > 0 and await _erased_txn(conn, cid, seq)
        if action == DELETE_MESSAGE:
            if seq == 0:
                raise BadUserInput("a report of a user has no message to delete")
            await changes.lock_conversation_txn(conn, cid)
            await tombstone_txn(database, conn, cid, [seq], None, MODERATION)
        elif action == BAN_FROM_CONVERSATION:
            if cid == 0:
                raise BadUserInput("a report of a user names no conversation: ban them app-wide")
            await _ban_from_conversation_txn(database, conn, cid, user_id, until, operator, reason)
        elif action == BAN_APP:
            await _ban_user_txn(database, conn, user_id, until, operator, reason)
        resolved = await reports.resolve_txn(conn, report_id, operator, action, reason, blank=erased)
        await reports.audit_txn(
            conn,
            operator,
            action,
            reason,
            report_id=report_id,
            user_id=user_id,
            conversation_id=cid or None,
            seq=seq or None,
            until=until,
        )
        return resolved


async def _erased_txn(conn: Connection, conversation_id: int, seq: int) -> bool:
    """Whether the operator erased the message (a tombstone deleted by nobody: erase-user or retention)."""
    found = await messages.by_keys(conn, [(conversation_id, seq)])
    return bool(found) and found[0]["deleted_at"] is not None and found[0]["deleted_by"] is None


async def do_ban_user(database: Database, operator: str, user_id: str, until: datetime | None, reason: str) -> None:
    """Ban user_id app-wide until `until` (None: until lifted); banning again replaces the ban's end and reason."""
    reason = _check_reason(reason)
    async with database.transaction() as conn:
        await _ban_user_txn(database, conn, user_id, until, operator, reason)
        await reports.audit_txn(conn, operator, BAN_APP, reason, user_id=user_id, until=until)


async def do_unban_user(database: Database, operator: str, user_id: str, reason: str) -> bool:
    """Lift user_id's app-wide ban; False when there was none."""
    reason = _check_reason(reason)
    async with database.transaction() as conn:
        lifted = await app_bans.delete_user_ban(conn, user_id)
        if lifted:
            await reports.audit_txn(conn, operator, UNBAN_APP, reason, user_id=user_id)
            await outbox.append(conn, [UserUnbanned(user_id=user_id).outbox_row()])
            database.events_written(conn)
        return lifted


async def do_ban_from_conversation(
    database: Database, operator: str, conversation_id: int, user_id: str, until: datetime | None, reason: str
) -> None:
    """Remove user_id from a group and keep them out until `until` (None: until lifted)."""
    reason = _check_reason(reason)
    async with database.transaction() as conn:
        await _ban_from_conversation_txn(database, conn, conversation_id, user_id, until, operator, reason)
        await reports.audit_txn(
            conn, operator, BAN_FROM_CONVERSATION, reason, user_id=user_id, conversation_id=conversation_id, until=until
        )


async def active_bans(database: Database) -> list[Row]:
    """(user_id, until) of every app-wide ban in force (the processes' ban lists load them)."""
    async with database.connection() as conn:
        return await app_bans.active_user_bans(conn)


async def _ban_user_txn(
    database: Database, conn: Connection, user_id: str, until: datetime | None, operator: str, reason: str
) -> None:
    """Under the user's ban lock: every send of theirs in progress commits first, none after this commits."""
    await app_bans.lock_user_txn(conn, user_id)
    await app_bans.upsert_user_ban(conn, user_id, until, operator, reason)
    await outbox.append(conn, [UserBanned(user_id=user_id, until=until).outbox_row()])
    database.events_written(conn)


async def _ban_from_conversation_txn(
    database: Database,
    conn: Connection,
    conversation_id: int,
    user_id: str,
    until: datetime | None,
    operator: str,
    reason: str,
) -> None:
    conv = await conversations.lock_for_member_txn(conn, conversation_id, user_id)
    if conv is None:
        raise NotFound(f"conversation {conversation_id} not found", conversationId=str(conversation_id))
    if conv.type != "GROUP":
        raise BadUserInput("a direct conversation has no bans: the users block each other, or ban the user app-wide")
    await bans.ban_txn(conn, conversation_id, user_id, until, operator, reason)
    if conv.role is None:
        return
    removed = await conversations.delete_member(conn, conversation_id, user_id)
    if removed == OWNER:
        await conversations.promote_if_ownerless(conn, conversation_id)
    await outbox.append(conn, [MemberRemoved(conversation_id=conversation_id, user_id=user_id).outbox_row()])
    database.events_written(conn)
