"""A ban that keeps a user out of a group (services/bans.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import strawberry
from strawberry import ID


@strawberry.type(description="A user kept out of a group: removed, and not to be added back while the ban holds.")
class ConversationBan:
    conversation_id: ID
    user_id: ID
    until: datetime | None = strawberry.field(description="When the ban ends; null: until unbanned.")
    banned_by: ID | None = strawberry.field(description="Who banned; null: the operator.")
    reason: str | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: Any) -> ConversationBan:
        return cls(
            conversation_id=ID(str(row["conversation_id"])),
            user_id=ID(row["user_id"]),
            until=row["until"],
            banned_by=None if row["banned_by"] is None else ID(row["banned_by"]),
            reason=row["reason"],
            created_at=row["created_at"],
        )
