"""A conversation's member."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import strawberry
from strawberry import ID
from strawberry.types import Info

from ...engine.registry import PER_EVENT
from ...errors import conversation_not_found
from ...models import MEMBER_FIELDS
from .. import ids
from ..loaders import Loaders
from ..scalars import Long
from .common import MemberRole, Node, check_record


@strawberry.type
class Member(Node):
    user_id: ID
    last_read_seq: Long
    conversation_id: strawberry.Private[int]
    # The membership row; None for a member built from a read.updated event, which
    # carries only the ids and the watermark: role and joinedAt are then loaded.
    row: strawberry.Private[Any] = None
    new_loaders: strawberry.Private[Callable[[], Loaders] | None] = None
    loaders: strawberry.Private[Loaders | None] = None

    @classmethod
    def from_row(cls, row: Any) -> Member:
        """row: a member's fields by name (models.MemberRecord: store.conversations.MEMBER_COLUMNS)."""
        return cls(
            user_id=ID(str(row.user_id)), last_read_seq=row.last_read_seq, conversation_id=row.conversation_id, row=row
        )

    @strawberry.field(metadata=PER_EVENT, description="Globally unique and stable; opaque.")
    def id(self) -> ID:
        return ID(ids.member_id(self.conversation_id, str(self.user_id)))

    @strawberry.field
    def role(self, info: Info) -> MemberRole:
        if self.row is not None:
            return MemberRole(self.row.role)
        return self._load_row(info, "role")  # type: ignore[return-value]

    @strawberry.field
    def joined_at(self, info: Info) -> datetime:
        if self.row is not None:
            return self.row.joined_at
        return self._load_row(info, "joined_at")  # type: ignore[return-value]

    async def _load_row(self, info: Info, column: str) -> Any:
        if self.loaders is None and self.new_loaders is not None:
            self.loaders = self.new_loaders()
        loaders = self.loaders or info.context.loaders
        row = await loaders.member.load((self.conversation_id, str(self.user_id)))
        if row is None:  # left since the event
            raise conversation_not_found(self.conversation_id)
        self.row = row
        return getattr(row, column) if column != "role" else MemberRole(row.role)


check_record(Member, MEMBER_FIELDS, "MemberRecord", "graphql/types/member.py")
