"""Reports: a member reports a message of their conversation, or anyone reports a user, with a reason
of a fixed set (models.REPORT_REASONS) and free text. The report keeps the message as it was when
reported (store/reports.py), and the reported user never learns who reported them: nothing of a
report reaches them (no event, no field)."""

from __future__ import annotations

from dataclasses import dataclass

from ..db import Database
from ..errors import BadUserInput, Conflict, NotFound, conversation_not_found
from ..models import REPORT_REASONS
from ..store import conversations, messages, reports

MAX_DETAILS_CHARS = 2000


@dataclass(frozen=True, slots=True)
class Reported:
    report_id: int
    duplicate: bool  # the reporter had reported it before: nothing new was stored


def check_report(reason: str, details: str) -> str:
    """The details, stripped; BAD_USER_INPUT for a reason outside the set or details too long."""
    if reason not in REPORT_REASONS:
        raise BadUserInput(f"reason must be one of {', '.join(REPORT_REASONS)}")
    if len(details) > MAX_DETAILS_CHARS or "\x00" in details:
        raise BadUserInput(f"details: at most {MAX_DETAILS_CHARS} characters, no NUL")
    return details.strip()


async def do_report_message(
    database: Database, viewer_id: str, conversation_id: int, seq: int, reason: str, details: str
) -> Reported:
    """A member reports another's message (idempotent per reporter and message)."""
    details = check_report(reason, details)
    async with database.transaction() as conn:
        if viewer_id not in await conversations.member_ids_among(conn, conversation_id, [viewer_id]):
            raise conversation_not_found(conversation_id)
        found = await messages.by_keys(conn, [(conversation_id, seq)])
        if not found:
            raise NotFound(f"message {seq} not found in conversation {conversation_id}")
        message = found[0]
        if message["sender_id"] == viewer_id:
            raise BadUserInput("a member cannot report their own message", reason="OWN_MESSAGE")
        earlier = await reports.find(conn, viewer_id, conversation_id, seq, None)
        if earlier is not None:
            return Reported(earlier, duplicate=True)
        if message["deleted_at"] is not None:
            raise Conflict(f"message {seq} was deleted", reason="MESSAGE_DELETED")
        report_id = await reports.insert_message_report(conn, viewer_id, conversation_id, seq, reason, details)
        if report_id is None:  # a concurrent report of the same message by the same reporter committed first
            report_id = await reports.find(conn, viewer_id, conversation_id, seq, None)
            assert report_id is not None
            return Reported(report_id, duplicate=True)
        return Reported(report_id, duplicate=False)


async def do_report_user(database: Database, viewer_id: str, user_id: str, reason: str, details: str) -> Reported:
    """Anyone reports another user (idempotent per reporter and user)."""
    details = check_report(reason, details)
    if user_id == viewer_id:
        raise BadUserInput("a user cannot report themselves")
    async with database.transaction() as conn:
        report_id = await reports.insert_user_report(conn, viewer_id, user_id, reason, details)
        if report_id is None:
            report_id = await reports.find(conn, viewer_id, 0, 0, user_id)
            assert report_id is not None
            return Reported(report_id, duplicate=True)
        return Reported(report_id, duplicate=False)
