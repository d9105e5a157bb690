"""Sending messages: idempotent on (conversation, clientMsgId), gap-free seq."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from ..db import Database
from ..errors import Conflict, conversation_not_found
from ..events.types import MessageNew, ReadUpdated
from .groupcommit import SendBatcher, SendItem, send_alone


@dataclass(frozen=True, slots=True)
class StoredMessage:
    conversation_id: int
    seq: int
    sender_id: int
    client_msg_id: UUID
    body: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class SendResult:
    message: StoredMessage
    duplicate: bool


async def do_send_message(
    database: Database,
    sender_id: int,
    conversation_id: int,
    client_msg_id: UUID,
    body: str,
    *,
    batcher: SendBatcher | None = None,
) -> SendResult:
    """Store a message and its message.new event in one transaction (DESIGN.md, "Sending").

    The transaction is one statement (store.messages.send), committed before
    this returns: an answer means durably stored. A retry with the same
    clientMsgId, body and sender returns the stored message (duplicate=True);
    anything else reusing the clientMsgId is CONFLICT and writes nothing.
    The body must already be validated. With a batcher, the send may share
    its transaction with other sends to the conversation (group commit,
    services/groupcommit.py); the answer is the same. Once a stored message has
    committed, the relay is woken (database.events_written), however this was called.
    """
    message_event = MessageNew(
        conversation_id=conversation_id, sender_id=sender_id, client_msg_id=client_msg_id, body=body
    ).payload()
    read_event = ReadUpdated(conversation_id=conversation_id, user_id=sender_id).payload()
    item = SendItem(sender_id, client_msg_id, body, message_event, read_event)
    if batcher is None:
        row = await send_alone(database, conversation_id, item)
    else:
        row = await batcher.send(conversation_id, item)
    if row.outcome == "not_found":
        raise conversation_not_found(conversation_id)
    if row.outcome == "conflict":
        raise Conflict(
            "clientMsgId was already used for another message in this conversation",
            conversationId=str(conversation_id),
            clientMsgId=str(client_msg_id),
        )
    stored = StoredMessage(conversation_id, row.seq, row.sender_id, client_msg_id, row.body, row.created_at)
    return SendResult(stored, duplicate=row.outcome == "duplicate")
