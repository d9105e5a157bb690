"""What sync answers: a conversation's messages and changes after a cursor."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import strawberry
from strawberry import ID

from ...db import Row
from ...events.types import CHANGE_KINDS
from ...events.types import MessageChange as MessageChange_
from ..scalars import Long
from .message import Message
from .thread import Thread


@strawberry.type
class ConversationSync:
    conversation_id: ID
    messages: list[Message] = strawberry.field(description="Messages with seq > afterSeq, ascending, at most `limit`.")
    has_more: bool = strawberry.field(description="More messages remain after the last one returned.")
    last_seq: Long
    last_read_seq: Long
    too_long: bool = strawberry.field(
        default=False,
        description="True when afterSeq was more than CHATGQL_MAX_CATCH_UP (default 1,000) messages behind "
        "lastSeq: the gap is too long to fill, so `messages` are the newest `limit` messages, not those right "
        "after afterSeq, and the ones in between were skipped (as Telegram's channelDifferenceTooLong). The "
        "client should drop what it holds of this conversation, keep these, use lastSeq as its next afterSeq, "
        "and load older messages with messages(before:) only as far as it needs. False otherwise.",
    )
    changes: list[MessageChange] = strawberry.field(
        default_factory=list,
        description="With afterChangeSeq: the changes after it (edits, deletes, reactions), ascending by changeSeq, at most "
        "`limit`, each with the message as it is now. Empty without afterChangeSeq.",
    )
    last_change_seq: Long = strawberry.field(default=Long(0), description="The conversation's newest change seq.")
    changes_have_more: bool = strawberry.field(
        default=False, description="More changes remain after the last one returned: sync again from it."
    )
    changes_too_long: bool = strawberry.field(
        default=False,
        description="True when afterChangeSeq was more than CHATGQL_MAX_CATCH_UP changes behind lastChangeSeq: "
        "no changes are returned; re-read the messages the client holds (messages(after:)) and go on from "
        "lastChangeSeq.",
    )
    threads: list[Thread] = strawberry.field(
        default_factory=list,
        description="With afterThreadVersion: the viewer's threads of this conversation whose version "
        "(Thread.version) is above it, ascending by version, at most `limit`, each as the viewer sees it now: "
        "replies while they follow it, deleted replies, their reads, follows and unfollows on any device "
        "(unfollowed threads come too, following: false). Empty without afterThreadVersion.",
    )
    last_thread_version: Long = strawberry.field(
        default=Long(0),
        description="The viewer's newest thread version in this conversation (0 for none): the next "
        "afterThreadVersion once threadsHaveMore is false.",
    )
    threads_have_more: bool = strawberry.field(
        default=False,
        description="More threads changed after the last one returned: sync again from its version.",
    )


if TYPE_CHECKING:

    class MessageChangeKind(enum.Enum):
        """Its values are events.types.CHANGE_KINDS' keys."""

else:  # one value per change kind the events define (events.types.CHANGE_KINDS), in their order
    MessageChangeKind = strawberry.enum(
        enum.Enum("MessageChangeKind", {kind: kind for kind in CHANGE_KINDS}),
        description="What a change did to its message.",
    )


@strawberry.enum(description="Why the operator changed a message (MessageChange.changedBy is null).")
class ChangeReason(enum.Enum):
    ERASE = strawberry.enum_value("ERASE", description="An erase of all of the sender's messages (chatgql erase-user).")
    RETENTION = strawberry.enum_value("RETENTION", description="The retention policy (CHATGQL_RETENTION_DAYS).")
    MODERATION = strawberry.enum_value(
        "MODERATION", description="The operator deleted a reported message (chatgql reports resolve)."
    )
    EXPIRED = strawberry.enum_value(
        "EXPIRED", description="A disappearing message: its time to live ran out (setMessageTtl)."
    )


@strawberry.type(
    description="A change to a message (`kind` says what it did): it takes the conversation's next changeSeq, never "
    "a seq. `message` is the message as it is now, with its id, so a caching client updates it with no code."
)
class MessageChange:
    conversation_id: ID
    change_seq: Long
    kind: MessageChangeKind
    seq: Long = strawberry.field(description="The changed message's seq.")
    changed_by: ID | None = strawberry.field(description="Who made the change; null: the operator (see reason).")
    reason: ChangeReason | None = strawberry.field(
        default=None, description="Why the operator made the change; null for a user's change."
    )
    message: Message

    @classmethod
    def from_row(cls, row: Row) -> MessageChange:
        """row: services.changes' (change_seq, kind, changed_by, message columns...)."""
        message = Message.from_row(row)
        return cls(
            conversation_id=message.conversation_id,
            change_seq=Long(row["change_seq"]),
            kind=MessageChangeKind(row["kind"]),
            seq=message.seq,
            changed_by=None if row["changed_by"] is None else ID(str(row["changed_by"])),
            reason=None if row["reason"] is None else ChangeReason(row["reason"]),
            message=message,
        )

    @classmethod
    def from_event(cls, event: MessageChange_) -> MessageChange:
        message = Message.from_row(event)
        return cls(
            conversation_id=message.conversation_id,
            change_seq=Long(event.change_seq),
            kind=MessageChangeKind(event.KIND),
            seq=message.seq,
            changed_by=None if event.user_id is None else ID(str(event.user_id)),
            reason=None if event.reason is None else ChangeReason(event.reason),
            message=message,
        )


@strawberry.input
class ChangeCursor:
    conversation_id: ID
    after_change_seq: Long = strawberry.field(
        description="The change cursor the client holds for this conversation (its lastChangeSeq when last read)."
    )


@strawberry.input
class SyncCursor:
    conversation_id: ID
    after_seq: Long = strawberry.field(
        description="The highest seq the client holds for this conversation (0 for none)."
    )
    after_change_seq: Long | None = strawberry.field(
        default=None,
        description="The change cursor the client holds (the conversation's lastChangeSeq when it last read it; "
        "0 for none). Given: sync also answers the changes after it (ConversationSync.changes); null: no changes.",
    )
    after_thread_version: Long | None = strawberry.field(
        default=None,
        description="The thread version the client holds for this conversation (lastThreadVersion when it last "
        "synced, or the version of the last thread it got; 0 for none). Given: sync also answers the viewer's "
        "threads that changed after it (ConversationSync.threads); null: no threads.",
    )
