"""Sending messages: idempotent on (conversation, clientMsgId), gap-free seq."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ..db import Database, Row
from ..errors import BadUserInput, Conflict, LimitExceeded, NotFound, banned, blocked, conversation_not_found
from ..events.types import MessageNew, ReadUpdated
from ..models import MessageRecord
from ..store import messages, threads
from .beforesend import BeforeSendHook, Decision, VerdictTaken, decide, keep_decision_txn
from .checks import Attachment
from .groupcommit import STORED, SendBatcher, SendItem, send_alone, send_item
from .mentions import mentions_txn
from .threads import reply_events_txn


@dataclass(frozen=True, slots=True)
class SendResult:
    message: MessageRecord | Row  # a duplicate: the stored row (store.messages.MESSAGE_COLUMNS)
    duplicate: bool


async def do_send_message(
    database: Database,
    sender_id: str,
    conversation_id: int,
    client_msg_id: UUID,
    body: str,
    *,
    batcher: SendBatcher | None = None,
    reply_to: int | None = None,
    thread_only: bool = False,
    attachments: Sequence[Attachment] = (),
    mentions: list[str] | None = None,
    mention_everyone: bool = False,
    hook: BeforeSendHook | None = None,
    guard: Decision | None = None,
    quote: tuple[int, int] | None = None,
    forwarded_from: tuple[int, int] | None = None,
) -> SendResult:
    """Store a message and its message.new event in one transaction (DESIGN.md, "Sending").

    The transaction is one statement (store.messages.send), committed before
    this returns: an answer means durably stored. A retry with the same
    clientMsgId, body and sender returns the stored message as it is now
    (duplicate=True), also when it was edited since (the retry carries the
    original body) or deleted (a tombstone: its body is erased, the same sender
    is enough); anything else reusing the clientMsgId is CONFLICT and writes nothing. In a group in
    slow mode, a MEMBER's send too soon after their previous one is LIMIT_EXCEEDED (reason SLOW_MODE,
    retryAfter) and writes nothing (chat_send decides, under the conversation's lock).
    The body must already be validated. With a batcher, the send may share
    its transaction with other sends to the conversation (group commit,
    services/groupcommit.py); the answer is the same. Once a stored message has
    committed, the relay is woken (database.events_written), however this was called.

    reply_to: the seq of an earlier message of the conversation this one quotes; the send and the
    quoted message's reply count are one transaction (never group-committed), and a seq with no
    earlier message is BAD_USER_INPUT with nothing written. thread_only: the reply is sent to its thread
    only (it counts in the thread's unread, not the conversation's). attachments (checked already:
    check_attachments) are written in the same transaction, never group-committed either.

    quote: the (conversation, seq) of a message this one quotes, of any conversation the sender reads
    (store.messages.readable_by_keys) and not deleted, else BAD_USER_INPUT (reason QUOTE_NOT_FOUND) with
    nothing written. forwarded_from: the (conversation, seq) whose attachments a forward copies
    (do_forward_message); the message is marked forwarded and keeps no key of it. Neither is group-committed.

    hook: the before-send hook (services/beforesend.py), asked first; its sends are never
    group-committed either. guard: the hook's decision, checked again in the send's transaction.
    """
    if hook is not None:
        return await _send_with_hook(
            database,
            hook,
            sender_id,
            conversation_id,
            client_msg_id,
            body,
            reply_to=reply_to,
            thread_only=thread_only,
            attachments=attachments,
            mentions=mentions,
            mention_everyone=mention_everyone,
            quote=quote,
            forwarded_from=forwarded_from,
        )
    quote_cid, quote_seq = quote if quote is not None else (None, None)
    message_event = MessageNew(
        conversation_id=conversation_id,
        sender_id=sender_id,
        client_msg_id=client_msg_id,
        body=body,
        reply_to_seq=reply_to,
        quote_conversation_id=quote_cid,
        quote_seq=quote_seq,
        forwarded=True if forwarded_from is not None else None,
    ).payload()
    read_event = ReadUpdated(conversation_id=conversation_id, user_id=sender_id).payload()
    item = SendItem(sender_id, client_msg_id, body, message_event, read_event)
    everyone = mention_everyone
    extras = _Extras(reply_to, thread_only, attachments, mentions or [], everyone, quote, forwarded_from)
    if extras.any() or guard is not None:  # not group-committed
        row = await _send_with_extras(database, conversation_id, item, extras, guard)
    elif batcher is None:
        row = await send_alone(database, conversation_id, item)
    else:
        row = await batcher.send(conversation_id, item)
    # Columns by key: a Row's attribute access is a Python __getattr__ (on every send).
    outcome = row["outcome"]
    if outcome == "not_found":
        raise conversation_not_found(conversation_id)
    if outcome == "blocked":
        raise blocked()
    if outcome == "banned":
        raise banned(None)
    if outcome == "slow_mode":  # seq: the whole seconds left to wait
        raise LimitExceeded(
            f"slow mode: the next message may be sent in {row['seq']} s",
            reason="SLOW_MODE",
            retryAfter=row["seq"],
        )
    if outcome == "conflict":
        raise Conflict(
            "clientMsgId was already used for another message in this conversation",
            conversationId=str(conversation_id),
            clientMsgId=str(client_msg_id),
        )
    if outcome == "duplicate":  # the acknowledged message, as it is now (edited or deleted since, maybe)
        async with database.connection() as conn:
            (now,) = await messages.by_keys(conn, [(conversation_id, row["seq"])])
        return SendResult(now, duplicate=True)
    stored = MessageRecord(
        conversation_id=conversation_id,
        seq=row["seq"],
        sender_id=row["sender_id"],
        client_msg_id=client_msg_id,
        body=row["body"],
        created_at=row["created_at"],
        reply_to_seq=reply_to,
        quote_conversation_id=quote_cid,
        quote_seq=quote_seq,
        forwarded=True if forwarded_from is not None else None,
    )
    return SendResult(stored, duplicate=False)


async def _send_with_hook(
    database: Database,
    hook: BeforeSendHook,
    sender_id: str,
    conversation_id: int,
    client_msg_id: UUID,
    body: str,
    **extras: Any,
) -> SendResult:
    """Ask the hook (services/beforesend.py), then send what it decided."""
    for _ in range(3):  # a concurrent retry of the clientMsgId was decided first: decide again from it
        try:
            decision = await decide(database, hook, sender_id, conversation_id, client_msg_id, body)
            if decision.duplicate_seq is not None:  # rewritten and stored: the message as it is now
                async with database.connection() as conn:
                    (now,) = await messages.by_keys(conn, [(conversation_id, decision.duplicate_seq)])
                return SendResult(now, duplicate=True)
            guard = decision if decision.asked else None
            return await do_send_message(
                database, sender_id, conversation_id, client_msg_id, decision.body, guard=guard, **extras
            )
        except VerdictTaken:
            continue
    raise Conflict("clientMsgId is being sent concurrently; retry", conversationId=str(conversation_id))


@dataclass(frozen=True, slots=True)
class _Extras:
    """What a send writes beside chat_send, in its transaction."""

    reply_to: int | None
    thread_only: bool
    attachments: Sequence[Attachment]
    mentioned: list[str]
    everyone: bool
    quote: tuple[int, int] | None
    forwarded_from: tuple[int, int] | None

    def any(self) -> bool:
        return bool(
            self.reply_to is not None
            or self.attachments
            or self.mentioned
            or self.everyone
            or self.quote is not None
            or self.forwarded_from is not None
        )


async def _send_with_extras(
    database: Database, conversation_id: int, item: SendItem, extras: _Extras, guard: Decision | None = None
) -> Row:
    """chat_send, the quoted message's count, the attachments, the mentions (members only, else
    BAD_USER_INPUT and nothing is stored), the quote and the forward's mark in one transaction; a retry
    (duplicate) writes nothing again and keeps the original's. guard: the before-send hook's decision, checked
    (and a rewrite kept) under the conversation's lock first; a send it does not store keeps nothing of it."""
    try:
        return await _extras_txn(database, conversation_id, item, extras, guard)
    except _NotStored as refused:
        return refused.row


class _NotStored(Exception):
    def __init__(self, row: Row) -> None:
        self.row = row


async def _extras_txn(
    database: Database, conversation_id: int, item: SendItem, extras: _Extras, guard: Decision | None
) -> Row:
    async with database.transaction() as conn:
        if guard is not None:
            await keep_decision_txn(conn, conversation_id, item.client_msg_id, item.sender_id, guard)
        row = await send_item(conn, conversation_id, item)
        if row.outcome != STORED and guard is not None:
            raise _NotStored(row)  # not a member, slow mode: the transaction rolls back, the verdict too
        if row.outcome == STORED:
            seq = row.seq
            if extras.attachments:
                await messages.insert_attachments_txn(conn, conversation_id, seq, extras.attachments)
            if extras.mentioned or extras.everyone:
                await mentions_txn(conn, conversation_id, seq, extras.mentioned, extras.everyone, item.sender_id)
            reply_to = extras.reply_to
            if reply_to is not None:
                if not await messages.set_reply_txn(conn, conversation_id, seq, reply_to):
                    raise BadUserInput(
                        f"replyTo: no message {reply_to} before this one in conversation {conversation_id}",
                        reason="REPLY_TO_NOT_FOUND",
                    )
                filed = await threads.add_reply_txn(
                    conn,
                    conversation_id,
                    seq,
                    reply_to,
                    item.sender_id,
                    thread_only=extras.thread_only,
                    mentioned=extras.mentioned,
                )
                await reply_events_txn(conn, conversation_id, filed["root_seq"])
            quote = extras.quote
            if quote is not None and not await messages.set_quote_txn(
                conn, conversation_id, seq, item.sender_id, *quote
            ):
                raise BadUserInput("quote: no message the sender reads at that id", reason="QUOTE_NOT_FOUND")
            if extras.forwarded_from is not None:
                await messages.set_forwarded_txn(conn, conversation_id, seq, extras.forwarded_from)
            database.events_written(conn)
    return row


async def do_forward_message(
    database: Database,
    sender_id: str,
    from_key: tuple[int, int],
    conversation_id: int,
    client_msg_id: UUID,
    *,
    hook: BeforeSendHook | None = None,
) -> SendResult:
    """Forward the message at from_key (conversation, seq), which the sender reads and which is not deleted,
    into conversation_id, a conversation the sender is a member of: a new message there (a send, with its
    checks: membership, blocks, bans, slow mode, the hook) with the original's body and attachments, marked
    forwarded and keeping no key of the original. Idempotent on (conversation_id, clientMsgId): the sender's
    forward stored under it is the answer (duplicate), whatever became of the original since; a message
    sent otherwise under it is CONFLICT. A message the sender does not read: NOT_FOUND; deleted: CONFLICT."""
    async with database.transaction() as conn:
        prior = await messages.own_by_client_msg_id_txn(conn, conversation_id, sender_id, client_msg_id)
        source = None if prior is not None else await messages.readable_txn(conn, sender_id, *from_key)
    if prior is not None:
        if not prior["forwarded"]:
            raise Conflict(
                "clientMsgId was already used for another message in this conversation",
                conversationId=str(conversation_id),
                clientMsgId=str(client_msg_id),
            )
        return SendResult(prior, duplicate=True)
    if source is None:
        raise NotFound(f"message {from_key[1]} not found in conversation {from_key[0]}")
    if source["deleted_at"] is not None:
        raise Conflict("the message is deleted", reason="MESSAGE_DELETED", conversationId=str(from_key[0]))
    return await do_send_message(
        database, sender_id, conversation_id, client_msg_id, source["body"], hook=hook, forwarded_from=from_key
    )
