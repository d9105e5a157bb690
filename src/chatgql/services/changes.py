"""Editing and deleting messages, and reading the changes after a change cursor.

A change never takes a message seq: it takes the conversation's next change seq
(store.changes.record_change_txn) under the conversation's lock, in the one
transaction that writes the message, the change log row and the outbox event.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..db import Connection, Database, Row
from ..errors import Conflict, Forbidden, LimitExceeded, conversation_not_found
from ..events.types import REGISTRY, MessageChange, MessageDeleted, MessageEdited, ReactionChanged
from ..models import MESSAGE_FIELDS
from ..store import changes, conversations, outbox, reactions, webhooks
from .checks import check_seq, message_not_found
from .history import check_cursors, replay_ranges, sync_cursors_page, too_far_behind, visible_conversations
from .mentions import check_edit_mentions_txn, do_edit_mentions_txn
from .threads import delete_replies_txn

GROUP_ADMINS = frozenset({"OWNER", "ADMIN"})  # who may delete any message of a group
# The event kinds that carry a message's body (all but the tombstone's own): what a delete erases
# from the events still stored.
CONTENT_KINDS = sorted(
    kind for kind, cls in REGISTRY.items() if cls is not MessageDeleted and any(w.name == "body" for w in cls.FIELDS)
)


def change_event(
    kind: type[MessageChange],
    row: Row,
    change_seq: int,
    user_id: str | None,
    reason: str | None = None,
    **extra: Any,
) -> MessageChange:
    """The event of a change, from the message row as it is after it (store.messages.MESSAGE_COLUMNS)."""
    message: dict[str, Any] = {name: row[name] for name in MESSAGE_FIELDS}
    return kind(
        **extra,
        **message,
        reason=reason,
        change_seq=change_seq,
        user_id=user_id,
    )


@dataclass(frozen=True, slots=True)
class ChangeResult:
    message: Row  # the message as it is now (store.messages.MESSAGE_COLUMNS)
    change_seq: int | None  # None: nothing changed (the same body again)


async def _locked_message(conn: Connection, conversation_id: int, seq: int, viewer_id: str) -> tuple[Row, Row]:
    conv = await conversations.lock_for_member_txn(conn, conversation_id, viewer_id)
    if conv is None or conv.role is None:
        raise conversation_not_found(conversation_id)
    # a message from before the viewer's join to a group that hid it: as if there were none
    message = await changes.lock_message_txn(conn, conversation_id, seq) if seq >= conv.visible_from_seq else None
    if message is None:
        raise message_not_found(conversation_id, seq)
    return conv, message


async def do_edit_message(
    database: Database,
    viewer_id: str,
    conversation_id: int,
    seq: int,
    body: str,
    *,
    window_seconds: float = 0,
    mentions: Sequence[str] | None = None,
) -> ChangeResult:
    """The sender replaces the body of their message (within window_seconds of sending when > 0), and its
    mentions with `mentions` when given (members only: BAD_USER_INPUT; None keeps them).

    The previous body joins the edit history; the same body and mentions again change nothing (no change
    seq, no event). A tombstone cannot be edited (CONFLICT); someone else's message: FORBIDDEN. The body
    must be validated."""
    check_seq(seq)
    async with database.transaction() as conn:
        conv, message = await _locked_message(conn, conversation_id, seq, viewer_id)
        if message["deleted_at"] is not None:
            raise Conflict("the message is deleted", reason="MESSAGE_DELETED", conversationId=str(conversation_id))
        if message["sender_id"] != viewer_id:
            raise Forbidden("only the sender may edit a message", reason="NOT_SENDER")
        if window_seconds and (conv.now - message["created_at"]).total_seconds() > window_seconds:
            raise Forbidden(
                f"a message may be edited only within {window_seconds:g} s of sending", reason="EDIT_WINDOW_CLOSED"
            )
        mentions_changed = await check_edit_mentions_txn(conn, conversation_id, seq, mentions)
        if message["body"] == body and not mentions_changed:
            return ChangeResult(message, None)
        change_seq = await changes.record_change_txn(conn, conversation_id, seq, MessageEdited.KIND, viewer_id)
        edited = await changes.edit_txn(conn, conversation_id, seq, change_seq, body)
        if mentions_changed:
            await do_edit_mentions_txn(conn, conversation_id, seq, mentions or [])
        await outbox.append(conn, [change_event(MessageEdited, edited, change_seq, viewer_id).outbox_row()])
        database.events_written(conn)
    return ChangeResult(edited, change_seq)


async def do_delete_message(database: Database, viewer_id: str, conversation_id: int, seq: int) -> ChangeResult:
    """The sender, or a group's OWNER or ADMIN, makes the message a tombstone at its seq (tombstone_txn).
    Deleting a tombstone again is CONFLICT (reason ALREADY_DELETED); anyone else: FORBIDDEN."""
    check_seq(seq)
    async with database.transaction() as conn:
        conv, message = await _locked_message(conn, conversation_id, seq, viewer_id)
        if message["deleted_at"] is not None:
            raise Conflict("the message is already deleted", reason="ALREADY_DELETED")
        if message["sender_id"] != viewer_id and not (conv.type == "GROUP" and conv.role in GROUP_ADMINS):
            raise Forbidden("only the sender or a group's owner or admin may delete a message", reason="NOT_SENDER")
        ((tombstone, change_seq),) = await tombstone_txn(database, conn, conversation_id, [seq], viewer_id)
    return ChangeResult(tombstone, change_seq)


async def tombstone_txn(
    database: Database,
    conn: Connection,
    conversation_id: int,
    seqs: Sequence[int],
    deleted_by: str | None,
    reason: str | None = None,
) -> list[tuple[Row, int]]:
    """The one delete path (deleteMessage, the operator's erase and retention: services/erase.py), under the
    conversation's lock: the messages among seqs not deleted yet become tombstones at their seq, their body, edit
    history, reactions, attachments and mentions erased in this transaction, no longer unread for the members who
    had not read them (store.changes.tombstone_txn); each takes the next change seq and its message.deleted event.
    The events about them still stored lose the body too: those not relayed yet are relayed with an empty one,
    and the webhooks not posted yet (queued or dead letters) are withdrawn (docs/operating/webhooks.md).
    deleted_by None: the operator, for `reason` (ERASE, RETENTION: the change's). Returns (tombstone, change seq) in seq order; a seq deleted already is left."""
    tombstones = await changes.tombstone_txn(conn, conversation_id, seqs, deleted_by)
    if not tombstones:
        return []
    replies = [t["seq"] for t in tombstones if t["reply_to_seq"] is not None]  # only a reply is in a thread
    if replies:  # each follower of their threads takes a version (DELETE), and is told
        await delete_replies_txn(conn, conversation_id, replies)
    kind = MessageDeleted.KIND
    seqs = [t["seq"] for t in tombstones]
    await outbox.erase_txn(conn, str(conversation_id), seqs, CONTENT_KINDS)
    await webhooks.withdraw_txn(conn, str(conversation_id), seqs, CONTENT_KINDS)  # after: sees what was relayed
    taken = await changes.record_changes_txn(conn, conversation_id, seqs, kind, deleted_by, reason)
    done = [(t, taken[t["seq"]]) for t in tombstones]
    events = [change_event(MessageDeleted, t, c, deleted_by, reason=reason).outbox_row() for t, c in done]
    await outbox.append(conn, events)
    database.events_written(conn)
    return done


async def do_react(
    database: Database,
    viewer_id: str,
    conversation_id: int,
    seq: int,
    emoji: str,
    *,
    add: bool,
    max_emojis: int,
) -> ChangeResult:
    """Add (add=True) or remove the viewer's emoji on a message: idempotent per (message, user, emoji),
    so adding twice or removing what is not there changes nothing (no change seq, no event). A change
    takes the next change seq (kind REACTION), never a message seq, and never counts as unread.
    A tombstone: CONFLICT (MESSAGE_DELETED); a new emoji past max_emojis distinct ones: LIMIT_EXCEEDED."""
    check_seq(seq)
    async with database.transaction() as conn:
        _, message = await _locked_message(conn, conversation_id, seq, viewer_id)
        if message["deleted_at"] is not None:
            raise Conflict("the message is deleted", reason="MESSAGE_DELETED", conversationId=str(conversation_id))
        if add:
            outcome = await reactions.add_txn(conn, conversation_id, seq, viewer_id, emoji, max_emojis)
            if outcome == "too_many":
                raise LimitExceeded(
                    f"a message has at most {max_emojis} different reactions", reason="REACTIONS_PER_MESSAGE"
                )
            changed = outcome == "added"
        else:
            changed = await reactions.remove_txn(conn, conversation_id, seq, viewer_id, emoji)
        if not changed:
            return ChangeResult(message, None)
        change_seq = await changes.record_change_txn(conn, conversation_id, seq, ReactionChanged.KIND, viewer_id)
        event = change_event(ReactionChanged, message, change_seq, viewer_id, emoji=emoji, added=add)
        await outbox.append(conn, [event.outbox_row()])
        database.events_written(conn)
    return ChangeResult(message, change_seq)


@dataclass(frozen=True, slots=True)
class ChangesPage:
    conversation_id: int
    changes: list[Row]  # (change_seq, kind, changed_by, message columns...), ascending by change_seq
    has_more: bool
    last_change_seq: int
    too_long: bool  # more than max_catch_up changes behind: none returned, re-read the messages held


async def read_changes(
    database: Database,
    viewer_id: str,
    cursors: Sequence[tuple[int, int]],
    limit: int | None,
    *,
    max_cursors: int,
    max_catch_up: int,
    max_changes: int | None = None,
) -> list[ChangesPage]:
    """Per (conversation_id, after_change_seq): the changes after it, at most limit, each with the message as
    it is now; two statements whatever the number of cursors. More than max_catch_up changes behind: none,
    too_long set (the client re-reads the messages it holds, then goes on from last_change_seq). With
    max_changes, each page is sync's page under that budget (history.sync_page), as sync's messages are."""
    limit = sync_cursors_page(
        limit, cursors, max_cursors=max_cursors, budget=max_changes, within="at once", field="afterChangeSeq"
    )
    if not cursors:
        return []
    async with database.connection() as conn:
        visible = await visible_conversations(conn, viewer_id, cursors)
        too_long = {c for c, a in cursors if too_far_behind(a, visible[c].last_change_seq, max_catch_up)}
        wanted = [(c, a, limit + 1) for c, a in cursors if c not in too_long and visible[c].last_change_seq > a]
        rows = await changes.after_many(conn, wanted, viewer_id) if wanted else []
    found: dict[int, list[Row]] = defaultdict(list)
    for row in rows:
        found[row["conversation_id"]].append(row)
    return [
        ChangesPage(c, found[c][:limit], len(found[c]) > limit, visible[c].last_change_seq, c in too_long)
        for c, _ in cursors
    ]


@dataclass(frozen=True, slots=True)
class ChangeReplay:
    changes: list[Row]
    held: dict[int, int]  # conversation id -> the change seq the client holds once these are delivered


async def read_change_replay(
    database: Database,
    viewer_id: str,
    cursors: Sequence[tuple[int, int]],
    *,
    bound: int,
    max_cursors: int,
    max_catch_up: int,
) -> ChangeReplay:
    """What a resumable messageChanged delivers before going live: every change after each cursor up to the
    conversation's last_change_seq (gap-free, so exactly last - after of them). More than `bound` in all, or
    more than max_catch_up in one conversation: ReplayTooLong (resync) before any change is read."""
    check_cursors(cursors, max_cursors, within="at once", field="afterChangeSeq")
    if not cursors:
        return ChangeReplay([], {})
    async with database.connection() as conn:
        visible = await visible_conversations(conn, viewer_id, cursors)
        ranges = replay_ranges([(c, a, visible[c].last_change_seq) for c, a in cursors], bound, max_catch_up)
        rows = await changes.after_many(conn, [(c, a, last - a) for c, a, last in ranges], viewer_id) if ranges else []
    held = {c: max(a, visible[c].last_change_seq) for c, a in cursors}
    return ChangeReplay(list(rows), held)
