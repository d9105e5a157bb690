"""Full-text search (searchMessages) on the partitioned message table at 10 million messages.

`python -m bench.search` starts its own embedded PostgreSQL with one database migrated to the revision
before the search index (0010d), and loads it as bench/partition.py does (INSERT ... SELECT
generate_series, keys dropped and built again, wal_level=minimal for the load): CONVERSATIONS
conversations x MESSAGES messages with two members each, plus one big group of BIG_MESSAGES messages,
and SEARCHERS users who are each a member of SPAN conversations. Bodies are words of a VOCABULARY-word
vocabulary drawn with a Zipf-like law (rank r with probability ~ 1/r: rank = floor(exp(u ln(V + 1))),
u uniform): a few words are in most messages ("the", rank 1), most words are rare. A body is two
sentences of 3-6 words, each sentence drawn from a table of SENTENCES of them (so a rare word of one
sentence is in about CONVERSATIONS x MESSAGES x 2 / SENTENCES messages).

Then the index, as docs/operating/upgrading.md says to build it on a big table: CREATE INDEX
CONCURRENTLY on all partitions but one (timed, one partition at a time), then the migration itself
(0012_search: its CREATE INDEX on the parent attaches those and builds the last partition's in
the ordinary way, timed). Sizes from pg_relation_size.

Then pgbench (-M prepared, as asyncpg's prepared statements) runs the product's own statements
(chatgql.store.search, recorded at run time as bench.product_sql does: the query's parse, then the
first page of 20 hits) for a rare and a common term: within one random 100-message conversation,
within the big group, and across a random searcher's SPAN conversations. EXPLAIN ANALYZE of each
with its parameters bound (a custom plan) and with a generic plan. Writes bench/results/search.md.
Sizes via CHATGQL_BENCH_SEARCH_CONVERSATIONS / _MESSAGES / _BIG / _SECONDS.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import asyncpg

from chatgql import db
from chatgql.store import search

from . import product_sql
from .infra import REPO, Postgres, log
from .partition import AFTER_LOAD, CLIENTS, FAST_LOAD, THREADS, _admin, _machine, _pgbench, _restart, _url

CONVERSATIONS = int(os.environ.get("CHATGQL_BENCH_SEARCH_CONVERSATIONS", 100_000))
MESSAGES = int(os.environ.get("CHATGQL_BENCH_SEARCH_MESSAGES", 100))
BIG_MESSAGES = int(os.environ.get("CHATGQL_BENCH_SEARCH_BIG", 200_000))
SECONDS = float(os.environ.get("CHATGQL_BENCH_SEARCH_SECONDS", 10))
VOCABULARY = 50_000
SENTENCES = 200_000
SEARCHERS, SPAN = 1_000, 50
OTHER = 1_000_000_000  # user OTHER + cid is the second member of conversation cid; user cid sends
SEARCHER = 2_000_000_000  # user SEARCHER + k (1..SEARCHERS) is in SPAN conversations
BIG = CONVERSATIONS + 1  # the big group: users 1..SPAN are members besides the searchers' own
PAGE = 20
BEFORE, INDEXED = "0010d", "0012_search"
DATABASE = "search"
RESULTS = REPO / "bench" / "results" / "search.md"
COMMON = ["the", "to", "and", "you", "i", "a", "it", "is", "of", "in", "that", "we", "for", "on", "ok"]
_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "do", "gu", "he", "ji", "bo", "fe"]

_KEYS = ["message_reply_idx", "message_client_msg_id_key", "message_pkey"]
_ADD_KEYS = [
    "ALTER TABLE message ADD CONSTRAINT message_pkey PRIMARY KEY (conversation_id, seq)",
    "ALTER TABLE message ADD CONSTRAINT message_client_msg_id_key UNIQUE (conversation_id, client_msg_id)",
    "CREATE INDEX message_reply_idx ON message (conversation_id, reply_to_seq, seq) WHERE reply_to_seq IS NOT NULL",
]


def _word_sql() -> str:
    """The word of rank r: a common English word for the first ranks, else base-16 syllables of r."""
    common = "ARRAY[" + ", ".join(f"'{w}'" for w in COMMON) + "]"
    syllables = "ARRAY[" + ", ".join(f"'{s}'" for s in _SYLLABLES) + "]"
    return f"""
        CASE WHEN r <= {len(COMMON)} THEN ({common})[r]
             ELSE (SELECT string_agg(({syllables})[((r >> (4 * d)) & 15) + 1], '' ORDER BY d DESC)
                     FROM generate_series(0, 4) d WHERE r >> (4 * d) > 0) END
    """


async def _load(conn: asyncpg.Connection) -> dict:
    """Fill the database in one transaction (TRUNCATE makes new storage, which skips WAL)."""
    t0 = time.monotonic()
    async with conn.transaction():
        await conn.execute("SET maintenance_work_mem = '512MB'")
        await conn.execute(f"ALTER TABLE message DROP CONSTRAINT {_KEYS[2]}")
        await conn.execute(f"ALTER TABLE message DROP CONSTRAINT {_KEYS[1]}")
        await conn.execute(f"DROP INDEX {_KEYS[0]}")
        await conn.execute("ALTER TABLE message DROP CONSTRAINT message_conversation_id_fkey")
        await conn.execute("TRUNCATE message, conversation_member, direct_pair, conversation, outbox")
        await conn.execute(
            f"CREATE TEMP TABLE vocab AS SELECT r, {_word_sql()} AS word FROM generate_series(1, {VOCABULARY}) r"
        )
        await conn.execute("CREATE UNIQUE INDEX ON vocab (r)")
        await conn.execute(
            f"""
            CREATE TEMP TABLE sentence AS
            SELECT i AS id, (SELECT string_agg((SELECT v.word FROM vocab v WHERE v.r = w.r), ' ')
                               FROM (SELECT floor(exp(random() * ln({VOCABULARY} + 1)))::int AS r
                                       FROM generate_series(1, 3 + (i % 4))) w) AS body
              FROM generate_series(1, {SENTENCES}) i
            """
        )
        await conn.execute("CREATE UNIQUE INDEX ON sentence (id)")
        await conn.execute("ANALYZE sentence")
        await conn.execute(
            f"""
            INSERT INTO conversation (id, type, title, last_seq, last_message_at)
            SELECT c, 'GROUP', 'g' || c, CASE WHEN c = {BIG} THEN {BIG_MESSAGES} ELSE {MESSAGES} END, now()
              FROM generate_series(1, {BIG}) c
            """
        )
        await conn.execute(
            f"""
            INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
            SELECT c, u.user_id, u.role, {MESSAGES} FROM generate_series(1, {CONVERSATIONS}) c,
                   LATERAL (VALUES (c::bigint, 'OWNER'), ({OTHER} + c, 'MEMBER')) u(user_id, role)
            UNION ALL
            SELECT ((k * {SPAN} + j) * 7919) % {CONVERSATIONS} + 1, {SEARCHER} + k, 'MEMBER', {MESSAGES}
              FROM generate_series(1, {SEARCHERS}) k, generate_series(0, {SPAN - 1}) j
            UNION ALL
            SELECT {BIG}, u, CASE WHEN u = 1 THEN 'OWNER' ELSE 'MEMBER' END, {BIG_MESSAGES}
              FROM generate_series(1, {SPAN}) u
            """
        )
        await conn.execute(
            f"""
            INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body, created_at)
            SELECT g.c, g.s, CASE WHEN g.s % 2 = 0 THEN g.c ELSE {OTHER} + g.c END, gen_random_uuid(),
                   a.body || '. ' || b.body, now() - make_interval(secs => {MESSAGES} - g.s)
              FROM (SELECT c, s, 1 + floor(random() * {SENTENCES})::int AS x, 1 + floor(random() * {SENTENCES})::int AS y
                      FROM generate_series(1, {CONVERSATIONS}) c, generate_series(1, {MESSAGES}) s) g
              JOIN sentence a ON a.id = g.x JOIN sentence b ON b.id = g.y
            """
        )
        await conn.execute(
            f"""
            INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body, created_at)
            SELECT {BIG}, g.s, 1 + g.s % {SPAN}, gen_random_uuid(), a.body || '. ' || b.body,
                   now() - make_interval(secs => {BIG_MESSAGES} - g.s)
              FROM (SELECT s, 1 + floor(random() * {SENTENCES})::int AS x, 1 + floor(random() * {SENTENCES})::int AS y
                      FROM generate_series(1, {BIG_MESSAGES}) s) g
              JOIN sentence a ON a.id = g.x JOIN sentence b ON b.id = g.y
            """
        )
        loaded = time.monotonic() - t0
        for statement in _ADD_KEYS:
            await conn.execute(statement)
        await conn.execute(
            "ALTER TABLE message ADD CONSTRAINT message_conversation_id_fkey"
            " FOREIGN KEY (conversation_id) REFERENCES conversation (id)"
        )
        await conn.execute(f"SELECT setval(pg_get_serial_sequence('conversation', 'id'), {BIG})")
        # the rare term: a word of exactly one sentence, found in ~2 x rows / SENTENCES messages
        rare = await conn.fetchval(
            f"""
            SELECT v.word FROM vocab v
             WHERE v.r BETWEEN {VOCABULARY // 2} AND {VOCABULARY}
               AND (SELECT count(*) FROM sentence s WHERE s.body ~ ('(^| )' || v.word || '( |$)')) = 1
             LIMIT 1
            """
        )
    keyed = time.monotonic() - t0
    await conn.execute("VACUUM (ANALYZE) message")
    await conn.execute("VACUUM (ANALYZE) conversation, conversation_member")
    size = await conn.fetchrow(
        """
        SELECT sum(pg_table_size(c.oid)) AS heap, sum(pg_indexes_size(c.oid)) AS indexes, count(*) AS tables
          FROM pg_class c WHERE c.relkind = 'r' AND c.relname ~ '^message_p[0-9]+$'
        """
    )
    return {
        "rows": CONVERSATIONS * MESSAGES + BIG_MESSAGES,
        "insert_s": round(loaded, 1),
        "with_keys_s": round(keyed, 1),
        "total_s": round(time.monotonic() - t0, 1),
        "heap_mb": round(size["heap"] / 2**20),
        "indexes_mb": round(size["indexes"] / 2**20),
        "rare": rare,
        "avg_body_chars": round(
            await conn.fetchval("SELECT avg(length(body)) FROM message WHERE conversation_id <= 1000"), 1
        ),
    }


async def _build_index(pg: Postgres) -> dict:
    """CONCURRENTLY on partitions 1..15, then the migration (partition 0 built, the others attached)."""
    conn = await asyncpg.connect(db.dsn(_url(pg, DATABASE)))
    per_partition = []
    try:
        await conn.execute("SET maintenance_work_mem = '256MB'")
        await conn.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
        for p in range(1, 16):
            t0 = time.monotonic()
            await conn.execute(
                f"CREATE INDEX CONCURRENTLY message_p{p:02d}_search_idx ON message_p{p:02d}"
                " USING gin (conversation_id, to_tsvector('simple', body))"
            )
            per_partition.append(time.monotonic() - t0)
            log(f"partition {p}: {per_partition[-1]:.1f} s")
    finally:
        await conn.close()
    t0 = time.monotonic()
    await db.upgrade(_url(pg, DATABASE), INDEXED)
    migration = time.monotonic() - t0
    conn = await asyncpg.connect(db.dsn(_url(pg, DATABASE)))
    try:
        sizes = await conn.fetch(
            """
            SELECT c.relname, pg_relation_size(c.oid) AS bytes, i.indisvalid AS valid FROM pg_class c
              JOIN pg_index i ON i.indexrelid = c.oid
             WHERE c.relname ~ '^message_p[0-9]+_' AND pg_get_indexdef(c.oid) LIKE '%to_tsvector%'
            """
        )
        attached = await conn.fetchval(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'message_search_idx'::regclass"
        )
        heap = await conn.fetchval("SELECT pg_table_size('message_p00')")
    finally:
        await conn.close()
    return {
        "concurrent_s": [round(s, 1) for s in per_partition],
        "migration_s": round(migration, 1),
        "index_mb": round(sum(r["bytes"] for r in sizes) / 2**20),
        "indexes": len(sizes),
        "all_valid": all(r["valid"] for r in sizes),
        "attached": attached,
        "p00_heap_mb": round(heap / 2**20),
    }


def _statements(term: str, viewer: str, conversation: str | None) -> str:
    """The request's statements as one pgbench transaction: the parse (its tsquery into :tsq), then a page."""
    (parse,) = product_sql._record(("q", "prefix"), search.parse_query, term, None)
    names = ("viewer", "tsq", "at", "cid", "seq", "lim") + (("only",) if conversation else ())
    (page,) = product_sql._record(names, search.hits, 1, "x", PAGE + 1, None, 1 if conversation else None)
    parse_sql = parse.for_pgbench({"q": f"'{term}'", "prefix": "NULL"}).removesuffix(";") + " AS tsq"
    binds = {"viewer": viewer, "at": "NULL", "cid": str(2**63 - 1), "seq": str(2**63 - 1), "lim": str(PAGE + 1)}
    if conversation:
        binds["only"] = conversation
    return parse_sql + " \\gset\n" + page.for_pgbench(binds)


def _terms(rare: str) -> dict[str, str]:
    """What is searched for: a rare word, the commonest one, and both (all words must be there)."""
    return {"rare": rare, "common": "the", "common and rare": f"the {rare}"}


def _scripts(rare: str) -> dict[str, str]:
    one = f"\\set c random(1, {CONVERSATIONS})\n"
    searcher = f"\\set u random({SEARCHER + 1}, {SEARCHER + SEARCHERS})\n"
    scripts = {}
    for kind, term in _terms(rare).items():
        scripts[f"one conversation ({MESSAGES} messages), {kind}"] = one + _statements(term, f"{OTHER} + :c", ":c")
        scripts[f"the big group ({BIG_MESSAGES:,} messages), {kind}"] = f"\\set u random(1, {SPAN})\n" + _statements(
            term, ":u", str(BIG)
        )
        scripts[f"across {SPAN} conversations, {kind}"] = searcher + _statements(term, ":u", None)
    return scripts


def _trim(plan: list[str]) -> str:
    """The plan without the subtrees of partitions it never executed (pruned at run time)."""
    kept, skip_below = [], None
    for line in plan:
        depth = len(line) - len(line.lstrip())
        if skip_below is not None and depth > skip_below:
            continue
        skip_below = None
        if "(never executed)" in line:
            skip_below = depth
            continue
        kept.append(line)
    return "\n".join(kept)


async def _plans(pg: Postgres, rare: str) -> tuple[dict[str, str], dict[str, tuple[str, int, float]]]:
    """EXPLAIN ANALYZE of the page statements, parameters bound (custom plan) and with a generic plan;
    and, per term, how many messages hold it (counted with the index) and how long that took."""
    conn = await asyncpg.connect(db.dsn(_url(pg, DATABASE)))
    plans = {}
    try:
        for kind, term in _terms(rare).items():
            tsq = await search.parse_query(conn, term)
            cases = {
                "one conversation": (OTHER + 4242, 4242),
                "the big group": (1, BIG),
                f"across {SPAN} conversations": (SEARCHER + 42, None),
            }
            for name, (viewer, cid) in cases.items():
                recorder = product_sql._RecordingConnection()
                await search.hits(recorder, viewer, tsq, PAGE + 1, None, cid)
                ((sql, args),) = recorder.statements
                await conn.fetch(sql, *args)  # warm: both plans below find the same pages in the cache
                for mode in ("auto", "force_generic_plan"):
                    await conn.execute(f"SET plan_cache_mode = {mode}")
                    rows = await conn.fetch(f"EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) {sql}", *args)
                    plans[f"{name}, {kind} ({'generic' if mode != 'auto' else 'custom'} plan)"] = _trim(
                        [r[0] for r in rows]
                    )
        counts = {}
        for kind, term in _terms(rare).items():
            t0 = time.monotonic()
            n = await conn.fetchval(
                "SELECT count(*) FROM message WHERE to_tsvector('simple', body) @@ websearch_to_tsquery('simple', $1)",
                term,
            )
            counts[kind] = (term, n, round(time.monotonic() - t0, 1))
    finally:
        await conn.close()
    return plans, counts


async def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-search-"))
    workdir = scratch / "work"
    workdir.mkdir()
    t_start = time.monotonic()
    pg = Postgres.start(scratch)
    try:
        await _admin(pg, f"CREATE DATABASE {DATABASE}")
        await db.upgrade(_url(pg, DATABASE), BEFORE)
        pg = await _restart(pg, scratch, *FAST_LOAD)
        log(f"loading {CONVERSATIONS:,} x {MESSAGES} messages + a group of {BIG_MESSAGES:,}")
        conn = await asyncpg.connect(db.dsn(_url(pg, DATABASE)))
        try:
            load = await _load(conn)
        finally:
            await conn.close()
        await _admin(pg, "CHECKPOINT")
        log(f"loaded: {load}")
        pg = await _restart(pg, scratch, *AFTER_LOAD)
        index = await _build_index(pg)
        log(f"indexed: {index}")
        plans, counts = await _plans(pg, load["rare"])
        scripts = _scripts(load["rare"])
        results = {}
        for name, script in scripts.items():
            _pgbench(pg, DATABASE, name, script, workdir, 2)  # warm-up
            results[name] = _pgbench(pg, DATABASE, name, script, workdir, SECONDS)
            log(name, results[name])
        total = time.monotonic() - t_start
        _write(load, index, results, plans, counts, scripts, total)
        log(f"wrote {RESULTS} ({total:.0f} s in all)")
    finally:
        pg.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def _execution_ms(plan: str) -> str:
    found = re.search(r"Execution Time: ([0-9.]+) ms", plan)
    return found.group(1) if found else "?"


def _write(load: dict, index: dict, results: dict, plans: dict, counts: dict, scripts: dict, total: float) -> None:
    concurrent = index["concurrent_s"]
    lines = [
        "# Full-text search on the message table (bench/search.py)",
        "",
        f"Run {time.strftime('%Y-%m-%d %H:%M')} with `python -m bench.search`, {total:.0f} s in all. "
        f"Machine: {_machine()}.",
        "",
        f"Data: {CONVERSATIONS:,} conversations x {MESSAGES} messages, 2 members each, plus one group of "
        f"{BIG_MESSAGES:,} messages: {load['rows']:,} message rows in 16 hash partitions. {SEARCHERS:,} searchers "
        f"are each a member of {SPAN} conversations. Bodies: two sentences of 3-6 words from a {VOCABULARY:,}-word "
        f"vocabulary, Zipf-like (rank r with probability ~1/r), {load['avg_body_chars']} characters on average. "
        f"Terms: common `{counts['common'][0]}` (rank 1, in {counts['common'][1]:,} messages), rare "
        f"`{counts['rare'][0]}` (in {counts['rare'][1]:,} messages), and both (`{counts['common and rare'][0]}`: "
        f"all words must be there, {counts['common and rare'][1]:,} messages); counting them with the index took "
        f"{counts['common'][2]} s, {counts['rare'][2]} s and {counts['common and rare'][2]} s.",
        "",
        "## Load",
        "",
        f"INSERT ... SELECT {load['insert_s']} s, with keys {load['with_keys_s']} s, with VACUUM ANALYZE "
        f"{load['total_s']} s (wal_level=minimal). Heap {load['heap_mb']:,} MB, b-tree indexes {load['indexes_mb']:,} MB.",
        "",
        "## The index (migration 0012_search)",
        "",
        f"- CREATE INDEX CONCURRENTLY on 15 of the 16 partitions, one after the other: {sum(concurrent):.0f} s in "
        f"all ({min(concurrent)}-{max(concurrent)} s each), sends and reads going on meanwhile.",
        f"- Then the migration's CREATE INDEX on the parent: {index['migration_s']} s. It attached the 15 "
        f"({index['attached']} partitions attached in all, every index valid: {index['all_valid']}) and built "
        f"partition 0's ({index['p00_heap_mb']} MB of heap) under its lock: that partition's sends waited "
        "for that long. Without the CONCURRENTLY step the migration would hold each partition's lock in turn "
        f"for about as long: ~{16 * index['migration_s']:.0f} s in all.",
        f"- Size: {index['index_mb']:,} MB for {index['indexes']} partition indexes "
        f"({100 * index['index_mb'] / max(1, load['heap_mb']):.0f}% of the heap).",
        "",
        "## Searches",
        "",
        f"pgbench, {CLIENTS} clients, {THREADS} threads, -M prepared, {SECONDS:.0f} s each after a 2 s warm-up; "
        f"one transaction = one searchMessages request's statements (the parse, then the first page: "
        f"{PAGE} hits + 1).",
        "",
        "| search | tps | latency (ms) | alone, generic plan (ms) | alone, custom plan (ms) |",
        "|---|---|---|---|---|",
    ]
    for name, run in results.items():
        place, kind = name.split(", ", 1)
        place = place.split(" (")[0]
        alone = [_execution_ms(plans[f"{place}, {kind} ({mode} plan)"]) for mode in ("generic", "custom")]
        lines.append(f"| {name} | {run['tps']:,.0f} | {run['latency_ms']:.2f} | {alone[0]} | {alone[1]} |")
    lines += [
        "",
        "tps and latency: pgbench's, 8 clients on 2 shared cores. Alone: EXPLAIN ANALYZE's execution time of "
        "the page statement for one searcher or conversation (below), run once before to warm the cache, no other "
        "search running. Conversations' messages are spread over the heap (the load's join order), as messages "
        "sent over time among other conversations' are: each hit read is a heap page of its own.",
    ]
    lines += ["", "## Plans (EXPLAIN ANALYZE)", ""]
    for name, plan in plans.items():
        lines += [f"{name}:", "", "```", plan, "```", ""]
    lines += ["## The pgbench scripts", ""]
    for name, script in scripts.items():
        lines += [f"{name}:", "", "```", script.strip(), "```", ""]
    RESULTS.write_text("\n".join(lines))


if __name__ == "__main__":
    asyncio.run(main())
