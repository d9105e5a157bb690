"""Saved messages and reminders in the API: saveMessage, unsaveMessage, Query.savedMessages and
Query.savedChanges, the subscriptions savedMessageChanged and reminderDue, with their rate limits and
prices. Who may save, the versions and the reminders' firing: services/saved.py."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Annotated, Any

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...edge.ratelimit import declare_limits
from ...engine.registry import PRICING, Pricing, count
from ...events.types import REMINDER_DUE, SAVED_CHANGED, ReminderDue, SavedChanged
from ...services.checks import check_id, check_seq
from ...services.saved import (
    MAX_CHANGES_PAGE,
    MAX_SAVED_PAGE,
    SaveResult,
    do_save,
    do_unsave,
    encode_cursor,
    read_changes,
    read_saved,
)
from ..scalars import Long
from ..types import Message

_ALL = Long(0)  # savedChanges from the first change
declare_limits({"saveMessage": "send", "unsaveMessage": "send"})
PRICING.declare(
    Pricing(
        lists={
            ("SavedMessagePage", "nodes"): count("first", default=20, cap=MAX_SAVED_PAGE),
            ("SavedChanges", "changes"): count("first", default=100, cap=MAX_CHANGES_PAGE),
        }
    )
)


@strawberry.type(description="A message the viewer saved: when, and when they are (or were) reminded of it.")
class SavedMessage:
    conversation_id: ID
    seq: Long
    saved_at: datetime
    remind_at: datetime | None = strawberry.field(description="When the viewer is reminded of it; null: never.")
    reminded_at: datetime | None = strawberry.field(
        description="When the reminder fired (reminderDue); null while it is pending, or with no reminder."
    )
    version: Long = strawberry.field(description="The viewer's saved version its last change took.")
    message: Message

    @classmethod
    def of(cls, row: Any, message: Message) -> SavedMessage:
        return cls(
            conversation_id=ID(str(row["conversation_id"])),
            seq=Long(row["seq"]),
            saved_at=row["saved_at"],
            remind_at=row["remind_at"],
            reminded_at=row["reminded_at"],
            version=Long(row["version"]),
            message=message,
        )


@strawberry.type(description="A page of the viewer's saved messages, newest save first.")
class SavedMessagePage:
    nodes: list[SavedMessage]
    has_next_page: bool
    end_cursor: str | None = strawberry.field(description="The `after` of the next page; null on an empty page.")
    version: Long = strawberry.field(
        description="The viewer's saved version as the page was read: hold it, and ask savedChanges after it."
    )


@strawberry.type(description="One saved row as a change left it (savedChanges).")
class SavedChange:
    conversation_id: ID
    seq: Long
    version: Long
    saved: bool = strawberry.field(
        description="False: unsaved, or the viewer no longer reads the message (deleted, left): drop it."
    )
    saved_at: datetime | None
    remind_at: datetime | None
    reminded_at: datetime | None
    message: Message | None = strawberry.field(description="Null unless saved.")


@strawberry.type(description="What changed of the viewer's saved messages after a version, in version order.")
class SavedChanges:
    changes: list[SavedChange]
    has_more: bool = strawberry.field(description="More follow: ask again after the last change's version.")
    version: Long = strawberry.field(description="The viewer's latest saved version.")


@strawberry.type
class SaveMessagePayload:
    saved: SavedMessage | None = strawberry.field(description="The saved row after the call; null: not saved.")
    message: Message | None = strawberry.field(description="The message; null when the viewer no longer reads it.")
    changed: bool = strawberry.field(description="False when the call changed nothing (unsaving what is not saved).")

    @classmethod
    def of(cls, result: SaveResult) -> SaveMessagePayload:
        message = None if result.message is None else Message.from_row(result.message)
        saved = None if result.saved is None or message is None else SavedMessage.of(result.saved, message)
        return cls(saved=saved, message=message, changed=result.changed)


@strawberry.type(description="A save or an unsave, from any of the viewer's devices (savedMessageChanged).")
class SavedMessageEvent:
    conversation_id: ID
    seq: Long
    version: Long
    saved: bool
    saved_at: datetime | None
    remind_at: datetime | None


@strawberry.type(description="A reminder the viewer set fired (reminderDue): once, at its time.")
class ReminderEvent:
    conversation_id: ID
    seq: Long
    version: Long
    remind_at: datetime
    reminded_at: datetime

    @strawberry.field(description="The message, as the viewer reads it now; null if they no longer do.")
    async def message(self, info: Info) -> Message | None:
        row = await info.context.fresh_loaders().readable_message.load((int(self.conversation_id), self.seq))
        return None if row is None else Message.from_row(row)


@strawberry.type
class Mutation:
    @strawberry.mutation(
        description="Save a message of a conversation the viewer reads (else NOT_FOUND; a deleted one: CONFLICT, "
        "reason MESSAGE_DELETED), to be reminded at remindAt (reminderDue, once). Saving it again replaces its "
        "reminder. Only the viewer sees their saved messages; each change takes their next saved version "
        "and reaches all of their devices (savedMessageChanged)."
    )
    async def save_message(
        self,
        info: Info,
        conversation_id: ID,
        seq: Long,
        remind_at: Annotated[
            datetime | None,
            strawberry.argument(
                description="When to be reminded: a future time with its offset (else BAD_USER_INPUT, reason "
                "REMIND_AT_IN_THE_PAST); null: no reminder."
            ),
        ] = None,
    ) -> SaveMessagePayload:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        at = check_seq(seq)
        await ctx.deps.limits.check("saveMessage", viewer)
        result = await do_save(ctx.database, viewer, cid, at, now=ctx.deps.clock(), remind_at=remind_at)
        return SaveMessagePayload.of(result)

    @strawberry.mutation(
        description="Unsave a message (its reminder with it); one that is not saved changes nothing (changed false)."
    )
    async def unsave_message(self, info: Info, conversation_id: ID, seq: Long) -> SaveMessagePayload:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        at = check_seq(seq)
        await ctx.deps.limits.check("unsaveMessage", viewer)
        return SaveMessagePayload.of(await do_unsave(ctx.database, viewer, cid, at))


@strawberry.type
class Query:
    @strawberry.field(
        description=f"The viewer's saved messages, newest save first: those they still read (a deleted message, "
        f"or one of a conversation they left, leaves the list). first: 1..{MAX_SAVED_PAGE}; after: the previous "
        "page's endCursor."
    )
    async def saved_messages(self, info: Info, first: int = 20, after: str | None = None) -> SavedMessagePage:
        ctx = info.context
        page = await read_saved(ctx.database, ctx.viewer_id, first, after)
        nodes = [SavedMessage.of(row, Message.from_row(row)) for row in page.rows]
        return SavedMessagePage(
            nodes=nodes,
            has_next_page=page.has_next,
            end_cursor=encode_cursor(page.rows[-1]) if page.rows else None,
            version=Long(page.version),
        )

    @strawberry.field(
        description="How a device catches up with the viewer's saved messages: every row changed after "
        f"afterVersion (a version it holds; 0: all), in version order, at most first (1..{MAX_CHANGES_PAGE})."
    )
    async def saved_changes(self, info: Info, after_version: Long = _ALL, first: int = 100) -> SavedChanges:
        ctx = info.context
        page = await read_changes(ctx.database, ctx.viewer_id, after_version, first)
        changes = []
        for row in page.rows:
            live = bool(row["live"]) and not row["removed"]
            changes.append(
                SavedChange(
                    conversation_id=ID(str(row["conversation_id"])),
                    seq=Long(row["seq"]),
                    version=Long(row["version"]),
                    saved=live,
                    saved_at=row["saved_at"] if live else None,
                    remind_at=row["remind_at"] if live else None,
                    reminded_at=row["reminded_at"] if live else None,
                    message=Message.from_row(row) if live else None,
                )
            )
        return SavedChanges(changes=changes, has_more=page.has_more, version=Long(page.version))


@strawberry.type
class Subscription:
    @strawberry.subscription(
        description="The viewer's saves and unsaves, from any of their devices, live (catch up first with "
        "savedChanges after the version you hold). Only the viewer gets these."
    )
    async def saved_message_changed(self, info: Info) -> AsyncGenerator[SavedMessageEvent, None]:
        ctx = info.context
        async with ctx.deps.dispatcher.subscribe(ctx.viewer_id, None, SAVED_CHANGED) as subscription:
            async for event in subscription:
                change = SavedChanged.from_wire(event)
                yield SavedMessageEvent(
                    conversation_id=ID(str(change.conversation_id)),
                    seq=Long(change.seq),
                    version=Long(change.version),
                    saved=change.saved,
                    saved_at=change.saved_at,
                    remind_at=change.remind_at,
                )

    @strawberry.subscription(
        description="The viewer's reminders as they fire (saveMessage(remindAt:)), once each. Only the viewer "
        "gets these; a reminder that fired while no device listened shows in savedChanges (remindedAt)."
    )
    async def reminder_due(self, info: Info) -> AsyncGenerator[ReminderEvent, None]:
        ctx = info.context
        async with ctx.deps.dispatcher.subscribe(ctx.viewer_id, None, REMINDER_DUE) as subscription:
            async for event in subscription:
                due = ReminderDue.from_wire(event)
                yield ReminderEvent(
                    conversation_id=ID(str(due.conversation_id)),
                    seq=Long(due.seq),
                    version=Long(due.version),
                    remind_at=due.remind_at,
                    reminded_at=due.reminded_at,
                )
