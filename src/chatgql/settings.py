"""Typed settings, read once from the environment (prefix CHATGQL_).

This is the only module that reads os.environ.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEV_JWT_SECRET = "chatgql-dev-secret-change-me-0000000000"
MIN_OPERATOR_TOKEN_CHARS = 32  # CHATGQL_OPERATOR_TOKEN: a secret nobody can guess


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. a container's cpuset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_workers() -> int:
    """How many workers `chatgql serve` runs unless told: one per core but one, at least one. Two or
    more bring their supervisor along (the relay, the consumer and the hub every live event and shared
    rate limit crosses), busy enough to want a core's share of its own; on two cores one process doing
    everything serves more (bench/results/workers.md)."""
    return max(1, available_cores() - 1)


# What one `chatgql serve` opens to PostgreSQL from its start, its workers' pools together (each
# worker's traffic is its share of the whole): PostgreSQL's default max_connections (100) leaves
# room for the supervisor, the relays' own connections and the operator's commands.
DB_CONNECTIONS = 20


def default_pool_size(workers: int) -> int:
    """Each process's pool unless told (CHATGQL_DB_POOL_SIZE): DB_CONNECTIONS over the workers, at least 4."""
    return max(4, DB_CONNECTIONS // workers)


def otel_traces_wanted() -> bool:
    """The OTEL_* variables ask for traces: an OTLP endpoint is named, or OTEL_TRACES_EXPORTER is
    otlp; OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none say no (docs/operating/tracing.md)."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter == "otlp"
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def otel_traces_protocol() -> Literal["grpc", "http/protobuf"]:
    """The OTLP protocol the OTEL_* variables name for traces: grpc or http/protobuf (the default)."""
    env = os.environ
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    return "grpc" if protocol.strip().lower() == "grpc" else "http/protobuf"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CHATGQL_", extra="ignore")

    env: Literal["development", "production"] = "development"
    host: str = "127.0.0.1"
    port: int = 8000
    # API processes `chatgql serve` runs (uvicorn workers sharing the port): one per core but one by
    # default (default_workers). With more than one, live events and rate limits go through Redis when
    # the bus is redis://, else through the supervisor's hub (supervisor.py).
    workers: int = Field(default_factory=default_workers, ge=1)

    # PostgreSQL. Unset: an embedded server is started in data_dir.
    database_url: SecretStr | None = None
    data_dir: Path = Path(".chatgql")
    # The asyncpg pool keeps db_pool_size connections open from the start (a burst does not wait for
    # PostgreSQL to start new backends), and opens up to db_max_overflow more as needed (closed again
    # after five idle minutes). Unset: DB_CONNECTIONS shared by the workers, at least 4 each.
    db_pool_size: int = Field(default_factory=lambda data: default_pool_size(data["workers"]), ge=1)
    db_max_overflow: int = Field(default=0, ge=0)
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

    # How fast the consumer group notices a dead consumer (docs/operating/scaled-deployment.md). A consumer
    # killed without leaving the group keeps its partitions until the broker has not heard its
    # heartbeat for the session timeout; the survivors learn of the rebalance at their next heartbeat.
    # 6000 (the broker's group.min.session.timeout.ms) / 2000: a rebalance within about 8 s
    # (aiokafka's own 10000 / 3000 took 12 s, over the 10 s the live path allows itself).
    kafka_session_timeout_ms: int = Field(default=6_000, ge=1)
    kafka_heartbeat_interval_ms: int = Field(default=2_000, ge=1)

    @model_validator(mode="after")
    def _heartbeats_fit_in_the_session(self) -> Settings:
        if self.kafka_heartbeat_interval_ms * 3 > self.kafka_session_timeout_ms:
            raise ValueError(
                "CHATGQL_KAFKA_HEARTBEAT_INTERVAL_MS must be at most a third of CHATGQL_KAFKA_SESSION_TIMEOUT_MS "
                "(a consumer that misses one heartbeat must not be taken for dead)"
            )
        return self

    # Broadcast bus that feeds subscriptions: memory://, redis://host:port, or
    # redis+cluster://host:port,host:port (Redis Cluster sharded pub/sub; see the redisbus block)
    broadcast_url: str = "memory://"
    # Set by `chatgql serve` for its workers, never by hand: the supervisor's hub
    # (chatgql+unix:///path), for its health, its relay's wake-up, and (with no Redis bus)
    # live events and rate limits. See supervisor.py.
    supervisor_hub: str | None = None

    # Traces over OTLP (runtime/tracing.py, docs/operating/tracing.md): on when the OTEL_* variables
    # ask for them (the SDK reads the rest of them: endpoint, headers, sampler); CHATGQL_TRACING=false
    # keeps them off whatever those say.
    tracing: bool = Field(default_factory=otel_traces_wanted)
    tracing_protocol: Literal["grpc", "http/protobuf"] = Field(default_factory=otel_traces_protocol)
    # A live event's websocket frames traced in each process, the first this many subscribers': a
    # fan-out to a big group makes this many spans, not one per member.
    tracing_frames_per_event: int = Field(default=16, ge=0)

    # Which background roles this process runs besides the API.
    run_relay: bool = True
    run_consumer: bool = True

    # Sharded outbox relay (docs/design/scale/relayshards.md). The outbox is relayed as this many
    # shards, chosen by a fixed hash of the conversation id (64 slots; shard s relays the slots
    # with slot % shards == s), so it must divide 64; relay processes share the shards out.
    relay_shards: int = Field(default=4, ge=1, le=64)
    # How often a relay looks for shards to take or hand back: a dead relay's shards are taken
    # over within about this long (plus a batch).
    relay_standby_seconds: float = Field(default=0.5, gt=0)
    # Each led shard also polls this often (a NOTIFY can be missed while reconnecting).
    relay_poll_seconds: float = Field(default=1.0, gt=0)
    # The scheduler (services/scheduler.py, run where the relay runs) looks for due work at least this
    # often; it wakes sooner for a row due sooner, and on a NOTIFY from a write that scheduled one.
    scheduler_poll_seconds: float = Field(default=1.0, gt=0)

    @field_validator("relay_shards")
    @classmethod
    def _relay_shards_divide_the_slots(cls, shards: int) -> int:
        if 64 % shards:
            raise ValueError("CHATGQL_RELAY_SHARDS must divide 64 (1, 2, 4, 8, 16, 32 or 64)")
        return shards

    jwt_secret: SecretStr = SecretStr(DEV_JWT_SECRET)
    jwt_audience: str | None = None

    # Tokens of an OpenID Connect provider (Auth0, Keycloak, Firebase, Supabase...: auth.py,
    # jwks.py), beside the HS256 tokens above: RS256, ES256 and EdDSA signatures checked with
    # the provider's published keys. Set the issuer (the token's iss, exactly) to turn it on;
    # the keys come from oidc_jwks_url, or unset, from the issuer's discovery document
    # (<issuer>/.well-known/openid-configuration).
    oidc_issuer: str | None = None
    oidc_jwks_url: str | None = None
    # The token's aud must contain this (required with oidc_issuer: a token the provider minted
    # for another application is refused).
    oidc_audience: str | None = None
    # Where the user id is in the token: a claim name ("sub"), a dotted path ("app.chat_id"),
    # or a JSON array of names for names that hold dots (Hasura's
    # '["https://hasura.io/jwt/claims", "x-hasura-user-id"]'). Its value must be a decimal id.
    oidc_user_id_claim: str = "sub"
    # Clock skew allowed on exp, nbf and iat between the provider and this server.
    oidc_leeway_seconds: float = Field(default=30.0, ge=0, le=300)
    # The keys are fetched again this often (a key the provider removed stops working then),
    # and at once for a token signed by a key not known yet, but at most once per
    # oidc_jwks_min_refetch_seconds (a stream of made-up key ids costs one fetch per period).
    oidc_jwks_refresh_seconds: float = Field(default=300.0, gt=0)
    oidc_jwks_min_refetch_seconds: float = Field(default=10.0, ge=0)
    # One fetch of the discovery document or the keys gives up after this long.
    oidc_jwks_timeout_seconds: float = Field(default=5.0, gt=0)

    @model_validator(mode="after")
    def _oidc_is_complete(self) -> Settings:
        if self.oidc_issuer is None and self.oidc_jwks_url is not None:
            raise ValueError("CHATGQL_OIDC_JWKS_URL needs CHATGQL_OIDC_ISSUER: a token's iss is always checked")
        if self.oidc_issuer is not None and not self.oidc_audience:
            raise ValueError(
                "CHATGQL_OIDC_ISSUER needs CHATGQL_OIDC_AUDIENCE: without it, a token the provider "
                "issued to any other application would be accepted here"
            )
        if self.oidc_issuer is not None:
            from .claims import parse_claim_path  # a bad path fails at start, not on every request

            parse_claim_path(self.oidc_user_id_claim)
        return self

    graphiql: bool | None = None  # default: on in development, off in production
    # The reference web chat at /demo (webchat/, built into static/demo/). Its development
    # sign-in (POST /dev/token) exists only in development, whatever this says.
    demo: bool | None = None  # default: on in development, off in production
    introspection: bool | None = None
    # uvicorn's line per request (a measurable share of a small request's CPU)
    access_log: bool | None = None  # default: on in development, off in production

    # Limits
    max_body_chars: int = 4000
    # editMessage: how long after sending the sender may still edit (0: no limit)
    edit_window_seconds: float = Field(default=0, ge=0)
    # Retention: messages sent more than this many days ago are erased (tombstones, as deleteMessage makes),
    # by a loop in every process that runs the relay, once per interval; None: kept for ever.
    # `chatgql retention run` does one pass; `chatgql erase-user` erases one user's messages.
    retention_days: float | None = Field(default=None, gt=0)
    retention_interval_seconds: float = Field(default=3600, gt=0)
    # Messages of one conversation tombstoned per transaction by an erase or retention (sends to it wait for one)
    erase_batch_size: int = Field(default=100, ge=1, le=10_000)
    # Reactions: distinct emojis on one message, and the characters of one emoji
    max_reactions_per_message: int = Field(default=20, ge=1)
    max_emoji_chars: int = Field(default=32, ge=1)
    # Attachment metadata on one message: how many, and the largest size one may declare
    max_attachments: int = Field(default=10, ge=0)
    max_attachment_bytes: int = Field(default=100 * 1024 * 1024, ge=0)
    max_title_chars: int = 200
    max_group_members: int = 1000
    max_sync_cursors: int = 500
    # One sync answers at most this many messages in all, and as many changes: each cursor's page is
    # min(limit, max(1, max_sync_messages // cursors)), hasMore says where more wait. 300 full messages
    # and 300 changes price at about 6 MB, within max_operation_cost (docs/operating/limits.md).
    max_sync_messages: int = Field(default=300, ge=1)
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
    # What an operation's answer may come to, priced from the schema and its arguments before it
    # runs (engine/cost.py): an upper estimate in bytes, list sizes and bounded strings (a message
    # body counts CHATGQL_MAX_BODY_CHARS) multiplied in. A batch's operations count together.
    max_operation_cost: int = Field(default=8_000_000, ge=1)
    # An HTTP answer's JSON, in bytes, as executed: past it the answer is LIMIT_EXCEEDED instead.
    max_response_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    # CPU milliseconds one HTTP request (a batch: all of it) may take while it executes, its own
    # tasks only (what others do meanwhile does not count): past it, LIMIT_EXCEEDED (reason CPU).
    max_request_cpu_ms: float = Field(default=1000.0, gt=0)
    # A subscription's price per event (as max_operation_cost prices an operation), checked when it
    # subscribes; and the sum over one websocket's live subscriptions.
    max_subscription_event_cost: int = Field(default=100_000, ge=1)
    max_socket_event_cost: int = Field(default=1_000_000, ge=1)

    # Per-user rate limits (token buckets, per process); a rate of 0 turns one off
    rate_send_per_second: float = 10.0
    rate_send_burst: int = 30
    rate_read_per_second: float = 20.0
    rate_read_burst: int = 60
    # typing(conversationId:): per user, every conversation together (a client sends one every few
    # seconds while the user types); each lasts typing_seconds, then expires by itself
    rate_typing_per_second: float = 1.0
    rate_typing_burst: int = 5
    typing_seconds: float = Field(default=5.0, gt=0, le=60)
    # searchMessages: per user (each search is a full-text query over the viewer's conversations)
    rate_search_per_second: float = 2.0
    rate_search_burst: int = 10
    # Viewer.totalUnreadMentions counts the mentions in muted conversations too (false: not)
    muted_mentions_count: bool = True
    # sendMessage(mentions:): at most this many user ids
    max_mentions: int = Field(default=50, ge=1)
    # Moderation (docs/guide/moderation.md): blockUser and unblockUser; reportMessage and reportUser
    rate_block_per_second: float = 0.5  # blockUser and unblockUser
    rate_block_burst: int = 20
    rate_report_per_second: float = 0.2  # reportMessage and reportUser: one every 5 s after a burst of 10
    rate_report_burst: int = 10
    # How often each process reloads the app-wide bans (their events reach it at once; this is the backstop,
    # and what a process that serves no subscriptions knows)
    ban_refresh_seconds: float = Field(default=30.0, gt=0)

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
    # The operator's moderation API, POST /operator/graphql: when set (a long random secret), it
    # answers only `Authorization: Bearer <this>`; unset, the path is 404.
    operator_token: SecretStr | None = None

    @field_validator("operator_token")
    @classmethod
    def _operator_token_is_long(cls, token: SecretStr | None) -> SecretStr | None:
        if token is not None and len(token.get_secret_value().strip()) < MIN_OPERATOR_TOKEN_CHARS:
            raise ValueError(
                f"CHATGQL_OPERATOR_TOKEN must be a long random secret (at least {MIN_OPERATOR_TOKEN_CHARS} "
                "characters, e.g. `openssl rand -base64 32`)"
            )
        return token

    # Slow and idle clients: what a client may hold without doing anything.
    # Seconds a websocket may stay open without connection_init (both protocols; closed with 4408).
    ws_init_timeout_seconds: float = Field(default=10.0, gt=0)
    # Websockets per client address that have not completed connection_init; more are closed
    # with 4429 (0: no limit). Behind a proxy the address is the proxy's unless uvicorn trusts it
    # (FORWARDED_ALLOW_IPS) to say whose request it is.
    max_unauthenticated_ws_per_address: int = Field(default=20, ge=0)
    # What one websocket may send and leave unread (websocket.py, engine/handshake.py).
    # Seconds the server's writes to a websocket may stay stalled (its write buffer above the
    # high-water mark, or unsent at close) before the connection is aborted; an HTTP response's too
    # (an event stream: engine/streams.py).
    ws_write_timeout_seconds: float = Field(default=10.0, gt=0)
    # Bytes written to a websocket while its buffer is stalled (answers to its pings, a close
    # frame): past this the connection is aborted at once.
    ws_max_write_buffer_bytes: int = Field(default=1 << 20, ge=64 * 1024)
    # The kernel's send buffer of each websocket and HTTP event stream (SO_SNDBUF; Linux doubles it): fixed, so that the
    # kernel too holds a bounded amount for a peer that does not read (autotuned, up to
    # net.ipv4.tcp_wmem's maximum, 4 MB by default, filled over seconds); 0: the kernel's own.
    ws_send_buffer_bytes: int = Field(default=256 * 1024, ge=0)
    # PING and PONG frames a client may send per socket (token bucket; rate 0: no limit); past
    # it the socket is closed with 1008.
    ws_control_frames_per_second: float = Field(default=5.0, ge=0)
    ws_control_frames_burst: int = Field(default=20, ge=1)
    # GraphQL protocol messages (connection_init, ping, pong, subscribe, complete; start, stop)
    # a client may send per socket (token bucket; rate 0: no limit); past it closed with 4429.
    # The same budget is shared by all of one user's websockets, once connection_init says whose
    # they are (per process).
    ws_messages_per_second: float = Field(default=50.0, ge=0)
    ws_messages_burst: int = Field(default=200, ge=1)
    # And one budget for all the websockets of one client address (per process; rate 0: no limit):
    # generous, since many users may share an address; behind a proxy see
    # max_unauthenticated_ws_per_address.
    ws_messages_per_address_per_second: float = Field(default=1000.0, ge=0)
    ws_messages_per_address_burst: int = Field(default=5000, ge=1)
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
    # markDelivered(Many) calls coalesced the same way (services/delivery_coalescing.py), with the
    # same window and batch size; off: one transaction per call.
    mark_delivered_coalescing: bool = True

    # Big groups (docs/design/scale/biggroups.md)
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

    # Persisted documents (engine/persisted.py): on, a request must name a document loaded by
    # `chatgql documents load` (its text alone, or an unknown id, is refused); off, texts run as
    # ever and documents may also be sent by id.
    documents_allowlist: bool = False
    # Plan-once execution of accepted documents (engine/plan/): off runs every document
    # through graphql-core's executor, as before.
    planner: bool = True
    # The fast paths' other switches, for the same-run comparisons of bench/fastpaths.py; the
    # answers are the same either way. Inbox pages whose nodes PostgreSQL builds as JSON
    # (graphql/prebuilt.py; only a plan runs them).
    prebuilt_pages: bool = True
    # Accepted documents (engine/prepared.py): an HTTP POST of a document accepted before skips
    # Strawberry's pipeline (and parsing and validation) and runs by plan. Off: every request goes
    # Strawberry's whole way, the planner and prebuilt pages with it, and no subscription parks.
    prepared_documents: bool = True
    # Idle messageNew subscriptions without a task (engine/parked.py). Off: each holds its task.
    park_subscriptions: bool = True
    # One execution per subscription event and document, shared by its subscribers (engine/shared.py).
    # Off: every subscriber's event is executed for it.
    shared_event_results: bool = True

    # redisbus: the Redis Cluster bus and rate limits shared through Redis (docs/design/scale/redisbus.md)
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

    # livepath: the live path's delay bound (docs/design/scale/livepath.md)
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

    # Too far behind (docs/design/scale/partition.md): a client more than this many messages behind
    # in one conversation of a sync (afterSeq) gets the newest page of it with ConversationSync.tooLong
    # instead of the page after its cursor; a resumable messageNew(cursors:) that far behind ends
    # with the resync error. messages(after:) only flags it (MessageConnection.gapTooLong, advice):
    # its page is always the one right after the cursor (a page is bounded by `first` already).
    max_catch_up: int = Field(default=1000, ge=1)

    # Group commit of hot conversations (services/groupcommit.py): sends to a conversation that
    # arrive while one to it is in flight wait for it and then go together, in one transaction
    # of at most send_batch_max sends (the first send to an idle conversation goes alone, at once).
    send_group_commit: bool = True
    send_batch_max: int = Field(default=64, ge=1, le=10_000)

    # Webhooks (events/webhooks.py, docs/guide/webhooks.md): events POSTed to the app's endpoint,
    # signed as Standard Webhooks specifies, so it can push to offline members. Unset: none.
    # Every process needs these settings: relays queue the events, the deliverer posts them.
    webhook_url: str | None = None
    # The signing secret: base64 of 24 to 64 random bytes, optionally whsec_-prefixed (what
    # Standard Webhooks libraries take). Required with webhook_url. Several, space-separated:
    # each request is signed with each (rotation without a failed request).
    webhook_secret: SecretStr | None = None
    # The event kinds posted, comma-separated (message.new, message.edited, member.added, ...).
    webhook_events: str = "message.new"
    # Allow an http:// URL and private, loopback or link-local addresses (development, tests, an
    # endpoint inside your own network); refused at start otherwise.
    webhook_allow_private: bool = False
    # One request's whole exchange; no 2xx within it is a failed attempt.
    webhook_timeout_seconds: float = Field(default=5.0, gt=0, le=60)
    # Attempts per event before it goes to the dead letters (chatgql webhooks dead | replay).
    webhook_max_attempts: int = Field(default=8, ge=1)
    # The wait before the second attempt (about; jittered), doubling each time up to the maximum.
    webhook_backoff_seconds: float = Field(default=1.0, gt=0)
    webhook_max_backoff_seconds: float = Field(default=600.0, gt=0)
    # Conversations delivered at once (each conversation's events go one at a time, in order).
    webhook_concurrency: int = Field(default=16, ge=1, le=1000)
    # How often the deliverer looks for due events when nothing woke it.
    webhook_poll_seconds: float = Field(default=0.5, gt=0)
    # PostgreSQL connections of the deliverer's own pool (besides its one lock connection).
    webhook_db_connections: int = Field(default=2, ge=1, le=100)
    # Whether this process runs the deliverer (`chatgql serve --no-webhooks` leaves it out; one
    # delivers at a time, the others stand by).
    run_webhooks: bool = True
    # The before-send hook (services/beforesend.py, docs/guide/moderation.md): an endpoint asked before
    # each message is stored, which accepts, rejects or rewrites it. Unset: none. Signed as the
    # webhooks are, with before_send_secret (required with the URL; webhook_allow_private applies).
    before_send_url: str | None = None
    before_send_secret: SecretStr | None = None
    # The whole exchange; no verdict within it is a failure.
    before_send_timeout_seconds: float = Field(default=2.0, gt=0, le=30)
    # On a failure: true stores the message as sent (fail open); false refuses the send with
    # UNAVAILABLE, reason BEFORE_SEND_UNAVAILABLE (fail closed).
    before_send_fail_open: bool = False
    # Presence (who has a websocket open, for webhooks' recipients): with a Redis bus each process
    # refreshes its entry this often; a process not heard from for 3 times it counts as gone.
    presence_heartbeat_seconds: float = Field(default=5.0, gt=0)

    @model_validator(mode="after")
    def _webhooks_are_complete(self) -> Settings:
        if self.webhook_url is None:
            return self
        from .events.webhooks import check_url, parse_kinds, parse_secret  # refused at start

        if self.webhook_secret is None:
            raise ValueError(
                "CHATGQL_WEBHOOK_URL needs CHATGQL_WEBHOOK_SECRET (base64, e.g. whsec_ + "
                "`openssl rand -base64 32`): every request is signed with it"
            )
        parse_secret(self.webhook_secret.get_secret_value())
        parse_kinds(self.webhook_events)
        check_url(self.webhook_url, self.webhook_allow_private)
        return self

    @model_validator(mode="after")
    def _before_send_is_complete(self) -> Settings:
        if self.before_send_url is None:
            return self
        from .events.webhooks import check_url, parse_secret  # refused at start

        if self.before_send_secret is None:
            raise ValueError(
                "CHATGQL_BEFORE_SEND_URL needs CHATGQL_BEFORE_SEND_SECRET: every request is signed with it"
            )
        parse_secret(self.before_send_secret.get_secret_value())
        check_url(self.before_send_url, self.webhook_allow_private)
        return self

    @model_validator(mode="after")
    def _refuse_default_secret_in_production(self) -> Settings:
        if self.env == "production" and self.jwt_secret.get_secret_value() == DEV_JWT_SECRET:
            raise ValueError("CHATGQL_JWT_SECRET must be set to a secret of your own when CHATGQL_ENV=production")
        return self

    @property
    def workers_share_a_hub(self) -> bool:
        """Several workers and no Redis bus: their live events and rate limits go through their
        supervisor's hub (supervisor.py)."""
        return self.workers > 1 and self.broadcast_url.startswith("memory:")

    @property
    def graphiql_enabled(self) -> bool:
        return self.env == "development" if self.graphiql is None else self.graphiql

    @property
    def demo_enabled(self) -> bool:
        return self.env == "development" if self.demo is None else self.demo

    @property
    def dev_sign_in_enabled(self) -> bool:
        """POST /dev/token mints a token for any user id: development only, never a setting."""
        return self.env == "development"

    @property
    def access_log_enabled(self) -> bool:
        return self.env == "development" if self.access_log is None else self.access_log

    @property
    def introspection_enabled(self) -> bool:
        return self.env == "development" if self.introspection is None else self.introspection


def load_settings(**overrides: object) -> Settings:
    """Read the environment once; keyword overrides win (tests, CLI flags)."""
    return Settings(**overrides)  # type: ignore[arg-type]
