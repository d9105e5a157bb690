"""Table definitions only. Alembic owns the schema; these mirror it."""

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
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

conversation = Table(
    "conversation",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("type", Text, nullable=False),
    Column("title", Text),
    Column("last_seq", BigInteger, nullable=False, server_default="0"),
    Column("last_message_at", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("created_by", BigInteger),  # a GROUP's creator (0004); NULL for DIRECT and older rows
    # conversation_member rows, kept by triggers on conversation_member (0007)
    Column("member_count", Integer, nullable=False, server_default="0"),
    CheckConstraint("type IN ('DIRECT', 'GROUP')", name="conversation_type_check"),
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
    Column("user_id", BigInteger, nullable=False),
    Column("role", Text, nullable=False, server_default="MEMBER"),
    Column("last_read_seq", BigInteger, nullable=False, server_default="0"),
    Column("joined_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("conversation_id", "user_id"),
    CheckConstraint("role IN ('OWNER', 'MEMBER')", name="conversation_member_role_check"),
    CheckConstraint("last_read_seq >= 0", name="conversation_member_last_read_seq_check"),
    Index("conversation_member_user_id_idx", "user_id"),
    # seenByCount and seen as index-only scans (0007)
    Index("conversation_member_read_idx", "conversation_id", "last_read_seq", postgresql_include=["user_id"]),
)

message = Table(
    "message",
    metadata,
    Column("conversation_id", BigInteger, ForeignKey("conversation.id"), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("sender_id", BigInteger, nullable=False),
    Column("client_msg_id", UUID(as_uuid=True), nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("conversation_id", "seq"),
    UniqueConstraint("conversation_id", "client_msg_id", name="message_client_msg_id_key"),
    CheckConstraint("seq > 0", name="message_seq_check"),
    # 16 hash partitions (migration 0005); every key starts with the partition key
    postgresql_partition_by="HASH (conversation_id)",
)

direct_pair = Table(
    "direct_pair",
    metadata,
    Column("user_low", BigInteger, nullable=False),
    Column("user_high", BigInteger, nullable=False),
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
