"""Drafts: a member's unsent text of a conversation or of a thread, on all of their devices and nobody
else's.

do_save_draft writes the draft and its draft.updated event (for the member's own devices: OWN) in one
transaction; body "" clears it. A message the member sends clears the draft of the place it goes
(the conversation, or the thread of its replyTo) with no write on the send path: store/drafts.py
reads a draft as cleared once a message of theirs came after it, and every device applies the same
rule to the messages it receives (docs/guide/drafts.md). read_drafts answers the drafts shown now.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..db import Database, Row
from ..errors import BadUserInput, conversation_not_found
from ..events.types import DraftUpdated
from ..store import drafts, outbox
from .checks import check_seq

MAX_DRAFT_CONVERSATIONS = 200  # conversations one drafts(conversationIds:) call may name
MAX_DRAFTS = 100  # drafts one drafts call answers (the newest)


def check_draft_body(body: str, max_chars: int) -> str:
    """A draft's text: empty (clears it) or at most max_chars characters, no NUL, valid Unicode."""
    if len(body) > max_chars:
        raise BadUserInput(f"body is longer than {max_chars} characters")
    if "\x00" in body:
        raise BadUserInput("body must not contain NUL characters")
    try:
        body.encode("utf-8")
    except UnicodeEncodeError:
        raise BadUserInput("body is not valid Unicode text") from None
    return "" if not body.strip() else body


async def do_save_draft(
    database: Database, viewer_id: str, conversation_id: int, reply_to: int | None, body: str, now: datetime
) -> Row | None:
    """Save (or, body "", clear) the viewer's draft: the row after the save (DRAFT_COLUMNS), None when
    there was nothing to clear. NOT_FOUND unless a member; a replyTo that is no message the viewer
    may read: BAD_USER_INPUT (reason REPLY_TO_NOT_FOUND). The body must be checked already."""
    root = 0 if reply_to is None else check_seq(reply_to, "replyTo")
    if reply_to is not None and root == 0:
        raise BadUserInput("replyTo must be a message's seq", reason="REPLY_TO_NOT_FOUND")
    async with database.transaction() as conn:
        member, row = await drafts.save_txn(conn, conversation_id, viewer_id, root, body, now)
        if not member:
            raise conversation_not_found(conversation_id)
        if row is None:
            if body:
                raise BadUserInput(
                    f"replyTo: no message {root} in conversation {conversation_id}", reason="REPLY_TO_NOT_FOUND"
                )
            return None
        event = DraftUpdated(
            conversation_id=conversation_id,
            user_id=viewer_id,
            root_seq=row["root_seq"],
            body=row["body"],
            base_seq=row["base_seq"],
            version=row["version"],
            updated_at=row["updated_at"],
        )
        await outbox.append(conn, [event.outbox_row()])
        database.events_written(conn)
    return row


async def read_drafts(database: Database, viewer_id: str, conversation_ids: Sequence[int] | None) -> list[Row]:
    """The viewer's drafts shown now, of these conversations (None: of all of theirs), the newest MAX_DRAFTS."""
    if conversation_ids is not None and len(conversation_ids) > MAX_DRAFT_CONVERSATIONS:
        raise BadUserInput(f"conversationIds: at most {MAX_DRAFT_CONVERSATIONS}")
    async with database.connection() as conn:
        return await drafts.drafts_of(conn, viewer_id, conversation_ids, MAX_DRAFTS)
