"""Managing a group: its title and its members' roles (under the conversation's lock)."""

from __future__ import annotations

from ..db import Connection


async def set_title_txn(conn: Connection, conversation_id: int, title: str) -> None:
    await conn.execute("UPDATE conversation SET title = $2 WHERE id = $1", conversation_id, title)


async def role_txn(conn: Connection, conversation_id: int, user_id: str) -> str | None:
    """user_id's role, its row locked until the transaction ends; None when not a member."""
    return await conn.fetchval(
        "SELECT role FROM conversation_member WHERE conversation_id = $1 AND user_id = $2 FOR UPDATE",
        conversation_id,
        user_id,
    )


async def set_role_txn(conn: Connection, conversation_id: int, user_id: str, role: str) -> None:
    await conn.execute(
        "UPDATE conversation_member SET role = $3 WHERE conversation_id = $1 AND user_id = $2",
        conversation_id,
        user_id,
        role,
    )


async def set_slow_mode_txn(conn: Connection, conversation_id: int, seconds: int) -> bool:
    """Set the group's slow mode (0: off); False when it already was that."""
    return (
        await conn.fetchval(
            "UPDATE conversation SET slow_mode_seconds = $2 WHERE id = $1 AND slow_mode_seconds <> $2 RETURNING true",
            conversation_id,
            seconds,
        )
        is not None
    )


async def set_hide_history_txn(conn: Connection, conversation_id: int, hide: bool) -> bool:
    """Set whether members added from now on read the earlier history (hide: they do not); False when it
    already was that."""
    return (
        await conn.fetchval(
            "UPDATE conversation SET hide_history = $2 WHERE id = $1 AND hide_history <> $2 RETURNING true",
            conversation_id,
            hide,
        )
        is not None
    )
