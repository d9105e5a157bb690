"""markRead's statement reads what its keys name, whatever the database holds.

store.reads.advance_watermarks takes its keys as a jsonb record set, which the planner estimates at
its default of 100 rows: joined plainly to conversation, the plan the prepared statement settles on
hashed the whole conversation table for a single key once there were a few thousand conversations
(bench/results/growth.md). The statement runs here as the product's prepared statement ends up
running it (a generic plan), under EXPLAIN ANALYZE in a transaction that is rolled back, over 5,000
conversations: conversation is probed by its primary key, one row a key, and the key's watermark
moves.
"""

from __future__ import annotations

import json

import asyncpg

from chatgql import db
from chatgql.store import reads

from ..conftest import drop_database, scratch_database

CONVERSATIONS = 5_000
SCANS = ("Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan")


def _scans(node: dict, relation: str) -> list[dict]:
    found = [node] if node.get("Node Type") in SCANS and node.get("Relation Name") == relation else []
    for child in node.get("Plans", ()):
        found += _scans(child, relation)
    return found


async def _generic_plan(conn: asyncpg.Connection, sql: str, types: str, args: str) -> tuple[dict, list]:
    """EXPLAIN ANALYZE of sql as a prepared statement's generic plan with these arguments (SQL
    literals), and the rows it answered, all rolled back."""
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    await conn.execute(f"PREPARE growth_probe({types}) AS {sql}")
    try:
        await conn.execute("BEGIN")
        try:
            plan = json.loads(
                await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE growth_probe({args})")
            )
        finally:
            await conn.execute("ROLLBACK")
        await conn.execute("BEGIN")
        try:
            rows = await conn.fetch(f"EXECUTE growth_probe({args})")
        finally:
            await conn.execute("ROLLBACK")
    finally:
        await conn.execute("DEALLOCATE growth_probe")
        await conn.execute("RESET plan_cache_mode")
    return plan[0]["Plan"], rows


async def test_markread_probes_its_conversation_by_key(database_url: str) -> None:
    url = await scratch_database(database_url, "chatgql_read_plans")
    try:
        conn = await asyncpg.connect(db.dsn(url))
        try:
            await conn.execute(
                f"""
                INSERT INTO conversation (id, type, last_seq) SELECT i, 'DIRECT', 50 FROM generate_series(1, {CONVERSATIONS}) i;
                INSERT INTO conversation_member (conversation_id, user_id, last_read_seq)
                SELECT i, u || i, 0 FROM generate_series(1, {CONVERSATIONS}) i, (VALUES ('a'), ('b')) v(u);
                ANALYZE;
                """
            )
            keys = [{"cid": 77, "uid": "a77", "seq": 10, "event": {"type": "read.updated"}}]
            sql = reads._advance_watermarks_sql("lastReadSeq")
            plan, rows = await _generic_plan(conn, sql, "jsonb", f"'{json.dumps(keys)}'")
            scans = _scans(plan, "conversation")
            assert scans, plan
            for scan in scans:
                assert scan["Node Type"] != "Seq Scan", scan
                examined = (scan["Actual Rows"] + scan.get("Rows Removed by Filter", 0)) * scan["Actual Loops"]
                assert examined <= 1, scan
            assert [(r["conversation_id"], r["user_id"], r["moved"], r["last_read_seq"]) for r in rows] == [
                (77, "a77", True, 10)
            ]
        finally:
            await conn.close()
    finally:
        await drop_database(database_url, "chatgql_read_plans")
