"""A/B of migration 0014_text_user_ids: the product's send, markRead and inbox statements under pgbench,
on a database at 0013_event_keys (bigint user ids) and one at 0014 (text COLLATE "C"), same seed, same
PostgreSQL, the same minutes, alternating A B B A.

Both databases are seeded at 0013 with bench/layout.py's data; B is then upgraded by the migration
itself (so it also measures what the migration leaves: rewritten tables, rebuilt indexes, fresh
statistics). The statements are the product's (bench/product_sql.py); markRead's on A is the one of
before this migration (its user id cast to bigint, not text). Every statement is prepared (-M
prepared), as asyncpg runs them.

    python -m bench.userids [--seconds 10] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url

from chatgql import db

from . import layout, pgbench
from .infra import Postgres
from .run import _inbox_keys

SIDES = {"A (0013, bigint)": "ids_bigint", "B (0014, text C)": "ids_text"}


def _alembic(url: str, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(db.ALEMBIC_DIR))
    cfg.attributes["database_url"] = db.asyncpg_url(url)
    command.upgrade(cfg, revision)


def _url(base: str, name: str) -> str:
    return make_url(db.asyncpg_url(base)).set(database=name).render_as_string(hide_password=False)


async def _prepare(pg: Postgres, sizes: layout.Sizes) -> list:
    admin = await asyncpg.connect(db.dsn(pg.url))
    try:
        for name in SIDES.values():
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
            await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    keys = []
    for side, name in SIDES.items():
        url = _url(pg.url, name)
        await asyncio.to_thread(_alembic, url, "0013_event_keys")
        conn = await asyncpg.connect(db.dsn(url))
        try:
            await layout.seed(conn, sizes)
            keys = await _inbox_keys(conn, sizes)
        finally:
            await conn.close()
        if side.startswith("B"):
            await asyncio.to_thread(_alembic, url, "0014_text_user_ids")
        conn = await asyncpg.connect(db.dsn(url))
        try:
            await conn.execute("VACUUM ANALYZE")
        finally:
            await conn.close()
    return keys


def _scripts(sizes: layout.Sizes, keys: list) -> dict[str, dict[str, pgbench.Script]]:
    send = pgbench.send_script(sizes, hot=False)
    read = pgbench.read_script(sizes)
    inbox = pgbench.inbox_script(sizes, keys)
    old_read = replace(
        read, name="read_bigint", text=read.text.replace("m.user_id = :uid::text", "m.user_id = :uid::bigint")
    )
    assert old_read.text != read.text
    return {
        "send": {"A": send, "B": send},
        "markRead": {"A": old_read, "B": read},
        "inbox": {"A": inbox, "B": inbox},
    }


async def _truncate_outbox(pg: Postgres) -> None:
    for name in SIDES.values():
        conn = await asyncpg.connect(db.dsn(_url(pg.url, name)))
        try:
            await conn.execute("TRUNCATE outbox")
        finally:
            await conn.close()


async def _sizes(pg: Postgres, name: str) -> str:
    """Heap and index size of the tables that hold user ids, in MB."""
    conn = await asyncpg.connect(db.dsn(_url(pg.url, name)))
    try:
        row = await conn.fetchrow(
            """
            SELECT sum(pg_table_size(c.oid)) AS heap, sum(pg_indexes_size(c.oid)) AS indexes
              FROM pg_class c
             WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace
               AND (c.relname IN ('conversation_member', 'direct_pair', 'conversation') OR c.relname ~ '^message_p[0-9]+$')
            """
        )
        return f"member, pair, conversation and message tables {row['heap'] / 2**20:.1f} MB, indexes {row['indexes'] / 2**20:.1f} MB"
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0, help="per run; each side runs twice per figure")
    parser.add_argument("--rounds", type=int, default=1, help="A B B A this many times per figure")
    parser.add_argument("--smoke", action="store_true", help="small sizes (a quick check that it runs)")
    args = parser.parse_args()
    sizes = layout.SMOKE if args.smoke else layout.FULL
    with tempfile.TemporaryDirectory(prefix="chatgql-userids-") as scratch:
        work = Path(scratch)
        pg = await asyncio.to_thread(Postgres.start, work / "pg")
        try:
            keys = await _prepare(pg, sizes)
            scripts = _scripts(sizes, keys)
            rows = []
            read_base = 0
            for figure, by_side in scripts.items():
                tps: dict[str, list[float]] = {"A": [], "B": []}
                for side in ("A", "B", "B", "A") * args.rounds:
                    name = SIDES["A (0013, bigint)"] if side == "A" else SIDES["B (0014, text C)"]
                    defines = None
                    if figure == "markRead":
                        read_base += 10**9  # every call advances: a seq above all of before
                        defines = {"n": str(read_base)}
                    await _truncate_outbox(pg)
                    result = await asyncio.to_thread(
                        pgbench.run, pg, by_side[side], sizes, work, args.seconds, defines, name
                    )
                    tps[side].append(result["tps"])
                a, b = statistics.mean(tps["A"]), statistics.mean(tps["B"])
                rows.append((figure, a, b, tps))
            print(f"pgbench -M prepared, {sizes.clients} clients, {args.seconds:g} s per run, A B B A x {args.rounds}")
            for side, name in SIDES.items():
                print(f"{side}: {await _sizes(pg, name)}")
            print('| statement | A: 0013 bigint (tps) | B: 0014 text COLLATE "C" (tps) | B / A | runs A | runs B |')
            print("|---|---|---|---|---|---|")
            for figure, a, b, tps in rows:
                runs_a = ", ".join(f"{t:.0f}" for t in tps["A"])
                runs_b = ", ".join(f"{t:.0f}" for t in tps["B"])
                print(f"| {figure} | {a:.0f} | {b:.0f} | {b / a:.3f} | {runs_a} | {runs_b} |")
        finally:
            pg.stop()


if __name__ == "__main__":
    asyncio.run(main())
