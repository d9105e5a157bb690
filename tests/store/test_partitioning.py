"""The partitioned message table (migration 0005): what is partitioned, that the
migration moves the data both ways, and that every statement on the hot paths
touches one partition per conversation it names.

How the hot paths are checked: real GraphQL requests run against the session's
server while the statements its pool runs are recorded with their parameters
(asyncpg's query logger). Each recorded statement on `message` is then run
again, with the same parameters, in a transaction that is rolled back, once
with custom plans and once with generic ones (a generic plan prunes at run
time: "Subplans Removed", or per loop under a nested loop). Two independent
witnesses of what it touched:

- pg_stat_xact_user_tables: this transaction's scans and inserted rows per
  partition (it sees inside chat_send, a plpgsql function, too);
- auto_explain's plans (ANALYZE, nested statements included): which partition
  scans ran, and under each Append how many times; a LATERAL probe per
  conversation (inbox lastMessage, sync, history pages) must run at most one
  partition scan per probe.

A statement that names `message` and that this test does not know fails it:
add it to KNOWN with where its conversation ids are.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text

from chatgql import db

from ..conftest import drop_database, scratch_database
from ..graphql.test_query_count import logging_statements, outbox_drained
from ..services.test_history import create_group, mark_read, send, send_many

PARTITIONS = 16
NAMES_MESSAGE = re.compile(r"\b(FROM|JOIN|INTO|UPDATE)\s+message\b|\bchat_send\s*\(", re.I)

# Statement on message -> its conversation ids, from its parameters.
KNOWN: list[tuple[str, re.Pattern[str], Callable[[tuple], list[int]]]] = [
    ("send (chat_send)", re.compile(r"chat_send\("), lambda args: [args[0]]),
    ("history page", re.compile(r"ORDER BY seq (ASC|DESC)\s+LIMIT \$4"), lambda args: [args[0]]),
    ("history pages", re.compile(r"LIMIT k\.lim"), lambda args: list(args[1])),
    ("by_keys (lastMessage)", re.compile(r"seq = k\.seq"), lambda args: list(args[0])),
    ("after_many (sync)", re.compile(r"seq > k\.after_seq\s+ORDER BY seq\s+LIMIT \$3"), lambda args: list(args[0])),
    # the inbox page joined to each conversation's last message: the conversations are the
    # viewer's page, not in the arguments (None: any of the test's conversations)
    (
        "inbox page with last messages",
        re.compile(r"WHERE conversation_id = p\.id AND seq = p\.last_seq"),
        lambda args: None,
    ),
    # searchMessages: a probe per membership of the viewer (store/search.py), in one conversation or all of them
    ("search in one conversation", re.compile(r"AND cm\.conversation_id = \$7"), lambda args: [args[6]]),
    ("search across conversations", re.compile(r"WHERE cm\.user_id = \$1\s+ORDER BY m\.created_at"), lambda args: None),
]

AUTO_EXPLAIN = [
    "LOAD 'auto_explain'",
    "SET auto_explain.log_min_duration = 0",
    "SET auto_explain.log_analyze = on",
    "SET auto_explain.log_timing = off",
    "SET auto_explain.log_nested_statements = on",
    "SET auto_explain.log_format = json",
    "SET auto_explain.log_level = notice",
]

_COUNTERS = """
SELECT relname, seq_scan + idx_scan + n_tup_ins + n_tup_upd + n_tup_del AS touched
  FROM pg_stat_xact_user_tables WHERE relname ~ '^message_p[0-9]+$'
"""


# ------------------------------------------------------------------ the table


async def test_message_is_hash_partitioned_16_ways_and_every_unique_key_starts_with_conversation_id(engine):
    async with engine.connect() as conn:
        strategy = (
            await conn.execute(
                text(
                    "SELECT partstrat::text, pg_get_partkeydef('message'::regclass) FROM pg_partitioned_table"
                    " WHERE partrelid = 'message'::regclass"
                )
            )
        ).one()
        bounds = (
            await conn.execute(
                text(
                    "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
                    " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'message'::regclass ORDER BY 1"
                )
            )
        ).all()
        # Every unique index of the tables keyed by conversation (Citus: the distribution column first).
        unique = (
            await conn.execute(
                text(
                    """
                    SELECT t.relname, i.relname, a.attname
                      FROM pg_index x
                      JOIN pg_class i ON i.oid = x.indexrelid
                      JOIN pg_class t ON t.oid = x.indrelid
                      JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = x.indkey[0]
                     WHERE x.indisunique AND t.relname IN ('message', 'conversation_member', 'conversation')
                    """
                )
            )
        ).all()
        fk = (
            (
                await conn.execute(
                    text("SELECT conname FROM pg_constraint WHERE conrelid = 'message'::regclass AND contype = 'f'")
                )
            )
            .scalars()
            .all()
        )
    assert tuple(strategy) == ("h", "HASH (conversation_id)")
    assert [name for name, _ in bounds] == [f"message_p{r:02d}" for r in range(PARTITIONS)]
    assert [bound for _, bound in bounds] == [
        f"FOR VALUES WITH (modulus {PARTITIONS}, remainder {r})" for r in range(PARTITIONS)
    ]
    first_columns = {(table, index): column for table, index, column in unique}
    assert first_columns == {
        ("message", "message_pkey"): "conversation_id",
        ("message", "message_client_msg_id_key"): "conversation_id",
        ("conversation_member", "conversation_member_pkey"): "conversation_id",
        ("conversation", "conversation_pkey"): "id",  # the conversation id itself
    }
    assert fk == ["message_conversation_id_fkey"]


async def test_the_migration_moves_every_message_into_the_partitions_and_back(database_url):
    url = await scratch_database(database_url, "chatgql_partition_migration")
    try:
        await _migration_round_trip(url)
    finally:
        await drop_database(database_url, "chatgql_partition_migration")


async def _migration_round_trip(url: str) -> None:
    await asyncio.to_thread(_alembic, url, "downgrade", "0004")
    conn = await asyncpg.connect(db.dsn(url))
    try:
        assert await conn.fetchval("SELECT relkind::text FROM pg_class WHERE relname = 'message'") == "r"
        await conn.execute(
            """
            INSERT INTO conversation (type, title, last_seq) SELECT 'GROUP', 'g' || i, 7 FROM generate_series(1, 40) i;
            INSERT INTO conversation_member (conversation_id, user_id) SELECT id, 1 FROM conversation;
            INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body)
            SELECT c, s, 1, gen_random_uuid(), c || '/' || s FROM generate_series(1, 40) c, generate_series(1, 7) s;
            """
        )
        before = await conn.fetch("SELECT * FROM message ORDER BY conversation_id, seq")
        constraints = await conn.fetch(_CONSTRAINTS)
    finally:
        await conn.close()

    await asyncio.to_thread(_alembic, url, "upgrade", "0005")
    conn = await asyncpg.connect(db.dsn(url))
    try:
        assert await conn.fetchval("SELECT relkind::text FROM pg_class WHERE relname = 'message'") == "p"
        assert await conn.fetch("SELECT * FROM message ORDER BY conversation_id, seq") == before
        assert await conn.fetch(_CONSTRAINTS) == constraints
        assert await conn.fetchval(_CHAT_SEND_CONFIG) == ["plan_cache_mode=force_generic_plan"]
        spread = await conn.fetchval("SELECT count(DISTINCT tableoid) FROM message")
        assert spread > 8  # 40 conversations over 16 partitions
        # The keys hold on the new table, and a send works in a session that compiled chat_send before.
        retried = uuid.uuid4()
        await _send(conn, 3, retried, "stored")
        await _send(conn, 3, retried, "duplicate")
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(
                "INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body)"
                " VALUES (3, 1, 1, gen_random_uuid(), 'x')"
            )
        with pytest.raises(asyncpg.ForeignKeyViolationError):
            await conn.execute(
                "INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body)"
                " VALUES (999, 1, 1, gen_random_uuid(), 'x')"
            )
        after = await conn.fetch("SELECT * FROM message ORDER BY conversation_id, seq")
        assert len(after) == len(before) + 1
    finally:
        await conn.close()

    await asyncio.to_thread(_alembic, url, "downgrade", "0004")
    conn = await asyncpg.connect(db.dsn(url))
    try:
        assert await conn.fetchval("SELECT relkind::text FROM pg_class WHERE relname = 'message'") == "r"
        assert await conn.fetchval("SELECT count(*) FROM pg_class WHERE relname ~ '^message_p[0-9]+$'") == 0
        assert await conn.fetch("SELECT * FROM message ORDER BY conversation_id, seq") == after
        await _send(conn, 3, retried, "duplicate")
        await _send(conn, 3, uuid.uuid4(), "stored")
        assert await conn.fetchval(_CHAT_SEND_CONFIG) is None
        assert await conn.fetch(_CONSTRAINTS) == constraints
    finally:
        await conn.close()
    await asyncio.to_thread(_alembic, url, "upgrade", "head")


_CHAT_SEND_CONFIG = "SELECT proconfig FROM pg_proc WHERE proname = 'chat_send'"
_CONSTRAINTS = """
SELECT conname, contype::text, pg_get_constraintdef(oid) FROM pg_constraint
 WHERE conrelid = 'message'::regclass ORDER BY conname
"""


async def _send(conn: asyncpg.Connection, conversation_id: int, client_msg_id: uuid.UUID, outcome: str) -> None:
    row = await conn.fetchrow(
        "SELECT * FROM chat_send($1, 1, $2, 'hello', '{}'::jsonb, '{}'::jsonb)", conversation_id, client_msg_id
    )
    assert row["outcome"] == outcome


def _alembic(url: str, action: str, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(db.ALEMBIC_DIR))
    cfg.attributes["database_url"] = db.asyncpg_url(url)
    getattr(command, action)(cfg, revision)


# ------------------------------------------------------------------ the hot paths


class Witness:
    """Runs a statement again in a rolled-back transaction and reports what it touched."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.plans: list[dict] = []
        conn.add_log_listener(self._on_notice)

    def _on_notice(self, _conn: Any, message: Any) -> None:
        with contextlib.suppress(ValueError):
            plan = json.loads(message.message.split("plan:", 1)[1])
            if "pg_stat_xact_user_tables" not in plan.get("Query Text", ""):
                self.plans.append(plan)

    async def run(self, sql: str, args: tuple, mode: str) -> tuple[set[str], list[dict]]:
        """(partitions whose counters moved, the plans of the statement and of what it ran)."""
        transaction = self.conn.transaction()
        await transaction.start()
        try:
            await self.conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
            before = {r["relname"]: r["touched"] for r in await self.conn.fetch(_COUNTERS)}
            self.plans = []
            await self.conn.fetch(sql, *args)
            after = {r["relname"]: r["touched"] for r in await self.conn.fetch(_COUNTERS)}
            await asyncio.sleep(0.01)  # the notices' listeners run on the loop's next turns
        finally:
            await transaction.rollback()
        return {name for name, n in after.items() if n != before.get(name, 0)}, self.plans


def partition_scans(plan: dict) -> Iterator[tuple[dict, list[dict]]]:
    """(node, its children that scan a message partition), for every node of a plan tree."""
    children = plan.get("Plans", [])
    yield plan, [c for c in children if re.fullmatch(r"message_p\d+", c.get("Relation Name", ""))]
    for child in children:
        yield from partition_scans(child)


def check_plan(plan: dict, allowed: set[str]) -> set[str]:
    """The partitions the plan's executed scans touched; asserts one partition per Append execution."""
    used: set[str] = set()
    for node, scans in partition_scans(plan["Plan"]):
        if re.fullmatch(r"message_p\d+", node.get("Relation Name", "")) and node["Actual Loops"] > 0:
            used.add(node["Relation Name"])
        ran = [s for s in scans if s["Actual Loops"] > 0]
        if node["Node Type"] in ("Append", "Merge Append") and scans:
            # Each time the Append runs (once per LATERAL probe) at most one partition is scanned.
            assert sum(s["Actual Loops"] for s in ran) <= node["Actual Loops"], (plan["Query Text"], node)
    assert used <= allowed, (plan["Query Text"], used, allowed)
    return used


async def partition_of(conn: asyncpg.Connection, conversation_ids: list[int]) -> dict[int, str]:
    rows = await conn.fetch(
        "SELECT DISTINCT conversation_id, tableoid::regclass::text AS part FROM message"
        " WHERE conversation_id = ANY($1::bigint[])",
        conversation_ids,
    )
    return {r["conversation_id"]: r["part"] for r in rows}


async def test_every_hot_path_statement_touches_one_partition_per_conversation(server, client, engine, migrated_url):
    owner, other = 1, 2
    conversations = [await create_group(client, owner, [other], f"g{i}") for i in range(12)]
    cid = conversations[0]
    for c in conversations:
        await send_many(client, owner, c, 4)
    await outbox_drained(engine)
    retry = str(uuid.uuid4())
    send_doc = (
        'mutation($c: ID!, $k: UUID!) { sendMessage(conversationId: $c, clientMsgId: $k, body: "r") '
        "{ message { seq } duplicate } }"
    )
    page = "nodes { seq seenByCount seenBy seen } pageInfo { hasNextPage hasPreviousPage }"
    with logging_statements(server) as recorded:
        await send(client, owner, cid, "one more")
        first = await client.data(send_doc, {"c": cid, "k": retry}, user=owner)
        again = await client.data(send_doc, {"c": cid, "k": retry}, user=owner)
        assert again["sendMessage"] == {**first["sendMessage"], "duplicate": True}
        await mark_read(client, other, cid, 3)
        await client.data(
            f'query($c: ID!) {{ messages(conversationId: $c, first: 2, after: "1") {{ {page} }} }}',
            {"c": cid},
            user=other,
        )
        await client.data(
            f'query($c: ID!) {{ messages(conversationId: $c, last: 2, before: "4") {{ {page} }} }}',
            {"c": cid},
            user=other,
        )
        await client.data(f"query($c: ID!) {{ messages(conversationId: $c) {{ {page} }} }}", {"c": cid}, user=other)
        await client.data(
            "query($c: ID!) { conversation(id: $c) { lastMessage { seq seenByCount } } }", {"c": cid}, user=other
        )
        await client.data("{ inbox(first: 20) { nodes { id lastMessage { seq body } } } }", user=other)
        await client.data("{ inbox(first: 5) { nodes { messages(last: 2) { nodes { seq } } } } }", user=other)
        await client.data(
            "query($k: [SyncCursor!]!) { sync(cursors: $k, limit: 3) { conversationId hasMore messages { seq } } }",
            {"k": [{"conversationId": c, "afterSeq": 1} for c in conversations]},
            user=other,
        )
        search = 'query($c: ID) { searchMessages(query: "m2 or more", conversationId: $c) { nodes { seq } } }'
        await client.data(search, {"c": cid}, user=other)
        await client.data(search, {"c": None}, user=other)
        await asyncio.sleep(0.05)  # the last statements' loggers run on the loop's next turns

    on_message = [(sql, args) for sql, args in recorded if NAMES_MESSAGE.search(sql)]
    kinds: dict[str, list[tuple[str, tuple]]] = {}
    for sql, args in on_message:
        matches = [name for name, pattern, _ in KNOWN if pattern.search(sql)]
        assert len(matches) == 1, f"a statement on message this test does not know:\n{sql}"
        kinds.setdefault(matches[0], []).append((sql, args))
    assert set(kinds) == {name for name, _, _ in KNOWN}, set(kinds)
    # markRead, seenBy, seenByCount, seen: conversation_member and conversation only.
    others = {" ".join(sql.split()) for sql, _ in recorded if not NAMES_MESSAGE.search(sql)}
    assert any("UPDATE conversation_member" in s for s in others), {s[:60] for s in others}

    conn = await asyncpg.connect(db.dsn(migrated_url))
    try:
        await db._setup_connection(conn)  # jsonb parameters, as the pool has them
        for statement in AUTO_EXPLAIN:
            await conn.execute(statement)
        witness = Witness(conn)
        ids = [int(c) for c in conversations]
        home = await partition_of(conn, ids)
        assert len(set(home.values())) > 1  # the test spans several partitions
        checked = 0
        for name, _, conversation_ids in KNOWN:
            for sql, args in kinds[name][:3]:
                variants = [args]
                if name.startswith("send"):  # the insert path too, not only the dedupe lookup
                    variants.append((args[0], args[1], uuid.uuid4(), *args[3:]))
                for values in variants:
                    named = conversation_ids(values)
                    wanted = {home[c] for c in (ids if named is None else named)}
                    for mode in ("force_custom_plan", "force_generic_plan"):
                        touched, plans = await witness.run(sql, values, mode)
                        assert touched and touched <= wanted, (name, mode, touched, wanted)
                        if len(wanted) == 1:
                            assert len(touched) == 1, (name, mode, touched)
                        used = set()
                        for plan in plans:
                            used |= check_plan(plan, wanted)
                        assert used or name.startswith("send"), (name, mode, plans)
                        checked += 1
        assert checked >= 2 * (len(KNOWN) + 1)

        # The witnesses can fail: a statement without conversation_id scans every partition.
        touched, plans = await witness.run("SELECT count(*) FROM message WHERE seq = $1", (1,), "force_generic_plan")
        assert touched == set(home.values()) | touched and len(touched) > 1
        with pytest.raises(AssertionError):
            for plan in plans:
                check_plan(plan, {home[ids[0]]})
    finally:
        await conn.close()
