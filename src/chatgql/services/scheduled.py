"""Scheduled messages: a member writes a message now to be sent at send_at.

Until then it is PENDING, and its sender lists, edits (body, send_at) or cancels it. At send_at the
scheduler (services/scheduler.py) claims it and sends it in the claim's transaction, as an ordinary
message: chat_send, with the sender's clientMsgId, takes the conversation's next seq then (seq order
stays send order), so it is sent once (SENT, with its seq) whatever crashes. A send chat_send refuses
leaves it FAILED with the reason: the sender is no longer a member (NOT_A_MEMBER: left, removed or
banned from the group), is banned app-wide (BANNED), a block stands between the two members of a
direct chat (BLOCKED), slow mode (SLOW_MODE), or the clientMsgId holds another message (CONFLICT).
An edit or cancel waits while the scheduler fires the row, then finds it sent: CONFLICT.

The before-send hook (services/beforesend.py), when configured, is asked when the message is scheduled
and when its body is edited, as sendMessage asks it (its verdict kept by clientMsgId): a rejection
refuses the call and stores nothing, a rewrite is what is scheduled and later sent. It is not asked
again at the time of sending (the scheduler sends inside its transaction, with no network call).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from ..db import Connection, Database, Row
from ..errors import BadUserInput, Conflict, LimitExceeded, NotFound, conversation_not_found
from ..events.types import MESSAGE_KEYS, READ_KEYS, MessageNew, ReadUpdated
from ..store import conversations, messages, scheduled, verdicts
from ..store import scheduler as wakeup
from ..store.scheduled import CANCELED, FAILED, PENDING, SENT
from .beforesend import (
    REJECT,
    REWRITE,
    REWRITTEN,
    BeforeSendHook,
    VerdictTaken,
    decide,
    digest_of,
    keep_decision_txn,
    rejected,
)
from .scheduler import DueSource, register

MAX_PENDING_PER_CONVERSATION = 100  # a sender's PENDING scheduled messages in one conversation
MAX_AHEAD = timedelta(days=366)
STATES = (PENDING, SENT, CANCELED, FAILED)
# chat_send's refusals, as the failure a FAILED row keeps, and the contract code each is told with
FAILURES = {"not_found": "NOT_A_MEMBER", "banned": "BANNED", "blocked": "BLOCKED", "slow_mode": "SLOW_MODE"}
CONFLICT = "CONFLICT"
FAILURE_CODES = {
    "NOT_A_MEMBER": "NOT_FOUND",
    "BANNED": "FORBIDDEN",
    "BLOCKED": "FORBIDDEN",
    "SLOW_MODE": "LIMIT_EXCEEDED",
    CONFLICT: "CONFLICT",
}


@dataclass(frozen=True, slots=True)
class Scheduled:
    row: Row  # store.scheduled.COLUMNS
    duplicate: bool = False  # a retry of scheduleMessage: the row as it is


def check_send_at(send_at: datetime, now: datetime) -> datetime:
    if send_at.tzinfo is None:
        raise BadUserInput("sendAt must name its time zone (an offset or Z)")
    if send_at <= now:
        raise BadUserInput("sendAt must be in the future", reason="SEND_AT_IN_THE_PAST")
    if send_at > now + MAX_AHEAD:
        raise BadUserInput(f"sendAt must be at most {MAX_AHEAD.days} days ahead", reason="SEND_AT_TOO_FAR")
    return send_at


def not_found(id_: int) -> NotFound:
    return NotFound(f"scheduled message {id_} not found")


async def do_schedule_message(
    database: Database,
    sender_id: str,
    conversation_id: int,
    client_msg_id: UUID,
    body: str,
    send_at: datetime,
    *,
    now: datetime,
    hook: BeforeSendHook | None = None,
) -> Scheduled:
    """A member schedules a message (body validated already). Idempotent on clientMsgId: a retry with
    the same body (as written, when the hook rewrote it) and sendAt answers the row as it is now
    (duplicate); anything else reusing it, or a clientMsgId a sent message holds, is CONFLICT. A
    non-member: NOT_FOUND. hook: asked first (the module's docstring)."""
    check_send_at(send_at, now)
    async with database.connection() as conn:
        prior = await scheduled.by_client_msg_id(conn, conversation_id, client_msg_id)
        if prior is not None:
            return Scheduled(await _retried(conn, prior, sender_id, body, send_at), duplicate=True)
    decision = None if hook is None else await decide(database, hook, sender_id, conversation_id, client_msg_id, body)
    async with database.transaction() as conn:
        if decision is not None and decision.asked:
            try:
                await keep_decision_txn(conn, conversation_id, client_msg_id, sender_id, decision)
            except VerdictTaken:  # a concurrent call with this clientMsgId was decided first
                raise _concurrent(conversation_id) from None
            body = decision.body
        conv = await conversations.lock_for_member_txn(conn, conversation_id, sender_id)
        if conv is None or conv.role is None:
            raise conversation_not_found(conversation_id)
        if await scheduled.message_with_client_msg_id(conn, conversation_id, client_msg_id):
            raise _reused(conversation_id, client_msg_id)
        if await scheduled.pending_count(conn, conversation_id, sender_id) >= MAX_PENDING_PER_CONVERSATION:
            raise LimitExceeded(
                f"at most {MAX_PENDING_PER_CONVERSATION} scheduled messages per conversation",
                reason="SCHEDULED_PER_CONVERSATION",
            )
        row = await scheduled.insert_txn(conn, conversation_id, sender_id, client_msg_id, body, send_at, now)
        if row is None:  # a concurrent schedule of the same clientMsgId committed first
            raise _concurrent(conversation_id)
        await wakeup.notify_txn(conn)
    return Scheduled(row)


async def _retried(conn: Connection, prior: Row, sender_id: str, body: str, send_at: datetime) -> Row:
    """The scheduled message a retry of scheduleMessage names; CONFLICT when it is not the same."""
    same = prior["sender_id"] == sender_id and prior["send_at"] == send_at
    if same and prior["body"] != body:  # the hook rewrote it: the retry carries the body as written
        verdict = await verdicts.prior(conn, prior["conversation_id"], prior["client_msg_id"], sender_id)
        same = verdict["verdict"] == REWRITTEN and verdict["body_sha256"] == digest_of(body)
    if not same:
        raise _reused(prior["conversation_id"], prior["client_msg_id"])
    return prior


def _concurrent(conversation_id: int) -> Conflict:
    return Conflict("clientMsgId is being scheduled concurrently; retry", conversationId=str(conversation_id))


def _reused(conversation_id: int, client_msg_id: UUID) -> Conflict:
    return Conflict(
        "clientMsgId was already used for another message in this conversation",
        conversationId=str(conversation_id),
        clientMsgId=str(client_msg_id),
    )


async def _pending_txn(conn: Connection, sender_id: str, conversation_id: int, id_: int) -> Row:
    row = await scheduled.lock_txn(conn, conversation_id, id_, sender_id)
    if row is None:
        raise not_found(id_)
    if row["state"] != PENDING:
        raise Conflict(f"the scheduled message is {row['state']} already", reason="NOT_PENDING", state=row["state"])
    return row


async def do_edit_scheduled(
    database: Database,
    sender_id: str,
    conversation_id: int,
    id_: int,
    *,
    body: str | None,
    send_at: datetime | None,
    now: datetime,
    hook: BeforeSendHook | None = None,
) -> Row:
    """The sender changes a PENDING scheduled message's body and/or sendAt. Another's, or none:
    NOT_FOUND; sent, failed or canceled already: CONFLICT (reason NOT_PENDING). hook: asked about a
    new body first (its rejection refuses the edit; its rewrite is the body kept)."""
    if send_at is not None:
        check_send_at(send_at, now)
    if body is not None and hook is not None:
        async with database.connection() as conn:
            found = [r for r in await scheduled.by_ids(conn, [(conversation_id, id_)]) if r["sender_id"] == sender_id]
        if not found:
            raise not_found(id_)
        verdict = await hook.ask(conversation_id, sender_id, found[0]["client_msg_id"], body)
        if verdict.action == REJECT:
            raise rejected(verdict.reason)
        if verdict.action == REWRITE and verdict.body is not None:
            body = verdict.body
    async with database.transaction() as conn:
        row = await _pending_txn(conn, sender_id, conversation_id, id_)
        new_at = row["send_at"] if send_at is None else send_at
        row = await scheduled.update_txn(
            conn, conversation_id, id_, row["body"] if body is None else body, new_at, PENDING, None
        )
        await wakeup.notify_txn(conn)
    return row


async def do_cancel_scheduled(
    database: Database, sender_id: str, conversation_id: int, id_: int, *, now: datetime
) -> Row:
    """The sender cancels a PENDING scheduled message (CANCELED: never sent). Canceled already: the row
    as it is; sent or failed: CONFLICT (reason NOT_PENDING); another's, or none: NOT_FOUND."""
    async with database.transaction() as conn:
        row = await scheduled.lock_txn(conn, conversation_id, id_, sender_id)
        if row is not None and row["state"] == CANCELED:
            return row
        row = await _pending_txn(conn, sender_id, conversation_id, id_)
        return await scheduled.update_txn(conn, conversation_id, id_, row["body"], row["send_at"], CANCELED, now)


async def read_scheduled(
    database: Database, viewer_id: str, conversation_id: int | None, states: list[str], limit: int
) -> list[Row]:
    """The viewer's own scheduled messages in these states, soonest first (nobody reads another's)."""
    async with database.connection() as conn:
        return await scheduled.of_sender(conn, viewer_id, conversation_id, states, limit)


async def fire_scheduled(database: Database, conn: Connection, row: Row, now: datetime) -> None:
    """Send a claimed scheduled message, in the claim's transaction, and mark it SENT or FAILED."""
    cid, sender = row["conversation_id"], row["sender_id"]
    message_event = MessageNew(
        conversation_id=cid, sender_id=sender, client_msg_id=row["client_msg_id"], body=row["body"]
    ).payload()
    read_event = ReadUpdated(conversation_id=cid, user_id=sender).payload()
    sent = await messages.send(
        conn,
        conversation_id=cid,
        sender_id=sender,
        client_msg_id=row["client_msg_id"],
        body=row["body"],
        message_event=message_event,
        read_event=read_event,
        message_keys=MESSAGE_KEYS,
        read_keys=READ_KEYS,
    )
    outcome = sent["outcome"]
    if outcome in ("stored", "duplicate"):
        await scheduled.finish_txn(conn, cid, row["id"], SENT, now, sent["seq"], None)
        if outcome == "stored":
            database.events_written(conn)
        return
    failure = FAILURES.get(outcome, CONFLICT)
    await scheduled.finish_txn(conn, cid, row["id"], FAILED, now, None, failure)


SOURCE = register(DueSource("scheduled_message", scheduled.claim_due_txn, fire_scheduled, scheduled.next_due))
