"""Event types and their JSON form (the outbox payload and the Kafka value).

Every event names its conversation; the outbox key (and the Kafka key) is the
conversation id, so one conversation's events stay in order.
"""

from __future__ import annotations

from uuid import UUID

MESSAGE_NEW = "message.new"
READ_UPDATED = "read.updated"
MEMBERS_ADDED = "member.added"
MEMBER_REMOVED = "member.removed"


def message_new(*, conversation_id: int, sender_id: int, client_msg_id: UUID, body: str) -> tuple[str, dict]:
    """Carries every common field of Message, so fanout needs no query per
    subscriber. "seq" and "createdAt" are added by chat_send() when stored."""
    return str(conversation_id), {
        "type": MESSAGE_NEW,
        "conversationId": conversation_id,
        "senderId": sender_id,
        "clientMsgId": str(client_msg_id),
        "body": body,
    }


def read_updated(*, conversation_id: int, user_id: int) -> tuple[str, dict]:
    """ "lastReadSeq" is added by the statement that moved the watermark."""
    return str(conversation_id), {
        "type": READ_UPDATED,
        "conversationId": conversation_id,
        "userId": user_id,
    }


def members_added(*, conversation_id: int, user_ids: list[int]) -> tuple[str, dict]:
    return str(conversation_id), {
        "type": MEMBERS_ADDED,
        "conversationId": conversation_id,
        "userIds": user_ids,
    }


def member_removed(*, conversation_id: int, user_id: int) -> tuple[str, dict]:
    return str(conversation_id), {
        "type": MEMBER_REMOVED,
        "conversationId": conversation_id,
        "userId": user_id,
    }
