"""Drafts in the API (docs/guide/drafts.md): saveDraft, Query.drafts and the draftUpdated subscription,
with their rate limit and price. A draft is its member's alone: no other user reads it, by any field.
Who may, what clears a draft: services/drafts.py."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import datetime
from typing import Annotated

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...db import Row
from ...edge.ratelimit import declare_limits
from ...engine.registry import PRICING, Pricing, at_most
from ...errors import conversation_not_found
from ...events.types import DRAFT_UPDATED, DraftUpdated
from ...services.checks import check_id
from ...services.drafts import MAX_DRAFTS, check_draft_body, do_save_draft, read_drafts
from ..scalars import Long

declare_limits({"saveDraft": "typing"})
PRICING.declare(Pricing(lists={("Query", "drafts"): at_most(MAX_DRAFTS)}))


@strawberry.type(
    description="The viewer's unsent text of a conversation (replyTo null) or of a thread (replyTo: the message "
    "it will be sent in reply to). Only its member reads it, on any of their devices."
)
class Draft:
    conversation_id: ID
    reply_to: Long | None = strawberry.field(description="The replyTo it will be sent with; null: none.")
    body: str = strawberry.field(description='The text; "" when it was cleared (saveDraft with body "").')
    base_seq: Long = strawberry.field(
        description="The conversation's lastSeq when it was saved: a message of the viewer's with a higher seq "
        "and the same replyTo clears it (drafts leaves it out from then on; a client drops it when it sees one)."
    )
    version: Long = strawberry.field(
        description="Grows with every save of this draft (from any device): keep the highest one seen."
    )
    updated_at: datetime

    @classmethod
    def of(cls, row: Row | DraftUpdated) -> Draft:
        """From a row of store.drafts.DRAFT_COLUMNS or a draft.updated event (the same names)."""
        get = row.__getitem__ if isinstance(row, Row) else lambda name: getattr(row, name)
        root = get("root_seq")
        return cls(
            conversation_id=ID(str(get("conversation_id"))),
            reply_to=Long(root) if root else None,
            body=get("body"),
            base_seq=Long(get("base_seq")),
            version=Long(get("version")),
            updated_at=get("updated_at"),
        )


@strawberry.type
class Mutation:
    @strawberry.mutation(
        description='Save the viewer\'s draft of a conversation, or of a thread with replyTo; body "" clears it '
        "(null then: there was none). Every device of the viewer's is told (draftUpdated); nobody else. A message "
        "the viewer sends with the same replyTo clears it, with no call. NOT_FOUND unless a member; a replyTo "
        "that is no message of the conversation: BAD_USER_INPUT (reason REPLY_TO_NOT_FOUND)."
    )
    async def save_draft(
        self,
        info: Info,
        conversation_id: ID,
        body: str,
        reply_to: Annotated[
            Long | None, strawberry.argument(description="The thread's root (the replyTo it will be sent with).")
        ] = None,
    ) -> Draft | None:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        text = check_draft_body(body, ctx.settings.max_body_chars)
        await ctx.deps.limits.check("saveDraft", viewer)
        row = await do_save_draft(ctx.database, viewer, cid, reply_to, text, ctx.deps.clock())
        return None if row is None else Draft.of(row)


@strawberry.type
class Query:
    @strawberry.field(
        description=f"The viewer's drafts (never empty ones, never one a later message of theirs cleared), the "
        f"newest save first, at most {MAX_DRAFTS}: of these conversations, or of all of theirs. A device coming "
        "back online reads them beside sync."
    )
    async def drafts(self, info: Info, conversation_ids: list[ID] | None = None) -> list[Draft]:
        ctx = info.context
        viewer = ctx.viewer_id
        cids = None if conversation_ids is None else [check_id(c, "conversationIds") for c in conversation_ids]
        return [Draft.of(row) for row in await read_drafts(ctx.database, viewer, cids)]


@strawberry.type
class Subscription:
    @strawberry.subscription(
        description='The viewer\'s drafts as their devices save and clear them (body ""), in one conversation or '
        "in all of theirs. Only the viewer gets these."
    )
    async def draft_updated(
        self, info: Info, conversation_id: ID | None = strawberry.UNSET
    ) -> AsyncGenerator[Draft, None]:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = None
        if conversation_id is not None and conversation_id is not strawberry.UNSET:
            cid = check_id(conversation_id, "conversationId")
            if await ctx.fresh_loaders().conversation.load(cid) is None:  # asked afresh: the connection may be old
                raise conversation_not_found(cid)
        async with ctx.deps.dispatcher.subscribe(viewer, cid, DRAFT_UPDATED) as subscription:
            async for event in subscription:
                yield Draft.of(DraftUpdated.from_wire(event))
