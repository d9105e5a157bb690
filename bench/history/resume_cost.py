"""Why a profile shows ~240 us of asyncpg self time per chat_send: the cost of waking up.

`python -m bench.history.resume_cost` runs the same client-side work (one asyncpg
fetchrow of a six-argument function returning one row, through the pool
chatgql uses) against server-side statements that differ only in how long
the server takes before answering, and reports the client's own CPU per call
(user and system time from getrusage, and context switches):

- `noop`: a plpgsql function with chat_send's signature that returns at once;
- `noop + 1 ms sleep`: the same function and pg_sleep(0.001): identical bytes
  on the wire, identical work in the client, the server idle while it waits;
- `chat_send`: the real send (a commit, so a WAL flush) with the same arguments.

On the 2-core VMs chatgql is measured on, the client's user time per call
grows from ~70-100 us (noop) to ~250 us (noop + sleep) with no change in the
work it does: after the process has slept, the same instructions run slower
(cold caches, an idle vCPU woken). py-spy charges that to the first frames
that run after the wait, asyncpg's protocol resuming the awaiting coroutine.
It is not asyncpg's code, and it shrinks when the process is busy (under
load the event loop rarely sleeps).
"""

from __future__ import annotations

import resource
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from chatgql import db
from chatgql.store import conversations

EVENT = {"type": "message.new", "conversationId": "1", "message": {"body": "x" * 50, "senderId": "1"}}
CALLS = 2000
NOOP = """
CREATE OR REPLACE FUNCTION bench_noop_send(bigint, bigint, uuid, text, jsonb, jsonb)
RETURNS TABLE (outcome text, seq bigint, sender_id bigint, body text, created_at timestamptz)
LANGUAGE plpgsql AS $$ BEGIN RETURN QUERY SELECT 'stored', 1::bigint, $2, $4, now(); END $$
"""
STATEMENTS = {
    "noop": "SELECT * FROM bench_noop_send($1, $2, $3, $4, $5, $6)",
    "noop + 1 ms sleep": "SELECT * FROM bench_noop_send($1, $2, $3, $4, $5, $6), pg_sleep(0.001)",
    "chat_send": "SELECT * FROM chat_send($1, $2, $3, $4, $5, $6)",
}


def _switches() -> int:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


async def _measure(database: db.Database, conversation_id: int, statement: str) -> dict[str, float]:
    async def calls(n: int) -> None:
        for _ in range(n):
            async with database.connection() as conn:
                await conn.fetchrow(statement, conversation_id, 1, uuid.uuid4(), "hello", EVENT, EVENT)

    await calls(200)  # warm: statement cache, codecs
    before, switches, wall = resource.getrusage(resource.RUSAGE_SELF), _switches(), time.perf_counter()
    await calls(CALLS)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "user_us": (after.ru_utime - before.ru_utime) / CALLS * 1e6,
        "sys_us": (after.ru_stime - before.ru_stime) / CALLS * 1e6,
        "switches": (_switches() - switches) / CALLS,
        "wall_us": (time.perf_counter() - wall) / CALLS * 1e6,
    }


async def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-resume-"))
    server, url = db.start_embedded_postgres(scratch)
    try:
        await db.upgrade(url)
        database = await db.Database(url, max_size=2).open()
        try:
            async with database.transaction() as conn:
                await conn.execute(NOOP)
                conversation_id = (await conversations.insert_conversation(conn, "GROUP", "bench")).id
                await conversations.insert_members(conn, conversation_id, [(1, "OWNER")])
            print(f"{'statement':<20} {'client user us':>14} {'sys us':>7} {'switches':>9} {'wall us':>8}")
            for name, statement in STATEMENTS.items():
                r = await _measure(database, conversation_id, statement)
                print(
                    f"{name:<20} {r['user_us']:>14.0f} {r['sys_us']:>7.0f} {r['switches']:>9.2f} {r['wall_us']:>8.0f}"
                )
        finally:
            await database.close()
    finally:
        server.cleanup()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
