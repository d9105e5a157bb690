"""Presence and last seen in the API (docs/guide/drafts-and-presence.md): Query.presence,
setPresenceVisibility and the presenceChanged subscription, with their rate limits and price.

presenceChanged registers one dispatcher subscription per watched user, under that user's id (the
dispatcher offers a presence.changed event to the subscriptions registered under the user it is
about), and reads them all in one loop, parked while none has an event. Who may see what, and when
last seen is written: services/presence.py."""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import AsyncGenerator, Awaitable, Callable, Hashable
from datetime import datetime

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...edge.ratelimit import declare_limits
from ...engine.registry import PRICING, Pricing, at_most
from ...errors import Forbidden
from ...events import dispatch
from ...events.types import PRESENCE_CHANGED, PresenceChanged
from ...services.checks import check_user_ids
from ...services.presence import MAX_PRESENCE_USERS, SeenUser, do_set_visibility, read_presence, seen_after

declare_limits({"setPresenceVisibility": "typing"})
PRICING.declare(Pricing(lists={("Query", "presence"): at_most(MAX_PRESENCE_USERS)}))


@strawberry.enum(description="Who sees a user's presence (online and last seen), besides the user.")
class PresenceVisibility(enum.Enum):
    EVERYONE = strawberry.enum_value("EVERYONE", description="Everyone who shares a conversation with them.")
    CONTACTS = strawberry.enum_value("CONTACTS", description="Those who share a direct conversation with them.")
    NOBODY = strawberry.enum_value("NOBODY", description="Nobody.")


@strawberry.type(
    description="A user's presence as the viewer may see it: only a user who shares a conversation with the "
    "viewer, within their PresenceVisibility (the viewer always sees their own)."
)
class UserPresence:
    user_id: ID
    visible: bool = strawberry.field(
        description="False: the viewer may not see this user's presence (online and lastSeenAt are null)."
    )
    online: bool | None = strawberry.field(description="A client of theirs is connected (a websocket), anywhere.")
    last_seen_at: datetime | None = strawberry.field(
        description="When their last connection closed, or their latest one opened, to the minute (written at most "
        "once a minute); null: never seen."
    )
    visibility: PresenceVisibility | None = strawberry.field(
        description="The viewer's own setting (setPresenceVisibility); null for anyone else."
    )

    @classmethod
    def of(cls, seen: SeenUser) -> UserPresence:
        return cls(
            user_id=ID(seen.user_id),
            visible=seen.visible,
            online=seen.online,
            last_seen_at=seen.last_seen_at,
            visibility=None if seen.visibility is None else PresenceVisibility(seen.visibility),
        )


def _online(info: Info) -> Callable[[list[Hashable]], Awaitable[set[Hashable]]]:
    presence = info.context.deps.presence
    if presence is not None:
        return presence.online

    async def nobody(users: list[Hashable]) -> set[Hashable]:
        return set()

    return nobody


def _users(user_ids: list[ID]) -> list[str]:
    return check_user_ids(user_ids, "userId", limit=MAX_PRESENCE_USERS)


@strawberry.type
class Query:
    @strawberry.field(
        description=f"These users' presence as the viewer may see it (at most {MAX_PRESENCE_USERS}), in order, "
        "each once."
    )
    async def presence(self, info: Info, user_ids: list[ID]) -> list[UserPresence]:
        ctx = info.context
        viewer = ctx.viewer_id
        seen = await read_presence(ctx.database, _online(info), viewer, _users(user_ids))
        return [UserPresence.of(s) for s in seen]


@strawberry.type
class Mutation:
    @strawberry.mutation(
        description="Who sees the viewer's presence (online and last seen) from now on; those who may no longer "
        "see it get visible: false on presenceChanged. Answers the viewer's own presence."
    )
    async def set_presence_visibility(self, info: Info, visibility: PresenceVisibility) -> UserPresence:
        ctx = info.context
        viewer = ctx.viewer_id
        await ctx.deps.limits.check("setPresenceVisibility", viewer)
        own, event = await do_set_visibility(ctx.database, _online(info), viewer, visibility.name)
        if ctx.deps.typing is not None:
            await ctx.deps.typing.publish(event)
        return UserPresence.of(own)


@strawberry.type
class Subscription:
    @strawberry.subscription(
        description=f"These users' presence (at most {MAX_PRESENCE_USERS}): first each one's now, then each "
        "change as it happens (a user's presence is asked afresh at every change: visible turns false when they "
        "stop sharing a conversation with the viewer or hide it). Ephemeral: a client that reconnects reads "
        "it again."
    )
    async def presence_changed(self, info: Info, user_ids: list[ID]) -> AsyncGenerator[UserPresence, None]:
        ctx = info.context
        viewer = ctx.viewer_id
        watched = _users(user_ids)
        dispatcher = ctx.deps.dispatcher
        async with contextlib.AsyncExitStack() as stack:
            subs: list[dispatch.Subscription] = [
                await stack.enter_async_context(dispatcher.subscribe(user, None, PRESENCE_CHANGED)) for user in watched
            ]
            last: dict[str, SeenUser] = {}
            for seen in await read_presence(ctx.database, _online(info), viewer, watched):  # after registering
                last[seen.user_id] = seen
                yield UserPresence.of(seen)
            async for event in _merged(subs):
                seen = await seen_after(ctx.database, viewer, PresenceChanged.from_wire(event))
                if last.get(seen.user_id) != seen:
                    last[seen.user_id] = seen
                    yield UserPresence.of(seen)


async def _merged(subs: list[dispatch.Subscription]) -> AsyncGenerator[dict, None]:
    """The events of several dispatcher subscriptions, as they come; a subscription ended by its user's
    app-wide ban (the dispatcher ends those registered under a banned user) is dropped, any other
    failure (fell behind) ends them all."""
    wake = asyncio.Event()
    while subs:
        took = False
        for sub in list(subs):
            try:
                event = sub.take()
            except Forbidden:  # the watched user was banned: nothing more comes of them
                subs.remove(sub)
                continue
            if event is dispatch.ENDED:
                subs.remove(sub)
            elif event is not None:
                took = True
                yield event  # type: ignore[misc]
        if took or not subs:
            continue
        wake.clear()
        for sub in subs:
            sub.park(wake.set)
        try:
            if not any(sub.has_events() or sub.failing() for sub in subs):
                await wake.wait()
        finally:
            for sub in subs:
                sub.unpark()
