"""Sending messages: idempotent on (conversation, clientMsgId), gap-free seq."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncEngine

from ..errors import Conflict, conversation_not_found
from ..events import types as events
from ..store import conversations, messages, outbox


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
    engine: AsyncEngine, sender_id: int, conversation_id: int, client_msg_id: UUID, body: str
) -> SendResult:
    """Store a message and its message.new event in one transaction (DESIGN.md, "Sending").

    Returns after commit. A retry with the same clientMsgId, body and sender
    returns the stored message (duplicate=True); anything else reusing the
    clientMsgId is CONFLICT. The body must already be validated.
    """
    async with engine.begin() as conn:
        conv = await conversations.lock_for_member_txn(conn, conversation_id, sender_id)
        if conv is None or conv.role is None:
            raise conversation_not_found(conversation_id)
        # Under the lock: a concurrent retry has either committed or not started.
        existing = await messages.find_by_client_msg_id(conn, conversation_id, client_msg_id)
        if existing is not None:
            if existing.sender_id != sender_id or existing.body != body:
                raise Conflict(
                    "clientMsgId was already used for another message in this conversation",
                    conversationId=str(conversation_id),
                    clientMsgId=str(client_msg_id),
                )
            return SendResult(StoredMessage(*existing), duplicate=True)

        stored = StoredMessage(conversation_id, conv.last_seq + 1, sender_id, client_msg_id, body, conv.now)
        read_before = await messages.append_txn(
            conn,
            conversation_id=conversation_id,
            seq=stored.seq,
            sender_id=sender_id,
            client_msg_id=client_msg_id,
            body=body,
            created_at=stored.created_at,
        )
        pending = [
            events.message_new(
                conversation_id=conversation_id,
                seq=stored.seq,
                sender_id=sender_id,
                client_msg_id=client_msg_id,
                body=body,
                created_at=stored.created_at,
            )
        ]
        if read_before < stored.seq - 1:
            # Sending marks what others wrote before as read: say so to watchers.
            pending.append(
                events.read_updated(conversation_id=conversation_id, user_id=sender_id, last_read_seq=stored.seq)
            )
        await outbox.append(conn, pending)
    return SendResult(stored, duplicate=False)
