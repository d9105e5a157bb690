"""Sizes of a run (smoke or full), the ids of the seeded data, and seeding.

Conversation and user id ranges (users are not stored; a token's sub is the id):

| what                              | conversation ids          | users                                  |
|-----------------------------------|---------------------------|----------------------------------------|
| send, spread (DIRECT)             | 1 .. spread               | sender 1,000,000+i, other 2,000,000+i  |
| send, hot (GROUP)                 | 90,001                    | members 3,000,000+j, j = 1 .. hot      |
| read (DIRECT, last_seq = 10^12)   | 100,000+i                 | reader 7,000,000+i, other 7,500,000+i  |
| inbox (DIRECT)                    | 200,000+k, k = 1 .. 200   | viewer 8,000,000, other 8,000,000+k    |
| fanout (GROUP)                    | 300,001                   | members 4,000,000+j, j = 1 .. fanout   |
| live (DIRECT)                     | 400,000+k                 | subscriber 5,000,000, sender 5,000,000+k |
| connections (no conversation)     | -                         | 6,000,000+i                            |
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

SPREAD_SENDER, SPREAD_OTHER = 1_000_000, 2_000_000
HOT_CID, HOT_MEMBER = 90_001, 3_000_000
READ_CID0, READER, READ_OTHER = 100_000, 7_000_000, 7_500_000
INBOX_CID0, INBOX_USER = 200_000, 8_000_000
FANOUT_CID, FANOUT_MEMBER = 300_001, 4_000_000
LIVE_CID0, LIVE_USER = 400_000, 5_000_000
CONN_USER = 6_000_000
READ_LAST_SEQ = 10**12  # markRead conversations: far ahead, so every increasing seq advances


@dataclass(frozen=True)
class Sizes:
    mode: str
    # data
    spread: int  # conversations the spread send picks from
    seed_messages: int  # messages already in each spread conversation
    hot_members: int  # senders in the hot conversation
    read_conversations: int
    inbox_conversations: int
    inbox_page: int
    inbox_messages: int  # messages in each inbox conversation
    fanout_members: int
    live_conversations: int
    connections: int
    # load
    clients: int  # pgbench clients = HTTP connections
    threads: int  # pgbench -j = wrk -t
    duration: float  # seconds measured per figure and side (two runs of half, A B B A)
    warmup: float  # seconds of unmeasured run before it
    live_rate: float  # messages per second (the target's rate)
    live_low_rate: float  # also measured first, at a rate one server process can sustain (0: no)
    live_seconds: float
    fanout_rounds: int
    fanout_procs: int  # client processes holding the fanout websockets
    connection_procs: int
    connection_warmup: int  # websockets opened before the "before" RSS reading

    def as_dict(self) -> dict:
        return asdict(self)


FULL = Sizes(
    mode="full",
    spread=10_000,
    seed_messages=10,
    hot_members=1_000,
    read_conversations=10_000,
    inbox_conversations=200,
    inbox_page=50,
    inbox_messages=20,
    fanout_members=1_000,
    live_conversations=100,
    connections=10_000,
    clients=16,
    threads=2,
    duration=20.0,
    warmup=3.0,
    live_rate=500.0,
    live_low_rate=100.0,
    live_seconds=10.0,
    fanout_rounds=5,
    fanout_procs=4,
    connection_procs=4,
    connection_warmup=200,
)

SMOKE = Sizes(
    # enough users that none goes over the server's per-user rate limits (sends 10/s, reads 20/s)
    mode="smoke",
    spread=1000,
    seed_messages=3,
    hot_members=500,
    read_conversations=1000,
    inbox_conversations=200,
    inbox_page=50,
    inbox_messages=3,
    fanout_members=20,
    live_conversations=10,
    connections=50,
    clients=4,
    threads=2,
    duration=2.0,
    warmup=0.0,
    live_rate=50.0,
    live_low_rate=20.0,
    live_seconds=1.0,
    fanout_rounds=2,
    fanout_procs=2,
    connection_procs=2,
    connection_warmup=10,
)


SEED_SQL = [
    # spread: DIRECT conversations, seed_messages each, both members have read everything
    """
    INSERT INTO conversation (id, type, last_seq, last_message_at, created_at)
    SELECT i, 'DIRECT', $2, now() - interval '1 hour' + i * interval '1 ms', now() - interval '2 days'
      FROM generate_series(1, $1::int) i
    """,
    """
    INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
    SELECT i, u.base + i, 'MEMBER', $2 FROM generate_series(1, $1::int) i,
           (VALUES (1000000), (2000000)) AS u(base)
    """,
    "INSERT INTO direct_pair SELECT 1000000 + i, 2000000 + i, i FROM generate_series(1, $1::int) i",
    """
    INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body, created_at)
    SELECT i, s, CASE WHEN s % 2 = 0 THEN 1000000 + i ELSE 2000000 + i END, gen_random_uuid(),
           'seed message ' || s, now() - interval '1 day' + s * interval '1 s'
      FROM generate_series(1, $1::int) i, generate_series(1, $2::int) s
    """,
]


async def seed(conn, sizes: Sizes) -> dict:
    """Write every conversation, member and message the scenarios use (asyncpg connection)."""
    n, m = sizes.spread, sizes.seed_messages
    for sql in SEED_SQL:
        if "$2" in sql:
            await conn.execute(sql, n, m)
        else:
            await conn.execute(sql, n)

    # hot: one GROUP, hot_members members, seed_messages messages
    await conn.execute(
        """INSERT INTO conversation (id, type, title, last_seq, last_message_at, created_at)
           VALUES ($1, 'GROUP', 'hot', $2, now() - interval '1 hour', now() - interval '2 days')""",
        HOT_CID,
        m,
    )
    await conn.execute(
        """INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
           SELECT $1, $2 + j, CASE WHEN j = 1 THEN 'OWNER' ELSE 'MEMBER' END, $4
             FROM generate_series(1, $3::int) j""",
        HOT_CID,
        HOT_MEMBER,
        sizes.hot_members,
        m,
    )
    await conn.execute(
        """INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body, created_at)
           SELECT $1, s, $2 + 1, gen_random_uuid(), 'seed message ' || s, now() - interval '1 day' + s * interval '1 s'
             FROM generate_series(1, $3::int) s""",
        HOT_CID,
        HOT_MEMBER,
        m,
    )

    # read: last_seq far ahead (no message rows needed: markRead only reads last_seq)
    await conn.execute(
        """INSERT INTO conversation (id, type, last_seq, last_message_at, created_at)
           SELECT $1 + i, 'DIRECT', $3, now() - interval '1 hour', now() - interval '2 days'
             FROM generate_series(1, $2::int) i""",
        READ_CID0,
        sizes.read_conversations,
        READ_LAST_SEQ,
    )
    await conn.execute(
        """INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
           SELECT $1 + i, u.base + i, 'MEMBER', 0 FROM generate_series(1, $2::int) i,
                  (VALUES ($3::bigint), ($4::bigint)) AS u(base)""",
        READ_CID0,
        sizes.read_conversations,
        READER,
        READ_OTHER,
    )

    # inbox: one viewer in inbox_conversations DIRECT chats with distinct activity times,
    # inbox_messages messages each, some unread
    k_n, im = sizes.inbox_conversations, sizes.inbox_messages
    await conn.execute(
        """INSERT INTO conversation (id, type, last_seq, last_message_at, created_at)
           SELECT $1 + k, 'DIRECT', $3, now() - k * interval '1 minute', now() - interval '30 days'
             FROM generate_series(1, $2::int) k""",
        INBOX_CID0,
        k_n,
        im,
    )
    await conn.execute(
        """INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
           SELECT $1 + k, $3::bigint, 'MEMBER', k % ($4::int + 1) FROM generate_series(1, $2::int) k
           UNION ALL
           SELECT $1 + k, $3::bigint + k, 'MEMBER', $4 FROM generate_series(1, $2::int) k""",
        INBOX_CID0,
        k_n,
        INBOX_USER,
        im,
    )
    await conn.execute(
        """INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body, created_at)
           SELECT $1 + k, s, CASE WHEN s % 2 = 0 THEN $3::bigint ELSE $3::bigint + k END, gen_random_uuid(),
                  'inbox message ' || s || ' of conversation ' || k,
                  now() - k * interval '1 minute' - ($4::int - s) * interval '1 s'
             FROM generate_series(1, $2::int) k, generate_series(1, $4::int) s""",
        INBOX_CID0,
        k_n,
        INBOX_USER,
        im,
    )

    # fanout: one GROUP of fanout_members
    await conn.execute(
        """INSERT INTO conversation (id, type, title, created_at) VALUES ($1, 'GROUP', 'fanout', now() - interval '1 day')""",
        FANOUT_CID,
    )
    await conn.execute(
        """INSERT INTO conversation_member (conversation_id, user_id, role)
           SELECT $1, $2 + j, CASE WHEN j = 1 THEN 'OWNER' ELSE 'MEMBER' END FROM generate_series(1, $3::int) j""",
        FANOUT_CID,
        FANOUT_MEMBER,
        sizes.fanout_members,
    )

    # live: the subscriber in live_conversations DIRECT chats, one sender each
    await conn.execute(
        """INSERT INTO conversation (id, type, created_at)
           SELECT $1 + k, 'DIRECT', now() - interval '1 day' FROM generate_series(1, $2::int) k""",
        LIVE_CID0,
        sizes.live_conversations,
    )
    await conn.execute(
        """INSERT INTO conversation_member (conversation_id, user_id, role)
           SELECT $1 + k, $3::bigint, 'MEMBER' FROM generate_series(1, $2::int) k
           UNION ALL
           SELECT $1 + k, $3::bigint + k, 'MEMBER' FROM generate_series(1, $2::int) k""",
        LIVE_CID0,
        sizes.live_conversations,
        LIVE_USER,
    )

    await conn.execute(
        "SELECT setval(pg_get_serial_sequence('conversation', 'id'), (SELECT max(id) FROM conversation))"
    )
    await conn.execute("VACUUM ANALYZE")
    await conn.execute("CHECKPOINT")
    counts = {}
    for table in ("conversation", "conversation_member", "message", "direct_pair"):
        counts[table] = await conn.fetchval(f"SELECT count(*) FROM {table}")
    return counts
