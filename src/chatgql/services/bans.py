"""Bans: a group's OWNER or an ADMIN keeps a user out of it, for a while or until unbanned.

A ban removes the user when they are a member (their live subscriptions to the group end at
once, as for any removal: member.removed) and refuses to add them back (addMembers: FORBIDDEN,
reason USER_BANNED) while it holds: `until` null holds until unbanned, otherwise until then. A
user who is not a member may be banned too. The OWNER bans anyone but themselves; an ADMIN bans
MEMBERs only. The ban takes the group's row lock, which every send takes too: once the ban has
committed, no message of the banned user is stored there (chat_send finds no member).
"""

from __future__ import annotations

from datetime import datetime

from ..db import Connection, Database, Row
from ..errors import BadUserInput, Forbidden, NotFound, conversation_not_found
from ..events.types import MEMBER_BANNED, MEMBER_UNBANNED, ConversationUpdated, Event, MemberRemoved
from ..store import bans, conversations, groups, outbox
from .groups import ADMIN, MANAGERS, OWNER, lock_group_as_manager_txn

MAX_REASON_CHARS = 500


def check_ban(until: datetime | None, reason: str | None) -> str | None:
    """until must carry a time zone; a reason is trimmed, at most MAX_REASON_CHARS (blank: none)."""
    if until is not None and until.tzinfo is None:
        raise BadUserInput("until must carry a time zone")
    if reason is None or not reason.strip():
        return None
    reason = reason.strip()
    if len(reason) > MAX_REASON_CHARS:
        raise BadUserInput(f"reason must be at most {MAX_REASON_CHARS} characters")
    return reason


async def do_ban_member(
    database: Database,
    viewer_id: str,
    conversation_id: int,
    user_id: str,
    *,
    until: datetime | None = None,
    reason: str | None = None,
) -> Row:
    """Ban user_id from the group (removing them when a member); returns the ban. Banning again
    replaces the ban (its until and reason). When user_id was a member, the members and the banned
    user are told (conversationUpdated, MEMBER_BANNED), then the banned user's subscriptions to it
    end; a ban of someone not in the group tells nobody (it would tell them of the group)."""
    reason = check_ban(until, reason)
    if user_id == viewer_id:
        raise BadUserInput("nobody bans themselves (leaveGroup leaves)")
    async with database.transaction() as conn:
        conv = await lock_group_as_manager_txn(conn, conversation_id, viewer_id, "ban anyone", "ban")
        if until is not None and until <= conv.now:
            raise BadUserInput("until must be in the future")
        role = await groups.role_txn(conn, conversation_id, user_id)
        if role == OWNER or (role == ADMIN and conv.role != OWNER):
            raise Forbidden(f"an {conv.role} may not ban an {role}", reason="NOT_GROUP_ADMIN")
        ban = await bans.ban_txn(conn, conversation_id, user_id, until, viewer_id, reason)
        if role is None:  # not a member: nobody is told (the banned user must not learn of the group)
            return ban
        await conversations.delete_member(conn, conversation_id, user_id)
        events: list[Event] = [
            ConversationUpdated(
                conversation_id=conversation_id,
                change=MEMBER_BANNED,
                user_id=viewer_id,
                member_id=user_id,
                title=conv.title or "",
                role="",
            ),
            MemberRemoved(conversation_id=conversation_id, user_id=user_id),
        ]
        await outbox.append(conn, [event.outbox_row() for event in events])
        database.events_written(conn)
        return ban


async def do_unban_member(database: Database, viewer_id: str, conversation_id: int, user_id: str) -> None:
    """Lift a ban (the user may be added again; they are not added back). No ban holding: NOT_FOUND.
    The members are told (conversationUpdated, MEMBER_UNBANNED)."""
    async with database.transaction() as conn:
        conv = await lock_group_as_manager_txn(conn, conversation_id, viewer_id, "unban anyone", "unban")
        if not await bans.unban_txn(conn, conversation_id, user_id):
            raise NotFound(f"user {user_id} is not banned from conversation {conversation_id}")
        event = ConversationUpdated(
            conversation_id=conversation_id,
            change=MEMBER_UNBANNED,
            user_id=viewer_id,
            member_id=user_id,
            title=conv.title or "",
            role="",
        )
        await outbox.append(conn, [event.outbox_row()])
        database.events_written(conn)


async def ban_page(database: Database, viewer_id: str, conversation_id: int, after: str, limit: int) -> list[Row]:
    """The bans that hold, by user id after `after`, at most limit: the OWNER and ADMINs only
    (another member: FORBIDDEN; not a member: NOT_FOUND)."""
    async with database.connection() as conn:
        rows = await conversations.for_viewer(conn, [conversation_id], viewer_id)
        if not rows:
            raise conversation_not_found(conversation_id)
        if rows[0]["role"] not in MANAGERS:
            raise Forbidden("only the OWNER or an ADMIN may list bans", reason="NOT_GROUP_ADMIN")
        return await bans.ban_page(conn, conversation_id, after, limit)


async def check_not_banned_txn(conn: Connection, conversation_id: int, user_ids: list[str]) -> None:
    """FORBIDDEN (reason USER_BANNED, userIds) when a ban keeps any of user_ids out of the group."""
    banned = await bans.banned_among(conn, conversation_id, user_ids)
    if banned:
        raise Forbidden(
            f"banned from conversation {conversation_id}: {', '.join(banned[:10])}",
            reason="USER_BANNED",
            userIds=banned,
        )
