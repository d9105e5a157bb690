"""Presence and last seen: who is online (a connection open in any process), when each user was last
seen, and who may see either.

Online state is never stored: events/presence.py knows it across processes. PresenceTracker is told
as a user's first connection in this process opens and their last one here closes; it waits until
this process's presence entry says so, asks whether the user is online anywhere, writes their last
seen (at most once a minute per user: LAST_SEEN_EVERY_SECONDS, by this process's memory and by the
statement, which refuses an earlier write of any process) and puts a presence.changed event on the
bus (ephemeral, like typing); a last connection here closing while the user is online elsewhere
writes and tells nothing. Because each process asks only after its own entry changed, the last of
two processes to let a user go finds them offline. Time is the API's clock (Deps.clock).

Who sees a user's presence (online and last seen): the user; others who share a conversation with
them, within the user's visibility (store/presence.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..db import Database
from ..errors import BadUserInput
from ..events.types import PresenceChanged
from ..models import PRESENCE_VISIBILITIES
from ..runtime.tasks import process_task
from ..store import presence

log = logging.getLogger(__name__)

MAX_PRESENCE_USERS = 200  # users one presence or presenceChanged call may name
LAST_SEEN_EVERY = timedelta(seconds=presence.LAST_SEEN_EVERY_SECONDS)


@dataclass(frozen=True, slots=True)
class SeenUser:
    """A user's presence as the viewer may see it (visible False: nothing of it)."""

    user_id: str
    visible: bool
    online: bool | None = None
    last_seen_at: datetime | None = None
    visibility: str | None = None  # the viewer's own only


class PresenceTracker:
    """Last seen and presence.changed for the users whose connections open and close here."""

    def __init__(
        self,
        database: Database,
        online: Callable[[list[Hashable]], Awaitable[set[Hashable]]],
        settled: Callable[[], Awaitable[None]],
        publish: Callable[[PresenceChanged], Awaitable[None]],
        clock: Callable[[], datetime],
    ) -> None:
        self._database = database
        self._online = online
        self._settled = settled
        self._publish = publish
        self._clock = clock
        self._written: dict[str, datetime] = {}  # user -> when this process last wrote their last seen
        self._tasks: set[asyncio.Task] = set()

    def changed(self, user: Hashable, here: bool) -> None:
        """A user's first connection here opened (here) or their last one here closed."""
        task = process_task(self.settle(str(user), here), "presence-settle")  # not the connection's work
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settle(self, user: str, here: bool) -> None:
        """Find whether user is online anywhere, write their last seen, tell their watchers; a
        last connection here closing while one elsewhere stays open changes nothing they see."""
        try:
            await self._settled()
            online = bool(await self._online([user]))
            if online and not here:
                return
            last_seen = await self._touch(user)
            await self._publish(PresenceChanged(user_id=user, online=online, last_seen_at=last_seen))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001  presence is best effort: the next change tells again
            log.warning("presence: could not settle a user's presence", exc_info=True)

    async def _touch(self, user: str) -> datetime | None:
        now = self._clock()
        before = self._written.get(user)
        if before is not None and now - before < LAST_SEEN_EVERY:
            return None  # written here less than a minute ago: no statement (watchers read the stored one)
        async with self._database.connection() as conn:
            stored = await presence.touch_last_seen(conn, user, now)
        if stored == now:
            self._written[user] = now
            if len(self._written) > 100_000:  # forget the oldest: the statement refuses an early write anyway
                for stale in list(self._written)[:10_000]:
                    del self._written[stale]
        return stored

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def check_visibility(visibility: str) -> str:
    if visibility not in PRESENCE_VISIBILITIES:
        raise BadUserInput(f"visibility must be one of {', '.join(PRESENCE_VISIBILITIES)}")
    return visibility


async def read_presence(
    database: Database,
    online: Callable[[list[Hashable]], Awaitable[set[Hashable]]],
    viewer_id: str,
    user_ids: Sequence[str],
) -> list[SeenUser]:
    """Each of user_ids' presence (distinct, checked already) as the viewer may see it, in order."""
    async with database.connection() as conn:
        rows = {row["user_id"]: row for row in await presence.visible_to(conn, viewer_id, user_ids)}
    found = await online(list(rows)) if rows else set()
    return [
        SeenUser(
            user_id=user,
            visible=True,
            online=user in found,
            last_seen_at=rows[user]["last_seen_at"],
            visibility=rows[user]["visibility"] if user == viewer_id else None,
        )
        if user in rows
        else SeenUser(user_id=user, visible=False)
        for user in user_ids
    ]


async def seen_after(database: Database, viewer_id: str, event: PresenceChanged) -> SeenUser:
    """What the viewer may see of the user a presence.changed event is about (asked afresh: the viewer
    may have left the conversations they shared, the user may have changed their visibility)."""
    async with database.connection() as conn:
        rows = await presence.visible_to(conn, viewer_id, [event.user_id])
    if not rows:
        return SeenUser(user_id=event.user_id, visible=False)
    (row,) = rows
    return SeenUser(
        user_id=event.user_id,
        visible=True,
        online=event.online,
        last_seen_at=event.last_seen_at or row["last_seen_at"],
        visibility=row["visibility"] if event.user_id == viewer_id else None,
    )


async def do_set_visibility(
    database: Database,
    online: Callable[[list[Hashable]], Awaitable[set[Hashable]]],
    viewer_id: str,
    visibility: str,
) -> tuple[SeenUser, PresenceChanged]:
    """Who sees the viewer's presence from now on: the viewer's presence after it, and the event that
    makes their watchers ask again (the caller puts it on the bus)."""
    async with database.connection() as conn:
        await presence.set_visibility(conn, viewer_id, check_visibility(visibility))
    (own,) = await read_presence(database, online, viewer_id, [viewer_id])
    return own, PresenceChanged(user_id=viewer_id, online=bool(own.online), last_seen_at=own.last_seen_at)
