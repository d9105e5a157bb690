"""Query.node(id:) and Query.nodes(ids:): any cached object, fetched again by its global id.

The same rule as everywhere else: nobody sees a conversation they are not
in. An id that is malformed, names nothing, or names something in a
conversation the viewer is not a member of (a message, a member, the
conversation itself) is answered null, all alike, so ids cannot be probed;
another user's Viewer id is null too. Everything goes through the request's
loaders, so nodes(ids:) costs one batched statement per kind of read
(conversations, messages, members) however many ids it is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from strawberry import ID
from strawberry.types import Info

from ..errors import LimitExceeded
from . import ids
from .types import Conversation, Member, Message, Node, Viewer

MAX_NODES = 200  # ids in one nodes(ids:) call, like a page


async def load_node(info: Info, text: str) -> Node | None:
    found = ids.parse(text)
    if found is None:
        return None
    loaders = info.context.loaders
    viewer = info.context.viewer_id
    if found.type_name == "Viewer":
        return Viewer(user_id=ID(viewer)) if found.user_id == viewer else None
    conversation_id = found.keys[0]
    if found.type_name == "Conversation":
        row = await loaders.conversation.load(conversation_id)
        return Conversation.from_row(row) if row is not None else None
    # Membership and the object itself are read together (both batched); the object
    # is thrown away unless the viewer is a member.
    if found.type_name == "Message":
        row, message = await asyncio.gather(
            loaders.conversation.load(conversation_id), loaders.message.load(found.keys)
        )
        return Message.from_row(message) if row is not None and message is not None else None
    row, member = await asyncio.gather(
        loaders.conversation.load(conversation_id), loaders.member.load((conversation_id, str(found.user_id)))
    )
    member = member if row is not None else None
    return Member.from_row(member) if member is not None else None


async def load_nodes(info: Info, texts: Sequence[str]) -> list[Node | None]:
    if len(texts) > MAX_NODES:
        raise LimitExceeded(f"at most {MAX_NODES} ids in one nodes call")
    return list(await asyncio.gather(*(load_node(info, text) for text in texts)))
