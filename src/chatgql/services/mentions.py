"""Mentions: who a message mentions (members only), stored with the message in its transaction."""

from __future__ import annotations

from ..db import Connection
from ..errors import BadUserInput, Forbidden
from ..store import conversations, mentions
from .changes import GROUP_ADMINS


async def mentions_txn(
    conn: Connection, conversation_id: int, seq: int, mentioned: list[str], everyone: bool, sender_id: str
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
