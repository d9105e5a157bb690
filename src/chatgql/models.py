"""Table definitions, and the message and member records. Alembic owns the schema; these mirror it."""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

metadata = MetaData()

# A user id: the identity provider's subject, text of 1..255 characters (services/checks.check_user_id),
# stored as text COLLATE "C" (migration 0014_text_user_ids): compared byte by byte, ordered so.
USER_ID_TYPE = Text(collation="C")
# A user id field of an event or a record: the events' wire form reads a number there as its decimal text
# (an event written before 0014_text_user_ids, still in the outbox or on Kafka: events/types.py).
UserId = Annotated[str, "user id"]

conversation = Table(
    "conversation",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("type", Text, nullable=False),
    Column("title", Text),
    Column("last_seq", BigInteger, nullable=False, server_default="0"),
    Column("last_message_at", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("created_by", USER_ID_TYPE),  # a GROUP's creator (0004); NULL for DIRECT and older rows
    # conversation_member rows, kept by triggers on conversation_member (0007)
    Column("member_count", Integer, nullable=False, server_default="0"),
    # the newest change seq (edits, deletes: message_change), a second gap-free counter (0010)
    Column("last_change_seq", BigInteger, nullable=False, server_default="0"),
    # the seq up to which the retention policy has erased: its next pass starts after it (0012_erase)
    Column("retained_seq", BigInteger, nullable=False, server_default="0"),
    # a MEMBER sends at most once per this many seconds; 0: off (0019_slow_mode)
    Column("slow_mode_seconds", Integer, nullable=False, server_default="0"),
    # disappearing messages: each message sent while > 0 is erased this many seconds after it (0026)
    Column("message_ttl_seconds", Integer, nullable=False, server_default="0"),
    # members added from now on read only the messages sent after they joined (0024_history_visibility)
    Column("hide_history", Boolean, nullable=False, server_default="false"),
    # thread-only replies so far: out of the conversation's unread (0029_threads)
    Column("thread_only_count", BigInteger, nullable=False, server_default="0"),
    CheckConstraint("type IN ('DIRECT', 'GROUP')", name="conversation_type_check"),
    CheckConstraint("slow_mode_seconds >= 0", name="conversation_slow_mode_seconds_check"),
    CheckConstraint("message_ttl_seconds >= 0", name="conversation_message_ttl_seconds_check"),
    CheckConstraint("last_seq >= 0", name="conversation_last_seq_check"),
    Index(
        "conversation_created_by_idx",
        "created_by",
        "created_at",
        postgresql_where=text("type = 'GROUP' AND created_by IS NOT NULL"),
    ),
)

conversation_member = Table(
    "conversation_member",
    metadata,
    Column("conversation_id", BigInteger, ForeignKey("conversation.id"), nullable=False),
    Column("user_id", USER_ID_TYPE, nullable=False),
    Column("role", Text, nullable=False, server_default="MEMBER"),
    Column("last_read_seq", BigInteger, nullable=False, server_default="0"),
    Column("joined_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # deleted messages above last_read_seq (0010; a trigger follows watermark moves)
    Column("unread_deleted", BigInteger, nullable=False, server_default="0"),
    # the member's own settings and own unread start (0011)
    Column("muted", Boolean, nullable=False, server_default="false"),
    Column("muted_until", DateTime(timezone=True)),
    Column("archived_seq", BigInteger),
    Column("keep_archived", Boolean, nullable=False, server_default="false"),
    Column("pinned_at", DateTime(timezone=True)),
    Column("own_read_seq", BigInteger),
    Column("own_read_below", BigInteger),
    Column("delivered_seq", BigInteger, nullable=False, server_default="0"),
    # private read receipts (0011b): the member's choice here (null: the user's default), and what applies
    Column("receipts_override", Boolean),
    Column("receipts_private", Boolean, nullable=False, server_default="false"),
    # the member's last send while slow mode was on (0019_slow_mode)
    Column("last_sent_at", DateTime(timezone=True)),
    # the first seq the member may read: 1, or lastSeq + 1 when added to a group hiding its history (0021)
    Column("visible_from_seq", BigInteger, nullable=False, server_default="1"),
    PrimaryKeyConstraint("conversation_id", "user_id"),
    CheckConstraint("role IN ('OWNER', 'ADMIN', 'MEMBER')", name="conversation_member_role_check"),
    CheckConstraint("last_read_seq >= 0", name="conversation_member_last_read_seq_check"),
    CheckConstraint("unread_deleted >= 0", name="conversation_member_unread_deleted_check"),
    CheckConstraint("visible_from_seq >= 1", name="conversation_member_visible_from_seq_check"),
    Index("conversation_member_user_id_idx", "user_id"),
    # seenByCount and seen as index-only scans (0007)
    Index("conversation_member_read_idx", "conversation_id", "last_read_seq", postgresql_include=["user_id"]),
)

message = Table(
    "message",
    metadata,
    Column("conversation_id", BigInteger, ForeignKey("conversation.id"), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("sender_id", USER_ID_TYPE, nullable=False),
    Column("client_msg_id", UUID(as_uuid=True), nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("edited_at", DateTime(timezone=True)),  # 0010
    Column("deleted_at", DateTime(timezone=True)),  # a tombstone: body '' (0010)
    Column("deleted_by", USER_ID_TYPE),
    Column("reply_to_seq", BigInteger),  # the message it quotes, in the same conversation (0010c)
    Column("reply_count", Integer, nullable=False, server_default="0"),
    Column("last_reply_at", DateTime(timezone=True)),
    Column("quote_conversation_id", BigInteger),  # the message it quotes, in any conversation (0027)
    Column("quote_seq", BigInteger),
    Column("forwarded", Boolean, nullable=False, server_default="false"),
    PrimaryKeyConstraint("conversation_id", "seq"),
    UniqueConstraint("conversation_id", "client_msg_id", name="message_client_msg_id_key"),
    CheckConstraint("seq > 0", name="message_seq_check"),
    Index(
        "message_reply_idx",
        "conversation_id",
        "reply_to_seq",
        "seq",
        postgresql_where=text("reply_to_seq IS NOT NULL"),
    ),
    # 16 hash partitions (migration 0005); every key starts with the partition key
    postgresql_partition_by="HASH (conversation_id)",
)


def _lifecycle(default: object) -> object:
    """A field that changes after the send (edits, deletes, replies): an inbox page whose last message
    selects none of them reads the message without them (store.conversations, graphql Message.PLAIN_FIELDS)."""
    return dataclasses.field(default=default, metadata={"lifecycle": True})


@dataclass(frozen=True, slots=True, kw_only=True)
class SentMessage:
    """What a send gives of a message: the fields message.new carries from its producer (the statement that
    stores it adds seq and created_at: events/types.py MessageNew)."""

    conversation_id: int
    sender_id: UserId
    client_msg_id: uuid.UUID
    body: str
    reply_to_seq: int | None = _lifecycle(None)  # type: ignore[assignment]  # the seq of the message it quotes
    quote_conversation_id: int | None = _lifecycle(None)  # type: ignore[assignment]  # sendMessage(quote:)
    quote_seq: int | None = _lifecycle(None)  # type: ignore[assignment]
    # forwardMessage (no key of the original); a send's message.new leaves it out (None) unless true
    forwarded: bool | None = _lifecycle(None)  # type: ignore[assignment]


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageRecord(SentMessage):
    """A message as it is stored: the one list of a message's fields. Each is a column of `message` (below:
    checked on import), selected as store.messages.MESSAGE_COLUMNS (and as lm_<name> by the inbox page, whose
    JSON writes each as its type says: store.conversations.LAST_MESSAGE_JSON_VALUES); a change event carries
    them under their camelCase names (events/types.py MessageChange inherits them); graphql's Message is built
    from them by name (Message.from_row; graphql/types/message.py checks it on import). A new field of a
    message is a field here, its column (a migration and the table below) and a field of the same name on
    Message (strawberry.Private if clients do not see it)."""

    seq: int
    created_at: datetime
    edited_at: datetime | None = _lifecycle(None)  # type: ignore[assignment]
    deleted_at: datetime | None = _lifecycle(None)  # type: ignore[assignment]  # a tombstone: body ''
    deleted_by: UserId | None = _lifecycle(None)  # type: ignore[assignment]
    reply_count: int = _lifecycle(0)  # type: ignore[assignment]
    last_reply_at: datetime | None = _lifecycle(None)  # type: ignore[assignment]


def record_fields(record: type, table: Table, *, every_column: bool) -> tuple[str, ...]:
    """The names of a record's fields, each a column of table (every_column: and each column a field); raises,
    saying what to add where, when they disagree."""
    fields = tuple(f.name for f in dataclasses.fields(record))
    columns = [column.name for column in table.c]
    lacking = [name for name in fields if name not in columns]
    if lacking:
        raise AssertionError(
            f"{record.__name__}'s {lacking} are no columns of {table.name}: add each column (a migration, and"
            " models.py's table), or drop the field"
        )
    unlisted = [name for name in columns if name not in fields]
    if every_column and unlisted:
        raise AssertionError(
            f"{table.name}'s columns {unlisted} have no field in models.{record.__name__}: add a field of the same"
            " name to the record (whatever reads the record then reads it)"
        )
    return fields


MESSAGE_FIELDS: tuple[str, ...] = record_fields(MessageRecord, message, every_column=True)
# The fields that never change after the send (the plain read of an inbox page's last message).
MESSAGE_PLAIN_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(MessageRecord) if not f.metadata.get("lifecycle")
)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberRecord:
    """A membership as a member list shows it: the one list of a Member's fields. Each is a column of
    `conversation_member` (below: checked on import), selected as store.conversations.MEMBER_COLUMNS;
    graphql's Member answers each from the row by name (graphql/types/member.py checks it on import). A new
    field of a member is a field here, its column (a migration and the table above) and a field of Member."""

    conversation_id: int
    user_id: UserId
    role: str
    last_read_seq: int
    joined_at: datetime


# The member's own settings and read state stay out: a Conversation shows them to the member (the inbox row).
MEMBER_FIELDS: tuple[str, ...] = record_fields(MemberRecord, conversation_member, every_column=False)

# Full-text search (0012_search): GIN over the conversation and the body's words (btree_gin)
Index(
    "message_search_idx",
    message.c.conversation_id,
    func.to_tsvector(text("'simple'"), message.c.body),
    postgresql_using="gin",
)

# One row per change (edit, delete) of a message: the log sync replays after a change cursor (0010).
message_change = Table(
    "message_change",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("change_seq", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("kind", Text, nullable=False),
    Column("user_id", USER_ID_TYPE),  # NULL: the operator (an erase, the retention policy: 0012_erase)
    Column("reason", Text),  # the operator's: 'ERASE' or 'RETENTION' (0012_erase); NULL for a user's change
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("conversation_id", "change_seq"),
    CheckConstraint("change_seq > 0", name="message_change_change_seq_check"),
    CheckConstraint(
        "kind IN ('EDITED', 'DELETED', 'REACTION', 'PINNED', 'UNPINNED')", name="message_change_kind_check"
    ),
    Index("message_change_deleted_idx", "conversation_id", "seq", postgresql_where=text("kind = 'DELETED'")),
)

# The previous bodies of edited messages, erased with the message (0010).
message_edit = Table(
    "message_edit",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("change_seq", BigInteger, nullable=False),
    Column("body", Text, nullable=False),
    Column("written_at", DateTime(timezone=True), nullable=False),
    Column("replaced_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("conversation_id", "seq", "change_seq"),
)

# Reactions (0010b): one row per (message, user, emoji), and a count per (message, emoji) kept on write.
message_reaction = Table(
    "message_reaction",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("user_id", USER_ID_TYPE, nullable=False),
    Column("emoji", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("conversation_id", "seq", "user_id", "emoji"),
    Index("message_reaction_emoji_idx", "conversation_id", "seq", "emoji", "user_id"),
)

message_reaction_count = Table(
    "message_reaction_count",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("emoji", Text, nullable=False),
    Column("count", Integer, nullable=False),
    Column("first_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("conversation_id", "seq", "emoji"),
    CheckConstraint("count > 0", name="message_reaction_count_count_check"),
)

# Messages scheduled to be sent later (0025_scheduled_messages): PENDING until the scheduler sends them
# (SENT, with the seq taken) or refuses them (FAILED, with the reason), or their sender cancels them.
scheduled_message = Table(
    "scheduled_message",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column("sender_id", USER_ID_TYPE, nullable=False),
    Column("client_msg_id", UUID(as_uuid=True), nullable=False),
    Column("body", Text, nullable=False),
    Column("send_at", DateTime(timezone=True), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("state", Text, nullable=False, server_default=text("'PENDING'::text")),
    Column("seq", BigInteger),
    Column("failure", Text),
    Column("done_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("conversation_id", "id"),
    UniqueConstraint("conversation_id", "client_msg_id", name="scheduled_message_client_msg_id_key"),
    CheckConstraint(
        "state IN ('PENDING', 'SENT', 'CANCELED', 'FAILED')",
        name="scheduled_message_state_check",
    ),
    Index("scheduled_message_due_idx", "send_at", postgresql_where=text("state = 'PENDING'")),
    Index("scheduled_message_sender_idx", "sender_id", "send_at"),
)

# When each message sent while its conversation had a time to live is erased (0026_disappearing_messages):
# the scheduler deletes the row as it makes the message a tombstone.
message_expiry = Table(
    "message_expiry",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("conversation_id", "seq"),
    Index("message_expiry_due_idx", "expires_at"),
)

# A conversation's pinned messages (0017_pins): who pinned each, when, until when (NULL: until unpinned).
pinned_message = Table(
    "pinned_message",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("pinned_by", USER_ID_TYPE, nullable=False),
    Column("pinned_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("conversation_id", "seq"),
    CheckConstraint("seq > 0", name="pinned_message_seq_check"),
)

# A member's unsent text (0030_drafts), per conversation (root_seq 0) and per thread (its root's seq); a
# message of theirs after base_seq sent with that replyTo clears it (store/drafts.py); body '': cleared.
message_draft = Table(
    "message_draft",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("user_id", USER_ID_TYPE, nullable=False),
    Column("root_seq", BigInteger, nullable=False),
    Column("body", Text, nullable=False),
    Column("base_seq", BigInteger, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("conversation_id", "user_id", "root_seq"),
    CheckConstraint("root_seq >= 0", name="message_draft_root_seq_check"),
    Index("message_draft_user_id_idx", "user_id"),
)

# Each user's last seen (written at most once a minute) and who sees their presence (0031_presence).
PRESENCE_VISIBILITIES = ("EVERYONE", "CONTACTS", "NOBODY")
user_presence = Table(
    "user_presence",
    metadata,
    Column("user_id", USER_ID_TYPE, primary_key=True),
    Column("last_seen_at", DateTime(timezone=True)),
    Column("visibility", Text, nullable=False, server_default="EVERYONE"),
    CheckConstraint("visibility IN ('EVERYONE', 'CONTACTS', 'NOBODY')", name="user_presence_visibility_check"),
)

# Attachment metadata (0010d): the bytes live in the client's object storage.
message_attachment = Table(
    "message_attachment",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("position", SmallInteger, nullable=False),
    Column("url", Text, nullable=False),
    Column("mime_type", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("width", Integer),
    Column("height", Integer),
    PrimaryKeyConstraint("conversation_id", "seq", "position"),
    CheckConstraint("size_bytes >= 0", name="message_attachment_size_bytes_check"),
)

# who a message mentions (0011a): a member's unread mentions are one range of the key
message_mention = Table(
    "message_mention",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),  # no foreign key: TRUNCATE conversation stays as it is
    Column("user_id", USER_ID_TYPE, nullable=False),
    Column("seq", BigInteger, nullable=False),
    PrimaryKeyConstraint("conversation_id", "user_id", "seq"),
    CheckConstraint("seq > 0", name="message_mention_seq_check"),
)

# who is kept out of a group (0018_conversation_bans): until NULL holds until unbanned; banned_by NULL: the operator
conversation_ban = Table(
    "conversation_ban",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),  # no foreign key: TRUNCATE conversation stays as it is
    Column("user_id", USER_ID_TYPE, nullable=False),
    Column("until", DateTime(timezone=True)),
    Column("banned_by", USER_ID_TYPE),
    Column("reason", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("conversation_id", "user_id"),
)

# a thread: its own gap-free counter of replies, on its root (0029_threads)
thread = Table(
    "thread",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("root_seq", BigInteger, nullable=False),
    Column("last_reply_seq", BigInteger, nullable=False, server_default="0"),
    Column("last_reply_at", DateTime(timezone=True)),
    PrimaryKeyConstraint("conversation_id", "root_seq"),
    CheckConstraint("root_seq > 0", name="thread_root_seq_check"),
    CheckConstraint("last_reply_seq >= 0", name="thread_last_reply_seq_check"),
)

# a reply's thread, its number there, and whether it is thread-only (0029_threads)
thread_reply = Table(
    "thread_reply",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("root_seq", BigInteger, nullable=False),
    Column("reply_seq", BigInteger, nullable=False),
    Column("thread_only", Boolean, nullable=False),
    Column("deleted", Boolean, nullable=False, server_default="false"),
    PrimaryKeyConstraint("conversation_id", "seq"),
    UniqueConstraint("conversation_id", "root_seq", "reply_seq", name="thread_reply_root_reply_seq_key"),
    CheckConstraint("reply_seq > 0", name="thread_reply_reply_seq_check"),
    Index("thread_reply_thread_only_idx", "conversation_id", "seq", postgresql_where=text("thread_only")),
    Index("thread_reply_deleted_idx", "conversation_id", "root_seq", "reply_seq", postgresql_where=text("deleted")),
)

# a member's thread watermark, and whether they follow the thread (0029_threads)
thread_member = Table(
    "thread_member",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("root_seq", BigInteger, nullable=False),
    Column("user_id", USER_ID_TYPE, nullable=False),
    Column("last_read_reply_seq", BigInteger, nullable=False, server_default="0"),
    Column("following", Boolean, nullable=False, server_default="true"),
    Column("first_reply_seq", BigInteger),
    # the member's version of the thread in its conversation, and what took it (0032_thread_versions)
    Column("version", BigInteger, nullable=False, server_default="0"),
    Column("last_change", Text),
    PrimaryKeyConstraint("conversation_id", "root_seq", "user_id"),
    CheckConstraint("last_read_reply_seq >= 0", name="thread_member_last_read_reply_seq_check"),
    CheckConstraint(
        "last_change IN ('REPLY', 'READ', 'FOLLOW', 'UNFOLLOW', 'DELETE')", name="thread_member_last_change_check"
    ),
    Index("thread_member_following_idx", "user_id", postgresql_where=text("following")),
    Index("thread_member_version_idx", "conversation_id", "user_id", "version"),
)

# a member's newest thread version in a conversation: every change of their thread state takes the next
# (0032_thread_versions)
thread_clock = Table(
    "thread_clock",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("user_id", USER_ID_TYPE, nullable=False),
    Column("version", BigInteger, nullable=False),
    PrimaryKeyConstraint("conversation_id", "user_id"),
)

# what the before-send hook decided for a clientMsgId it rejected or rewrote (0020_send_verdicts)
send_verdict = Table(
    "send_verdict",
    metadata,
    Column("conversation_id", BigInteger, nullable=False),
    Column("client_msg_id", UUID(as_uuid=True), nullable=False),
    Column("sender_id", USER_ID_TYPE, nullable=False),
    Column("body_sha256", LargeBinary, nullable=False),
    Column("verdict", Text, nullable=False),
    Column("reason", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("conversation_id", "client_msg_id"),
    CheckConstraint("verdict IN ('REJECTED', 'REWRITTEN')", name="send_verdict_verdict_check"),
)

# a user's own defaults (0011b)
user_setting = Table(
    "user_setting",
    metadata,
    Column("user_id", USER_ID_TYPE, primary_key=True),
    Column("private_receipts", Boolean, nullable=False, server_default="false"),
)

direct_pair = Table(
    "direct_pair",
    metadata,
    Column("user_low", USER_ID_TYPE, nullable=False),
    Column("user_high", USER_ID_TYPE, nullable=False),
    Column(
        "conversation_id",
        BigInteger,
        ForeignKey("conversation.id"),
        nullable=False,
        unique=True,
    ),
    PrimaryKeyConstraint("user_low", "user_high"),
    CheckConstraint("user_low < user_high", name="direct_pair_order_check"),
)

# Moderation (0021_blocks): who blocked whom, and the operator's app-wide bans (until NULL: until lifted).
saved_message = Table(
    "saved_message",
    metadata,
    Column("user_id", USER_ID_TYPE, nullable=False),
    Column("conversation_id", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("saved_at", DateTime(timezone=True), nullable=False),
    Column("remind_at", DateTime(timezone=True)),
    Column("reminded_at", DateTime(timezone=True)),
    Column("removed", Boolean, nullable=False, server_default="false"),
    Column("version", BigInteger, nullable=False),
    PrimaryKeyConstraint("user_id", "conversation_id", "seq"),
    CheckConstraint("seq > 0", name="saved_message_seq_check"),
    Index("saved_message_version_idx", "user_id", "version"),
    Index("saved_message_list_idx", "user_id", "saved_at", "conversation_id", "seq"),
    Index(
        "saved_message_due_idx",
        "remind_at",
        postgresql_where=text("reminded_at IS NULL AND remind_at IS NOT NULL AND NOT removed"),
    ),
)

saved_version = Table(
    "saved_version",
    metadata,
    Column("user_id", USER_ID_TYPE, primary_key=True),
    Column("version", BigInteger, nullable=False),
)

user_block = Table(
    "user_block",
    metadata,
    Column("blocker_id", USER_ID_TYPE, nullable=False),
    Column("blocked_id", USER_ID_TYPE, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("blocker_id", "blocked_id"),
    CheckConstraint("blocker_id <> blocked_id", name="user_block_other_check"),
    Index("user_block_blocked_idx", "blocked_id", "blocker_id"),
)

user_ban = Table(
    "user_ban",
    metadata,
    Column("user_id", USER_ID_TYPE, primary_key=True),
    Column("until", DateTime(timezone=True)),
    Column("banned_by", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# Reports of messages and users, and the operator's moderation (0022_reports). A report of a user has
# conversation_id and seq 0; evidence: the reported message as it was when reported.
REPORT_REASONS = ("SPAM", "HARASSMENT", "HATE", "VIOLENCE", "SEXUAL", "SELF_HARM", "ILLEGAL", "IMPERSONATION", "OTHER")
report = Table(
    "report",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("reporter_id", USER_ID_TYPE, nullable=False),
    Column("reported_user_id", USER_ID_TYPE, nullable=False),
    Column("conversation_id", BigInteger, nullable=False, server_default="0"),
    Column("seq", BigInteger, nullable=False, server_default="0"),
    Column("reason", Text, nullable=False),
    Column("details", Text, nullable=False, server_default=""),
    Column("evidence", JSONB),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("resolved_at", DateTime(timezone=True)),
    Column("resolved_by", Text),
    Column("action", Text),
    Column("note", Text),
    CheckConstraint("reason IN (" + ", ".join(f"'{r}'" for r in REPORT_REASONS) + ")", name="report_reason_check"),
    UniqueConstraint("reporter_id", "conversation_id", "seq", "reported_user_id", name="report_once_key"),
    Index("report_open_idx", "id", postgresql_where=text("resolved_at IS NULL")),
    Index("report_conversation_idx", "conversation_id", "id"),
    Index("report_reported_idx", "reported_user_id", "id"),
)

# The audit of the operator's moderation actions: one row per action.
moderation_action = Table(
    "moderation_action",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("operator", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("report_id", BigInteger),
    Column("user_id", USER_ID_TYPE),
    Column("conversation_id", BigInteger),
    Column("seq", BigInteger),
    Column("until", DateTime(timezone=True)),
    Column("reason", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# the documents clients may send by id (0023_persisted_documents): `chatgql documents load`
persisted_document = Table(
    "persisted_document",
    metadata,
    Column("id", Text(collation="C"), primary_key=True),
    Column("body", Text, nullable=False),
    Column("name", Text),
    Column("body_sha256", Text(collation="C"), nullable=False),  # the sha256 of body's UTF-8, in hex
    Column("loaded_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("length(id) >= 1 AND length(id) <= 200", name="persisted_document_id_check"),
    Index("persisted_document_body_sha256_idx", "body_sha256"),
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("msg_key", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # The relay shard's bucket of msg_key (migration 0008): fixed, 64 slots.
    Column(
        "slot", SmallInteger, Computed("(hashtextextended(msg_key, 0) & 63)::smallint", persisted=True), nullable=False
    ),
    Index("outbox_slot_id_idx", "slot", "id"),
)


# Webhooks (migration 0012_webhooks): events queued for the app's endpoint (events/webhooks.py),
# and those that ran out of attempts.
def _webhook_table(name: str, *extra: Column | Index) -> Table:
    return Table(
        name,
        metadata,
        Column("id", BigInteger, primary_key=True),  # the outbox row's id
        Column("msg_key", Text, nullable=False),
        Column("webhook_id", UUID, nullable=False, server_default=func.gen_random_uuid()),
        Column("payload", JSONB, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("attempts", Integer, nullable=False, server_default="0"),
        Column("next_attempt_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
        Column("body", Text),
        Column("last_error", Text),
        *extra,
    )


webhook_queue = _webhook_table("webhook_queue", Index("webhook_queue_key_id_idx", "msg_key", "id"))
webhook_dead = _webhook_table(
    "webhook_dead",
    Column("dead_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Index("webhook_dead_key_id_idx", "msg_key", "id"),
)
