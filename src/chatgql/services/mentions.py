"""Mentions: who a message mentions (members only), stored with the message in its transaction."""

from __future__ import annotations

from ..db import Connection, Database, Row
from ..errors import BadUserInput, Forbidden
from ..store import conversations, mentions, messages
from .changes import GROUP_ADMINS
from .groupcommit import MESSAGE_KEYS, READ_KEYS, STORED, SendItem


async def send_with_mentions(
    database: Database, conversation_id: int, item: SendItem, mentioned: list[int], everyone: bool = False
) -> Row:
    """chat_send and the message's mentions, one transaction: a mention of anyone who is not a member
    is BAD_USER_INPUT and nothing is stored. A retry (duplicate) keeps the original's mentions.
    Not group-committed: sends with mentions go one by one (services/groupcommit.py batches the others)."""
    async with database.transaction() as conn:
        row = await messages.send(
            conn,
            conversation_id=conversation_id,
            sender_id=item.sender_id,
            client_msg_id=item.client_msg_id,
            body=item.body,
            message_event=item.message_event,
            read_event=item.read_event,
            message_keys=MESSAGE_KEYS,
            read_keys=READ_KEYS,
        )
        if row.outcome != STORED:
            return row
        await mentions_txn(conn, conversation_id, row.seq, mentioned, everyone, item.sender_id)
        database.events_written(conn)
        return row


async def mentions_txn(
    conn: Connection, conversation_id: int, seq: int, mentioned: list[int], everyone: bool, sender_id: int
) -> None:
    """Store a new message's mentions, in its send's transaction; BAD_USER_INPUT for a non-member.
    everyone: every other member of the group is mentioned (a row each, counted as a direct mention is),
    for a group's OWNER or ADMIN only (FORBIDDEN otherwise; BAD_USER_INPUT in a direct conversation)."""
    present = await conversations.member_ids_among(conn, conversation_id, mentioned)
    strangers = [uid for uid in mentioned if uid not in present]
    if strangers:
        raise BadUserInput(
            "mentions must be members of the conversation",
            notMembers=[str(uid) for uid in strangers[:20]],
        )
    await mentions.insert_txn(conn, conversation_id, seq, mentioned)
    if everyone:
        conv = await conversations.lock_for_member_txn(conn, conversation_id, sender_id)  # held already: the send's
        if conv is None or conv.type != "GROUP":
            raise BadUserInput("mentionEveryone is for groups", reason="MENTION_EVERYONE_IN_DIRECT")
        if conv.role not in GROUP_ADMINS:
            raise Forbidden("only a group's owner or admin may mention everyone", reason="MENTION_EVERYONE_NOT_ALLOWED")
        await mentions.insert_everyone_txn(conn, conversation_id, seq, sender_id)
