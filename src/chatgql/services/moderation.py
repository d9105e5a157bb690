"""A group's settings that moderate it: slow mode, history visibility.

Slow mode: a MEMBER sends at most one message every slow_mode_seconds (OWNER and ADMINs are
exempt); 0 turns it off. chat_send enforces it under the conversation's lock (migration
0019_slow_mode), so it holds across processes; a send too soon is LIMIT_EXCEEDED with reason
SLOW_MODE and retryAfter (services/messages.py). It counts from the member's last send while slow
mode was on.

History visibility: a group that hides its history gives each member added from then on only the
messages sent after their join (conversation_member.visible_from_seq = lastSeq + 1 at the join;
1, everything, otherwise). A member keeps what they were given when the setting changes later:
hiding it takes nothing from those already in, showing it again gives nothing back to those who
joined while it was hidden (they may be added again after leaving, to read everything).
"""

from __future__ import annotations

from ..db import Connection, Database, Row
from ..errors import BadUserInput
from ..events.types import SETTINGS_CHANGED, ConversationUpdated
from ..store import groups, outbox
from .groups import lock_group_as_manager_txn

MAX_SLOW_MODE_SECONDS = 3600
SETTINGS = "change a group's settings"  # what only the OWNER or an ADMIN may do


def check_slow_mode(seconds: int) -> int:
    if not 0 <= seconds <= MAX_SLOW_MODE_SECONDS:
        raise BadUserInput(f"seconds must be 0 (off) to {MAX_SLOW_MODE_SECONDS}")
    return seconds


async def do_set_slow_mode(database: Database, viewer_id: str, conversation_id: int, seconds: int) -> None:
    """The OWNER or an ADMIN sets the group's slow mode; the members are told (conversationUpdated,
    SETTINGS_CHANGED) when it changed."""
    check_slow_mode(seconds)
    async with database.transaction() as conn:
        conv = await lock_group_as_manager_txn(conn, conversation_id, viewer_id, "have slow mode", SETTINGS)
        if not await groups.set_slow_mode_txn(conn, conversation_id, seconds):
            return
        await settings_changed_txn(database, conn, conversation_id, viewer_id, conv)


async def do_set_history_visibility(database: Database, viewer_id: str, conversation_id: int, hide: bool) -> None:
    """The OWNER or an ADMIN sets whether members added from now on read the group's earlier history
    (hide: they do not); the members are told (conversationUpdated, SETTINGS_CHANGED) when it changed."""
    async with database.transaction() as conn:
        conv = await lock_group_as_manager_txn(conn, conversation_id, viewer_id, "hide its history", SETTINGS)
        if not await groups.set_hide_history_txn(conn, conversation_id, hide):
            return
        await settings_changed_txn(database, conn, conversation_id, viewer_id, conv)


async def settings_changed_txn(
    database: Database, conn: Connection, conversation_id: int, viewer_id: str, conv: Row
) -> None:
    """The members told that viewer_id changed the conversation's settings (conversationUpdated,
    SETTINGS_CHANGED), in the change's transaction."""
    event = ConversationUpdated(
        conversation_id=conversation_id,
        change=SETTINGS_CHANGED,
        user_id=viewer_id,
        member_id=viewer_id,
        title=conv.title or "",
        role=conv.role,
    )
    await outbox.append(conn, [event.outbox_row()])
    database.events_written(conn)
