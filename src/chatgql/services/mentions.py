"""Mentions: who a message mentions (members only), stored with the message in its transaction."""

from __future__ import annotations

from collections.abc import Sequence

from ..db import Connection
from ..errors import BadUserInput, Forbidden
from ..store import conversations, mentions
from .groups import MANAGERS


async def mentions_txn(
    conn: Connection, conversation_id: int, seq: int, mentioned: list[str], everyone: bool, sender_id: str
) -> None:
    """Store a new message's mentions, in its send's transaction; BAD_USER_INPUT for a non-member.
    everyone: every other member of the group is mentioned (a row each, counted as a direct mention is),
    for a group's OWNER or ADMIN only (FORBIDDEN otherwise; BAD_USER_INPUT in a direct conversation)."""
    await check_mentioned_txn(conn, conversation_id, mentioned)
    await mentions.insert_txn(conn, conversation_id, seq, mentioned)
    if everyone:
        conv = await conversations.lock_for_member_txn(conn, conversation_id, sender_id)  # held already: the send's
        if conv is None or conv.type != "GROUP":
            raise BadUserInput("mentionEveryone is for groups", reason="MENTION_EVERYONE_IN_DIRECT")
        if conv.role not in MANAGERS:
            raise Forbidden("only a group's owner or admin may mention everyone", reason="MENTION_EVERYONE_NOT_ALLOWED")
        await mentions.insert_everyone_txn(conn, conversation_id, seq, sender_id)


async def check_mentioned_txn(conn: Connection, conversation_id: int, mentioned: Sequence[str]) -> None:
    """BAD_USER_INPUT (with notMembers) unless everyone mentioned is a member of the conversation."""
    present = await conversations.member_ids_among(conn, conversation_id, list(mentioned))
    strangers = [uid for uid in mentioned if uid not in present]
    if strangers:
        raise BadUserInput(
            "mentions must be members of the conversation",
            notMembers=[str(uid) for uid in strangers[:20]],
        )


async def check_edit_mentions_txn(
    conn: Connection, conversation_id: int, seq: int, mentioned: Sequence[str] | None
) -> bool:
    """An edit's mentions (None: it keeps the message's): whether they differ from the message's now;
    BAD_USER_INPUT for one who is not a member. Call do_edit_mentions_txn with them when they do."""
    if mentioned is None:
        return False
    await check_mentioned_txn(conn, conversation_id, mentioned)
    now = await mentions.of_messages(conn, [(conversation_id, seq)])
    return {row["user_id"] for row in now} != set(mentioned)


async def do_edit_mentions_txn(conn: Connection, conversation_id: int, seq: int, mentioned: Sequence[str]) -> None:
    """An edited message mentions exactly `mentioned` from now on (in the edit's transaction): one no longer
    mentioned stops counting in unreadMentions at once, one newly mentioned counts when the message is above
    their own read position. Nothing is pushed for a new mention (docs/guide/read-state.md)."""
    await mentions.replace_txn(conn, conversation_id, seq, mentioned)
