"""Managing a group in the API: renameGroup, leaveGroup, setMemberRole, and their live event.

Mutation inherits GroupMutation's fields (kept apart from mutations.py); the subscription
(conversationUpdated) is in subscriptions.py. Who may do what: services/groups.py."""

from __future__ import annotations

import enum
from collections.abc import Callable

import strawberry
from strawberry import ID
from strawberry.types import Info

from ..errors import NotFound
from ..services import groups
from ..services.checks import check_id, check_text, check_user_id
from .loaders import Loaders
from .queries import load_conversation
from .types import _EVENT_CONVERSATION, Conversation, Member, MemberRole, RemoveMemberPayload


@strawberry.enum(description="What changed in a group (conversationUpdated).")
class ConversationChange(enum.Enum):
    RENAMED = "RENAMED"
    ROLE_CHANGED = "ROLE_CHANGED"
    MEMBER_LEFT = "MEMBER_LEFT"
    MEMBER_BANNED = "MEMBER_BANNED"
    MEMBER_UNBANNED = "MEMBER_UNBANNED"
    SETTINGS_CHANGED = "SETTINGS_CHANGED"


@strawberry.type
class GroupMutation:
    @strawberry.mutation(
        description="The OWNER or an ADMIN renames a group (a DIRECT conversation has no title: FORBIDDEN). "
        "The members are told (conversationUpdated, RENAMED)."
    )
    async def rename_group(self, info: Info, conversation_id: ID, title: str) -> Conversation:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        title = check_text(title, "title", max_chars=ctx.settings.max_title_chars)
        await groups.do_rename_group(ctx.database, viewer, cid, title)
        ctx.forget_conversation(cid)
        return await load_conversation(info, cid)

    @strawberry.mutation(
        description="Any member leaves a group (as removeMember of oneself). When the OWNER leaves, the "
        "longest-standing ADMIN becomes OWNER, or with no ADMIN the longest-standing member. The members "
        "and the one who left are told (conversationUpdated, MEMBER_LEFT; ROLE_CHANGED for a new OWNER)."
    )
    async def leave_group(self, info: Info, conversation_id: ID) -> RemoveMemberPayload:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        await groups.do_leave_group(ctx.database, viewer, cid)
        ctx.forget_conversation(cid)
        return RemoveMemberPayload(conversation_id=ID(str(cid)), user_id=ID(str(viewer)))

    @strawberry.mutation(
        description="The OWNER or an ADMIN sets a member's role. Only the OWNER changes the OWNER's role or "
        "makes another member OWNER (then the old OWNER becomes ADMIN); an ADMIN demoting the OWNER is "
        "FORBIDDEN, the OWNER demoting themselves BAD_USER_INPUT. The members are told "
        "(conversationUpdated, ROLE_CHANGED)."
    )
    async def set_member_role(self, info: Info, conversation_id: ID, user_id: ID, role: MemberRole) -> Member:
        ctx = info.context
        viewer = ctx.viewer_id
        cid = check_id(conversation_id, "conversationId")
        member = check_user_id(user_id, "userId")
        await groups.do_set_member_role(ctx.database, viewer, cid, member, role.value)
        ctx.forget_conversation(cid)
        row = await ctx.fresh_loaders().member.load((cid, member))
        if row is None:  # left since
            raise NotFound(f"user {member} is not a member of conversation {cid}")
        return Member.from_row(row)


@strawberry.type(
    description="A group was managed: renamed, a member's role changed, a member left or was banned (the one "
    "who left or was banned gets this too, on every device, before their subscriptions to it end), a ban was "
    "lifted, or the group's settings changed (slowModeSeconds)."
)
class ConversationUpdatedEvent:
    conversation_id: ID
    change: ConversationChange
    user_id: ID = strawberry.field(description="Who did it.")
    member_id: ID = strawberry.field(description="Whom it concerns (for RENAMED: who renamed it).")
    title: str | None = strawberry.field(description="The group's title after the change.")
    role: MemberRole | None = strawberry.field(description="memberId's role after the change; null when they left.")
    new_loaders: strawberry.Private[Callable[[], Loaders] | None] = None

    @strawberry.field(description=_EVENT_CONVERSATION)
    async def conversation(self, info: Info) -> Conversation | None:
        loaders = self.new_loaders() if self.new_loaders is not None else info.context.loaders
        row = await loaders.conversation.load(int(self.conversation_id))
        return Conversation.from_row(row) if row is not None else None
