"""Creating conversations and changing who is in them."""

from __future__ import annotations

import math
from typing import Final

from ..db import Connection, Database, Row
from ..errors import BadUserInput, Forbidden, LimitExceeded, NotFound, conversation_not_found
from ..events.types import Event, MemberRemoved, MembersAdded
from ..store import conversations, outbox
from .bans import check_not_banned_txn
from .blocks import check_direct_allowed_txn, check_not_blocked_txn
from .groups import do_leave_group
from .policy import ALLOW_ALL, MembershipPolicy, check_may_add

OWNER, MEMBER = "OWNER", "MEMBER"
DIRECT: Final = "DIRECT"
GROUP: Final = "GROUP"
DAY_SECONDS = 24 * 3600


async def _emit_txn(database: Database, conn: Connection, *events: Event) -> None:
    """Write events to the outbox in conn's transaction; the relay is woken once it commits."""
    await outbox.append(conn, [event.outbox_row() for event in events])
    database.events_written(conn)


class _LostRace(Exception):
    """Another transaction created the same direct pair first."""


async def do_create_direct_conversation(
    database: Database, viewer_id: str, other_id: str, *, policy: MembershipPolicy = ALLOW_ALL
) -> int:
    """The one DIRECT conversation of two users, created on first call (if the policy allows).

    Two people calling at once get the same conversation: direct_pair's key
    decides; the loser's transaction rolls back and it reads the winner's.
    A block between the two, either way, is FORBIDDEN (reason BLOCKED), whether the conversation
    exists or not: checked under the pair's lock, which a block takes too (services/blocks.py).
    """
    if other_id == viewer_id:
        raise BadUserInput("a direct conversation needs another user")
    low, high = sorted((viewer_id, other_id))
    async with database.connection() as conn:
        existing = await conversations.find_direct(conn, low, high)
        if existing is not None:
            await check_not_blocked_txn(conn, viewer_id, [other_id])
    if existing is not None:
        return existing
    await check_may_add(policy, viewer_id, [other_id], DIRECT)
    try:
        async with database.transaction() as conn:
            await check_direct_allowed_txn(conn, viewer_id, other_id)
            created = await conversations.insert_conversation(conn, DIRECT, None)
            await conversations.insert_members(conn, created.id, [(low, MEMBER), (high, MEMBER)])
            if not await conversations.claim_direct_pair(conn, low, high, created.id):
                raise _LostRace
            await _emit_txn(database, conn, MembersAdded(conversation_id=created.id, user_ids=[low, high]))
            return created.id
    except _LostRace:
        async with database.connection() as conn:
            winner = await conversations.find_direct(conn, low, high)
        assert winner is not None  # the pair our claim lost to is committed
        return winner


async def do_create_group(
    database: Database,
    viewer_id: str,
    title: str,
    member_ids: list[str],
    *,
    max_members: int,
    max_per_day: int = 0,
    policy: MembershipPolicy = ALLOW_ALL,
) -> int:
    """A GROUP owned by the viewer, with member_ids as MEMBERs (the viewer counts toward max_members).

    max_per_day > 0: the viewer may have created at most that many groups in any 24 hours
    (counted in the database, under a per-user lock: it holds across processes and restarts).
    """
    others = [uid for uid in dict.fromkeys(member_ids) if uid != viewer_id]
    if 1 + len(others) > max_members:
        raise LimitExceeded(f"a group has at most {max_members} members")
    await check_may_add(policy, viewer_id, others, GROUP)
    async with database.transaction() as conn:
        await check_not_blocked_txn(conn, viewer_id, others)
        if max_per_day > 0:
            await _check_groups_per_day_txn(conn, viewer_id, max_per_day)
        created = await conversations.insert_conversation(conn, GROUP, title, created_by=viewer_id)
        added = await conversations.insert_members(
            conn, created.id, [(viewer_id, OWNER)] + [(uid, MEMBER) for uid in others]
        )
        await _emit_txn(database, conn, MembersAdded(conversation_id=created.id, user_ids=added))
        return created.id


async def _check_groups_per_day_txn(conn: Connection, viewer_id: str, max_per_day: int) -> None:
    """LIMIT_EXCEEDED (retryAfter: until the oldest of them is a day old) once the viewer
    created max_per_day groups in the last 24 hours; the lock lasts until commit."""
    await conversations.lock_group_quota_txn(conn, viewer_id)
    recent = await conversations.groups_created_since(conn, viewer_id, DAY_SECONDS)
    if recent.count >= max_per_day:
        retry_after = max(1, math.ceil(DAY_SECONDS - (recent.oldest_age or 0.0)))
        raise LimitExceeded(
            f"at most {max_per_day} new groups per user in 24 hours; retry after {retry_after} s",
            reason="GROUPS_PER_DAY",
            retryAfter=retry_after,
        )


async def _lock_group_txn(conn: Connection, conversation_id: int, viewer_id: str) -> Row:
    """Lock a group whose members are about to change; the viewer must be in it."""
    conv = await conversations.lock_for_member_txn(conn, conversation_id, viewer_id)
    if conv is None or conv.role is None:
        raise conversation_not_found(conversation_id)
    if conv.type == DIRECT:
        raise Forbidden("members of a direct conversation cannot change")
    return conv


async def check_add_members(
    database: Database, viewer_id: str, conversation_id: int, user_ids: list[str], *, policy: MembershipPolicy
) -> None:
    """Before the transaction: the viewer must be in the group (NOT_FOUND otherwise, as everywhere),
    and the policy must allow the people not in it yet. do_add_members checks the membership
    again under the lock; nobody waits on the lock while the policy is asked."""
    async with database.connection() as conn:
        rows = await conversations.for_viewer(conn, [conversation_id], viewer_id)
        if not rows:
            raise conversation_not_found(conversation_id)
        if rows[0].type == DIRECT:
            raise Forbidden("members of a direct conversation cannot change")
        present = await conversations.member_ids_among(conn, conversation_id, user_ids)
    await check_may_add(policy, viewer_id, [uid for uid in user_ids if uid not in present], GROUP, conversation_id)


async def do_add_members(
    database: Database,
    viewer_id: str,
    conversation_id: int,
    user_ids: list[str],
    *,
    max_members: int,
    policy: MembershipPolicy = ALLOW_ALL,
) -> None:
    """Any member may add people to a group (if the policy allows); ids already present are ignored.

    New members start with nothing unread: their watermark is the current lastSeq. In a group that hides
    its history (services/moderation.py) they read only what is sent from then on. Someone a ban
    keeps out (services/bans.py) is refused: FORBIDDEN, reason USER_BANNED, nobody added.
    Costs O(len(user_ids)), whatever the group's size (bigger groups are built batch by batch).
    """
    if policy is not ALLOW_ALL:  # allow-all has nothing to ask: the transaction's own checks suffice
        await check_add_members(database, viewer_id, conversation_id, user_ids, policy=policy)
    async with database.transaction() as conn:
        conv = await _lock_group_txn(conn, conversation_id, viewer_id)
        present = await conversations.member_ids_among(conn, conversation_id, user_ids)
        new = [uid for uid in user_ids if uid not in present]
        if not new:
            return
        await check_not_blocked_txn(conn, viewer_id, new)
        await check_not_banned_txn(conn, conversation_id, new)
        # the stored count (kept by triggers: 0007), read under the lock: O(batch), not O(members)
        if conv.member_count + len(new) > max_members:
            raise LimitExceeded(f"a group has at most {max_members} members")
        added = await conversations.insert_members(
            conn,
            conversation_id,
            [(uid, MEMBER) for uid in new],
            last_read_seq=conv.last_seq,
            # a group hiding its history: they read from their join on
            visible_from_seq=conv.last_seq + 1 if conv.hide_history else 1,
        )
        await _emit_txn(database, conn, MembersAdded(conversation_id=conversation_id, user_ids=added))


async def do_remove_member(database: Database, viewer_id: str, conversation_id: int, user_id: str) -> None:
    """Anyone may leave a group (services.groups.do_leave_group); only an OWNER may remove others."""
    if user_id == viewer_id:
        await do_leave_group(database, viewer_id, conversation_id)
        return
    async with database.transaction() as conn:
        conv = await _lock_group_txn(conn, conversation_id, viewer_id)
        if user_id != viewer_id and conv.role != OWNER:
            raise Forbidden("only an OWNER may remove other members")
        removed_role = await conversations.delete_member(conn, conversation_id, user_id)
        if removed_role is None:
            raise NotFound(f"user {user_id} is not a member of conversation {conversation_id}")
        if removed_role == OWNER:
            await conversations.promote_if_ownerless(conn, conversation_id)
        await _emit_txn(database, conn, MemberRemoved(conversation_id=conversation_id, user_id=user_id))
