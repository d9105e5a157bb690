"""Managing a group: renaming it, leaving it, changing a member's role.

Roles: one OWNER, any number of ADMINs, MEMBERs. The OWNER and ADMINs rename the group and
change roles; only the OWNER hands ownership on (making another member OWNER makes the old
OWNER an ADMIN), and nobody else changes the OWNER's role. Any member leaves; when the OWNER
leaves, the longest-standing ADMIN becomes OWNER, or with no ADMIN the longest-standing
member (store.conversations.promote_if_ownerless). Each change writes a conversation.updated
event (to the members, and for MEMBER_LEFT to the one who left) in its transaction.
"""

from __future__ import annotations

from ..db import Connection, Database, Row
from ..errors import BadUserInput, Forbidden, NotFound, conversation_not_found
from ..events.types import MEMBER_LEFT, RENAMED, ROLE_CHANGED, ConversationUpdated, Event, MemberRemoved
from ..store import conversations, groups, outbox

OWNER, ADMIN, MEMBER = "OWNER", "ADMIN", "MEMBER"
ROLES = (OWNER, ADMIN, MEMBER)
MANAGERS = (OWNER, ADMIN)


async def _emit_txn(database: Database, conn: Connection, *events: Event) -> None:
    await outbox.append(conn, [event.outbox_row() for event in events])
    database.events_written(conn)


async def lock_group_txn(conn: Connection, conversation_id: int, viewer_id: str, what: str) -> Row:
    """The group, locked; NOT_FOUND unless the viewer is in it, FORBIDDEN for a DIRECT chat."""
    conv = await conversations.lock_for_member_txn(conn, conversation_id, viewer_id)
    if conv is None or conv.role is None:
        raise conversation_not_found(conversation_id)
    if conv.type != "GROUP":
        raise Forbidden(f"a direct conversation cannot {what}")
    return conv


async def lock_group_as_manager_txn(conn: Connection, conversation_id: int, viewer_id: str, what: str, may: str) -> Row:
    """lock_group_txn, and FORBIDDEN (reason NOT_GROUP_ADMIN) unless the viewer is the OWNER or an ADMIN."""
    conv = await lock_group_txn(conn, conversation_id, viewer_id, what)
    if conv.role not in MANAGERS:
        raise Forbidden(f"only the OWNER or an ADMIN may {may}", reason="NOT_GROUP_ADMIN")
    return conv


async def do_rename_group(database: Database, viewer_id: str, conversation_id: int, title: str) -> None:
    """The OWNER or an ADMIN renames a group (title already checked)."""
    async with database.transaction() as conn:
        conv = await lock_group_txn(conn, conversation_id, viewer_id, "be renamed")
        if conv.role not in MANAGERS:
            raise Forbidden("only the OWNER or an ADMIN may rename a group")
        await groups.set_title_txn(conn, conversation_id, title)
        await _emit_txn(
            database,
            conn,
            ConversationUpdated(
                conversation_id=conversation_id,
                change=RENAMED,
                user_id=viewer_id,
                member_id=viewer_id,
                title=title,
                role=conv.role,
            ),
        )


async def do_leave_group(database: Database, viewer_id: str, conversation_id: int) -> str | None:
    """The viewer leaves a group; returns the new OWNER's id when the OWNER left (None otherwise)."""
    async with database.transaction() as conn:
        conv = await lock_group_txn(conn, conversation_id, viewer_id, "be left")
        await conversations.delete_member(conn, conversation_id, viewer_id)
        new_owner = None
        if conv.role == OWNER:
            new_owner = await conversations.promote_if_ownerless(conn, conversation_id)

        def change(kind: str, member: str, role: str) -> ConversationUpdated:
            return ConversationUpdated(
                conversation_id=conversation_id,
                change=kind,
                user_id=viewer_id,
                member_id=member,
                title=conv.title or "",
                role=role,
            )

        events: list[Event] = [change(MEMBER_LEFT, viewer_id, "")]
        if new_owner is not None:
            events.append(change(ROLE_CHANGED, new_owner, OWNER))
        # after conversation.updated: the one who left gets it before their subscriptions end
        events.append(MemberRemoved(conversation_id=conversation_id, user_id=viewer_id))
        await _emit_txn(database, conn, *events)
        return new_owner


async def do_set_member_role(database: Database, viewer_id: str, conversation_id: int, user_id: str, role: str) -> None:
    """The OWNER or an ADMIN sets a member's role (see the module docstring for who may do what)."""
    if role not in ROLES:
        raise BadUserInput(f"role must be one of {', '.join(ROLES)}")
    async with database.transaction() as conn:
        conv = await lock_group_txn(conn, conversation_id, viewer_id, "have roles")
        if conv.role not in MANAGERS:
            raise Forbidden("only the OWNER or an ADMIN may change roles")
        current = await groups.role_txn(conn, conversation_id, user_id)
        if current is None:
            raise NotFound(f"user {user_id} is not a member of conversation {conversation_id}")
        if current == OWNER and conv.role != OWNER:
            raise Forbidden("only the OWNER may change the OWNER's role")
        if role == OWNER and conv.role != OWNER:
            raise Forbidden("only the OWNER may hand ownership on")
        if current == role:
            return
        if current == OWNER:  # the OWNER demoting themselves: a group keeps its OWNER
            raise BadUserInput("the OWNER hands ownership on by making another member OWNER")

        def change(member: str, new_role: str) -> ConversationUpdated:
            return ConversationUpdated(
                conversation_id=conversation_id,
                change=ROLE_CHANGED,
                user_id=viewer_id,
                member_id=member,
                title=conv.title or "",
                role=new_role,
            )

        await groups.set_role_txn(conn, conversation_id, user_id, role)
        events = [change(user_id, role)]
        if role == OWNER:  # handed on: the old OWNER becomes an ADMIN
            await groups.set_role_txn(conn, conversation_id, viewer_id, ADMIN)
            events.append(change(viewer_id, ADMIN))
        await _emit_txn(database, conn, *events)
