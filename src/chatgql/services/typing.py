"""Typing indicators: ephemeral, never written to PostgreSQL or the outbox.

check_typing reads (never writes) whether the viewer may type there and builds the event; the
caller puts it on the bus (events/ephemeral.py). Big groups (more members than
CHATGQL_BIG_GROUP_THRESHOLD): off, as Slack and Sendbird turn them off in large channels: the
call is answered (sent: false) and nothing is published.
"""

from __future__ import annotations

import time

from ..db import Database
from ..errors import conversation_not_found
from ..events.types import Typing
from ..store import membership


async def check_typing(
    database: Database, viewer_id: str, conversation_id: int, *, seconds: float, whole_up_to: int
) -> tuple[Typing, bool]:
    """(the typing event, whether to publish it): NOT_FOUND unless the viewer is a member; not
    published in a big group."""
    async with database.connection() as conn:
        members = await membership.member_count_if_member(conn, conversation_id, viewer_id)
    if members is None:
        raise conversation_not_found(conversation_id)
    until_ms = int((time.time() + seconds) * 1000)
    return Typing(conversation_id=conversation_id, user_id=viewer_id, until_ms=until_ms), members <= whole_up_to
