"""App-wide bans as this process knows them (docs/guide/moderation.md).

Every request's viewer is checked against the list (graphql/context.py): a banned user's token is
refused with FORBIDDEN, reason BANNED, until the ban ends. The list learns a ban from its user.banned
event and a lifted ban from its user.unbanned event (the dispatcher calls `learn`, which also ends
a banned user's websockets here at once), and from the database every CHATGQL_BAN_REFRESH_SECONDS
(`keep_ban_list`): what a process that serves no subscriptions knows, and a backstop for the rest. Sends never depend on it: the database refuses a banned
sender's message from the ban's commit on (chat_send).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime

from ..db import Database
from ..errors import banned
from ..services.operator import active_bans

log = logging.getLogger(__name__)
EndSession = Callable[[], None]


class BanList:
    __slots__ = ("_until", "_learned", "_sessions")

    def __init__(self) -> None:
        self._until: dict[str, datetime | None] = {}  # user id -> when the ban ends (None: until lifted)
        self._learned: dict[str, float] = {}  # user id -> when an event told of the ban (monotonic)
        self._sessions: dict[str, set[EndSession]] = {}  # user id -> how to end each live websocket of theirs

    def check(self, user_id: str) -> None:
        """FORBIDDEN (reason BANNED) while user_id is banned."""
        if not self._until or user_id not in self._until:
            return
        until = self._until[user_id]
        if until is None or until.timestamp() > time.time():
            raise banned(None if until is None else until.isoformat())

    def learn(self, user_id: str, until: str | None, banned: bool) -> None:
        """A ban's event: refuse the user from now on, and end their websockets in this process; a lifted
        ban's: accept them again."""
        self._learned[user_id] = time.monotonic()
        if not banned:
            self._until.pop(user_id, None)
            return
        self._until[user_id] = None if until is None else datetime.fromisoformat(until)
        for end in list(self._sessions.get(user_id, ())):
            end()

    def replace(self, rows: Iterable[tuple[str, datetime | None]], keep_seconds: float) -> None:
        """The bans in force as read from the database; what an event told of a user in the last keep_seconds
        stands (the read may have started before it committed)."""
        now = time.monotonic()
        fresh: dict[str, datetime | None] = dict(rows)
        for user_id, learned in list(self._learned.items()):
            if now - learned > keep_seconds:
                del self._learned[user_id]
            elif user_id in self._until:
                fresh[user_id] = self._until[user_id]
            else:
                fresh.pop(user_id, None)
        self._until = fresh

    def session_started(self, user_id: str, end: EndSession) -> None:
        self._sessions.setdefault(user_id, set()).add(end)

    def session_ended(self, user_id: str, end: EndSession) -> None:
        ends = self._sessions.get(user_id)
        if ends is not None:
            ends.discard(end)
            if not ends:
                del self._sessions[user_id]


async def keep_ban_list(database: Database, bans: BanList, interval_seconds: float) -> None:
    """Reload the bans in force every interval_seconds (app.py runs it in every serving process)."""
    while True:
        try:
            rows = await active_bans(database)
            bans.replace(((row["user_id"], row["until"]) for row in rows), keep_seconds=2 * interval_seconds)
        except Exception:  # the next pass tries again; the list stays as it was
            log.warning("could not reload the app-wide bans", exc_info=True)
        await asyncio.sleep(interval_seconds)
