"""Typed settings, read once from the environment (prefix CHATGQL_).

This is the only module that reads os.environ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEV_JWT_SECRET = "chatgql-dev-secret-change-me-0000000000"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CHATGQL_", extra="ignore")

    env: Literal["development", "production"] = "development"
    host: str = "127.0.0.1"
    port: int = 8000
    # API processes `chatgql serve` runs (uvicorn workers sharing the port). More than one
    # needs a shared bus (redis://): each worker holds its own subscribers.
    workers: int = Field(default=1, ge=1)

    # PostgreSQL. Unset: an embedded server is started in data_dir.
    database_url: SecretStr | None = None
    data_dir: Path = Path(".chatgql")
    # The asyncpg pool holds at most db_pool_size + db_max_overflow connections, opened as needed.
    db_pool_size: int = 10
    db_max_overflow: int = 10
    migrate_on_start: bool = True

    # Kafka. Unset: events go through the in-process bus.
    kafka_bootstrap_servers: str | None = None
    kafka_topic: str = "chat.events"
    kafka_group: str = "fanout"
    # Create the topic at start when missing (production: let ops own it).
    kafka_create_topic: bool = True
    # Fixed when the topic is created: never add partitions to it later. Kafka picks a key's
    # partition as hash(key) % partitions, so more partitions move conversations to other
    # partitions, and a conversation's events before and after the change are no longer in
    # order on one partition. To change it, make a new topic (and drain the old one first).
    kafka_topic_partitions: int = 16
    kafka_topic_replication: int = 1
    # Where a brand-new consumer group starts: the live path only needs what is new.
    kafka_offset_reset: Literal["latest", "earliest"] = "latest"
    # Broadcast bus that feeds subscriptions: memory://, redis://host:port, or
    # redis+cluster://host:port,host:port (Redis Cluster sharded pub/sub; see the redisbus block)
    broadcast_url: str = "memory://"

    # Which background roles this process runs besides the API.
    run_relay: bool = True
    run_consumer: bool = True

    # Sharded outbox relay (docs/scale/relayshards.md). The outbox is relayed as this many
    # shards, chosen by a fixed hash of the conversation id (64 slots; shard s relays the slots
    # with slot % shards == s), so it must divide 64; relay processes share the shards out.
    relay_shards: int = Field(default=4, ge=1, le=64)
    # How often a relay looks for shards to take or hand back: a dead relay's shards are taken
    # over within about this long (plus a batch).
    relay_standby_seconds: float = Field(default=0.5, gt=0)
    # Each led shard also polls this often (a NOTIFY can be missed while reconnecting).
    relay_poll_seconds: float = Field(default=1.0, gt=0)

    @field_validator("relay_shards")
    @classmethod
    def _relay_shards_divide_the_slots(cls, shards: int) -> int:
        if 64 % shards:
            raise ValueError("CHATGQL_RELAY_SHARDS must divide 64 (1, 2, 4, 8, 16, 32 or 64)")
        return shards

    jwt_secret: SecretStr = SecretStr(DEV_JWT_SECRET)
    jwt_audience: str | None = None

    graphiql: bool | None = None  # default: on in development, off in production
    introspection: bool | None = None
    # uvicorn's line per request (a measurable share of a small request's CPU)
    access_log: bool | None = None  # default: on in development, off in production

    # Limits
    max_body_chars: int = 4000
    max_title_chars: int = 200
    max_group_members: int = 1000
    max_sync_cursors: int = 500
    max_ids_per_call: int = 1000
    subscriber_buffer: int = Field(default=1000, ge=1)
    max_subscriptions_per_connection: int = 100

    # What one request may ask for (exceeding one: LIMIT_EXCEEDED / HTTP 413)
    max_query_depth: int = 10
    max_aliases: int = 20
    max_fields: int = 300
    # Every selection (field, fragment spread, inline fragment) with fragments expanded,
    # introspection included: what validation and execution may have to walk.
    max_selections: int = 2000
    # Documents accepted once are kept parsed (and skip parsing and validation), up to this
    # many characters of document text in all (the collector walks every kept node).
    document_cache_chars: int = 100_000
    max_tokens: int = 3000
    max_query_chars: int = 20_000
    max_request_bytes: int = 256 * 1024
    max_batch_operations: int = 10
    request_timeout_seconds: float = 10.0

    # Per-user rate limits (token buckets, per process); a rate of 0 turns one off
    rate_send_per_second: float = 10.0
    rate_send_burst: int = 30
    rate_read_per_second: float = 20.0
    rate_read_burst: int = 60

    # Abuse, tokens and disclosure
    # Membership: per-user token buckets (per process, like the ones above; a rate of 0 turns
    # one off) on the calls that put other people into conversations...
    rate_group_per_second: float = 0.2  # createGroup: one every 5 s after a burst of 10
    rate_group_burst: int = 10
    rate_direct_per_second: float = 1.0  # createDirectConversation
    rate_direct_burst: int = 30
    rate_add_members_per_second: float = 1.0  # addMembers
    rate_add_members_burst: int = 20
    # ...and groups one user may create in any 24 hours, counted in PostgreSQL (holds across
    # restarts and processes); 0 turns it off.
    max_groups_per_day: int = Field(default=50, ge=0)
    # "package.module:attribute": a MembershipPolicy (services/policy.py) consulted before
    # anyone is put into a conversation; unset: everyone may add anyone.
    membership_policy: str | None = None
    # Bearer tokens must carry exp, and exp - iat (exp - now without iat) may not exceed this.
    jwt_max_lifetime_seconds: int = Field(default=30 * 24 * 3600, ge=60)
    # /metrics: when set, it answers only `Authorization: Bearer <this>` (404 otherwise);
    # unset: open in development, 404 in production.
    metrics_token: SecretStr | None = None

    # Slow and idle clients: what a client may hold without doing anything.
    # Seconds a websocket may stay open without connection_init (both protocols; closed with 4408).
    ws_init_timeout_seconds: float = Field(default=10.0, gt=0)
    # Websockets per client address that have not completed connection_init; more are closed
    # with 4429 (0: no limit). Behind a proxy the address is the proxy's unless uvicorn trusts it
    # (FORWARDED_ALLOW_IPS) to say whose request it is.
    max_unauthenticated_ws_per_address: int = Field(default=20, ge=0)
    # Seconds from connection (or a request's first byte) until its headers are complete, and
    # from the headers until the whole body arrived: the connection is then closed (408).
    http_header_timeout_seconds: float = Field(default=10.0, gt=0)
    http_body_timeout_seconds: float = Field(default=30.0, gt=0)
    # A request's line and headers, in bytes: more is answered 431 and the connection closed.
    http_max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    # Connections (HTTP and websocket) and requests at once per process: beyond it uvicorn
    # answers 503 (keep it below the process's open-file limit, ulimit -n).
    max_connections: int = Field(default=15_000, ge=1)

    # Read-storm coalescing (services/read_coalescing.py): markRead calls of one process are
    # merged per (conversation, user) and written together, one statement and one commit per
    # flush; each caller is answered after that commit. Off: one statement per call, as before.
    mark_read_coalescing: bool = True
    # Milliseconds a flush waits for more calls before it goes (0: an idle process adds no wait;
    # calls arriving while a flush is in flight still share the next one).
    mark_read_window_ms: float = Field(default=0.0, ge=0, le=1000)
    # (conversation, user) keys in one flush at most; more wait for the next flush.
    mark_read_max_batch: int = Field(default=500, ge=1, le=10_000)

    # Big groups (docs/scale/biggroups.md)
    # Above this many members a GROUP is big: a member's read.updated reaches only that member's own
    # readUpdated subscriptions at once; the conversation's other readUpdated subscribers get at most
    # one coalesced readUpdated (coalesced: true) per big_group_read_interval_seconds; and the live
    # path asks PostgreSQL only about the users subscribed in this process, never for the member list.
    big_group_threshold: int = Field(default=200, ge=2)  # 2 and up: a DIRECT chat is never big
    big_group_read_interval_seconds: float = Field(default=1.0, gt=0)
    # Conversation.members(first:) and Message.seenBy(first:): the most one call returns (members'
    # default `first` too; seenBy's stays 100). A larger `first` is capped to it.
    members_page_max: int = Field(default=1000, ge=1)
    # createGroup(memberIds:) and addMembers(userIds:): the most ids one call takes (each call's
    # cost is bounded by it); bigger groups are built with several addMembers calls.
    max_members_per_call: int = Field(default=1000, ge=1)

    # Plan-once execution of accepted documents (graphql/plan/): off runs every document
    # through graphql-core's executor, as before.
    planner: bool = True

    # redisbus: the Redis Cluster bus and rate limits shared through Redis (docs/scale/redisbus.md)
    # Conversation buckets of a redis+cluster:// bus (channel chatgql.events.{b}): fixed for a
    # deployment, every process must use the same number.
    bus_buckets: int = Field(default=64, ge=1, le=16384)
    # The feed sends itself a heartbeat through every bus connection it listens on this often;
    # nothing back within 8 times it: every subscription ends with the resync error, the bus reconnects.
    bus_heartbeat_seconds: float = Field(default=2.0, gt=0)
    # With a redis:// or redis+cluster:// bus, the per-user rate limits are counted in that Redis
    # (shared by every process); off, or when Redis does not answer, each process counts alone.
    shared_rate_limits: bool = True
    # How long a rate-limit check waits for Redis before counting in this process instead.
    shared_rate_limit_timeout_seconds: float = Field(default=0.25, gt=0)

    # livepath: the live path's delay bound (docs/scale/livepath.md)
    # Seconds from an event's commit to its delivery at most: an event older than this when this
    # process dispatches it (the process is behind) or when its subscription's reader takes it
    # (a slow socket) is not delivered; the subscriptions it was for end with the resync error
    # (reason DELIVERY_DELAYED) instead of falling further behind. 0: no bound.
    max_delivery_delay_seconds: float = Field(default=5.0, ge=0)

    # Garbage collector
    # `chatgql serve` freezes what survived after every this many young collections (0: only what
    # is alive at start): later collections never walk it again (collector.py).
    gc_freeze_every_young: int = Field(default=3, ge=0)
    # Net allocations between young collections (CPython's default is 700).
    gc_young_threshold: int = Field(default=1_000, ge=100)

    # Too far behind (docs/scale/partition.md): a client more than this many messages behind in one
    # conversation (sync's afterSeq, messages(after:)) gets the newest page of it with a flag
    # (ConversationSync.tooLong, MessageConnection.gapTooLong) instead of the page after its cursor;
    # a resumable messageNew(cursors:) that far behind ends with the resync error.
    max_catch_up: int = Field(default=1000, ge=1)

    # Group commit of hot conversations (services/groupcommit.py): sends to a conversation that
    # arrive while one to it is in flight wait for it and then go together, in one transaction
    # of at most send_batch_max sends (the first send to an idle conversation goes alone, at once).
    send_group_commit: bool = True
    send_batch_max: int = Field(default=64, ge=1, le=10_000)

    @model_validator(mode="after")
    def _refuse_default_secret_in_production(self) -> Settings:
        if self.env == "production" and self.jwt_secret.get_secret_value() == DEV_JWT_SECRET:
            raise ValueError("CHATGQL_JWT_SECRET must be set to a secret of your own when CHATGQL_ENV=production")
        return self

    @model_validator(mode="after")
    def _workers_need_a_shared_bus(self) -> Settings:
        if self.workers > 1 and self.broadcast_url.startswith("memory://"):
            raise ValueError(
                "CHATGQL_WORKERS > 1 needs CHATGQL_BROADCAST_URL=redis://...: every worker serves its own "
                "subscribers, and events reach all of them only through a bus they share"
            )
        return self

    @property
    def graphiql_enabled(self) -> bool:
        return self.env == "development" if self.graphiql is None else self.graphiql

    @property
    def access_log_enabled(self) -> bool:
        return self.env == "development" if self.access_log is None else self.access_log

    @property
    def introspection_enabled(self) -> bool:
        return self.env == "development" if self.introspection is None else self.introspection


def load_settings(**overrides: object) -> Settings:
    """Read the environment once; keyword overrides win (tests, CLI flags)."""
    return Settings(**overrides)  # type: ignore[arg-type]
