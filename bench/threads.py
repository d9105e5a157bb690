"""Threads at size: a thread of 100,000 replies and a member following 10,000 threads answer their pages in
bounded time; and what the plain send, a reply and markRead run, statement by statement.

`python -m bench.threads [--runs N] [--count-only] [--report PATH]`

One embedded PostgreSQL, migrated to head, loaded with SQL (INSERT ... SELECT generate_series):
- the big thread: one group of two members, a root and REPLIES replies to it (every DELETED_EVERY-th one
  deleted), its thread rows as the reply path writes them; member "a" has read half of it.
- the follower: user "f" follows FOLLOWED threads, CONVERSATIONS groups of FOLLOWED / CONVERSATIONS roots,
  each with one reply at its own time; "f" has read half of them.
Then each of the product's own statements (chatgql.store.threads) runs RUNS times on one connection: the big
thread as its reader sees it (threads_of), its first and a deep page of replies (reply_page), the
follower's first and a deep page of myThreads (followed_page, then threads_of for the page), and their
totals (followed_totals). Median and worst, in milliseconds.

The statement count (also alone, with --count-only, which needs no thread table: run it with main's
src first to compare) sends through the service on a pool of one connection with asyncpg's query
logger: a plain send, a send with a reply, markRead. Writes bench/results/threads.md (or --report).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg

from chatgql import db
from chatgql.db import Database

from .infra import REPO, Postgres, log

REPLIES = 100_000
DELETED_EVERY = 100
FOLLOWED = 10_000
CONVERSATIONS = 100
PAGE = 50
BIG = 1_000_001  # the big thread's conversation; the follower's are the next CONVERSATIONS ids
RESULTS = REPO / "bench" / "results" / "threads.md"


async def _load(conn: asyncpg.Connection) -> None:
    """The big thread (conversation BIG) and the follower's threads (the next CONVERSATIONS conversations)."""
    per = FOLLOWED // CONVERSATIONS
    await conn.execute(
        f"""
        INSERT INTO conversation (id, type, title, last_seq, created_by)
        SELECT {BIG}, 'GROUP', 'big thread', {REPLIES + 1}, 'a'
        UNION ALL
        SELECT c, 'GROUP', 'followed', {2 * per}, 'g' FROM generate_series({BIG + 1}, {BIG + CONVERSATIONS}) c;
        INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
        VALUES ({BIG}, 'a', 'OWNER', 0), ({BIG}, 'b', 'MEMBER', {REPLIES + 1});
        INSERT INTO conversation_member (conversation_id, user_id, role, last_read_seq)
        SELECT c, u, CASE WHEN u = 'g' THEN 'OWNER' ELSE 'MEMBER' END, 0
          FROM generate_series({BIG + 1}, {BIG + CONVERSATIONS}) c, (VALUES ('f'), ('g')) v(u);
        INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body, created_at, deleted_at, reply_to_seq)
        SELECT {BIG}, s, CASE WHEN s = 1 THEN 'a' ELSE 'b' END, gen_random_uuid(),
               CASE WHEN s > 1 AND (s - 1) % {DELETED_EVERY} = 0 THEN '' ELSE 'reply ' || s END,
               now() - make_interval(secs => {REPLIES + 1} - s),
               CASE WHEN s > 1 AND (s - 1) % {DELETED_EVERY} = 0 THEN now() END,
               CASE WHEN s > 1 THEN 1 END
          FROM generate_series(1, {REPLIES + 1}) s;
        UPDATE message SET reply_count = {REPLIES - REPLIES // DELETED_EVERY} WHERE conversation_id = {BIG} AND seq = 1;
        INSERT INTO thread (conversation_id, root_seq, last_reply_seq, last_reply_at) VALUES ({BIG}, 1, {REPLIES}, now());
        INSERT INTO thread_reply (conversation_id, seq, root_seq, reply_seq, thread_only, deleted)
        SELECT {BIG}, s, 1, s - 1, false, (s - 1) % {DELETED_EVERY} = 0 FROM generate_series(2, {REPLIES + 1}) s;
        INSERT INTO thread_member (conversation_id, root_seq, user_id, last_read_reply_seq, following, first_reply_seq)
        VALUES ({BIG}, 1, 'a', {REPLIES // 2}, true, NULL), ({BIG}, 1, 'b', {REPLIES}, true, 1);
        INSERT INTO message (conversation_id, seq, sender_id, client_msg_id, body, created_at, reply_to_seq)
        SELECT c, s, CASE WHEN s % 2 = 1 THEN 'g' ELSE 'f' END, gen_random_uuid(), 'm ' || s,
               now() - make_interval(secs => (c * {2 * per} + s) % 100003),
               CASE WHEN s % 2 = 0 THEN s - 1 END
          FROM generate_series({BIG + 1}, {BIG + CONVERSATIONS}) c, generate_series(1, {2 * per}) s;
        INSERT INTO thread (conversation_id, root_seq, last_reply_seq, last_reply_at)
        SELECT m.conversation_id, m.reply_to_seq, 1, m.created_at FROM message m
         WHERE m.conversation_id > {BIG} AND m.reply_to_seq IS NOT NULL;
        INSERT INTO thread_reply (conversation_id, seq, root_seq, reply_seq, thread_only)
        SELECT m.conversation_id, m.seq, m.reply_to_seq, 1, false FROM message m
         WHERE m.conversation_id > {BIG} AND m.reply_to_seq IS NOT NULL;
        INSERT INTO thread_member
               (conversation_id, root_seq, user_id, last_read_reply_seq, following, first_reply_seq, version, last_change)
        SELECT t.conversation_id, t.root_seq, 'f', (t.root_seq / 2) % 2, true, NULL,
               row_number() OVER (PARTITION BY t.conversation_id ORDER BY t.root_seq), 'REPLY'
          FROM thread t
         WHERE t.conversation_id > {BIG};
        INSERT INTO thread_clock (conversation_id, user_id, version)
        SELECT conversation_id, 'f', max(version) FROM thread_member WHERE user_id = 'f' GROUP BY conversation_id;
        ANALYZE
        """
    )


async def _timed(runs: int, call) -> tuple[float, float]:
    """(median, worst) milliseconds of `runs` calls (one untimed first)."""
    await call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), max(times)


async def _page_times(url: str, runs: int) -> list[tuple[str, float, float, str]]:
    from chatgql.store import threads

    conn = await asyncpg.connect(db.dsn(url))
    try:
        await _load(conn)
        rows: list[tuple[str, float, float, str]] = []
        big = (await threads.threads_of(conn, [(BIG, 1)], "a"))[0]
        assert big["last_reply_seq"] == REPLIES, big
        rows.append(
            (
                "thread(rootId) of the 100k-reply thread, as a reader half-way (threads_of)",
                *await _timed(runs, lambda: threads.threads_of(conn, [(BIG, 1)], "a")),
                f"unreadCount {big['unread_count']}, replyCount {big['reply_count']}",
            )
        )
        first = await threads.reply_page(conn, BIG, 1, 0, PAGE)
        assert len(first) == PAGE
        rows.append(
            (
                f"Thread.replies: the first page of {PAGE} (reply_page)",
                *await _timed(runs, lambda: threads.reply_page(conn, BIG, 1, 0, PAGE)),
                "",
            )
        )
        rows.append(
            (
                f"Thread.replies: a page of {PAGE} after replySeq 90,000",
                *await _timed(runs, lambda: threads.reply_page(conn, BIG, 1, 90_000, PAGE)),
                "",
            )
        )

        async def my_threads(after):
            page = await threads.followed_page(conn, "f", after, PAGE + 1)
            return page, await threads.threads_of(conn, [(r["conversation_id"], r["root_seq"]) for r in page], "f")

        page, _ = await my_threads(None)
        assert len(page) == PAGE + 1
        rows.append(
            (
                f"myThreads: the first page of {PAGE} of {FOLLOWED:,} followed (followed_page + threads_of)",
                *await _timed(runs, lambda: my_threads(None)),
                "",
            )
        )
        deep = await threads.followed_page(conn, "f", None, FOLLOWED // 2)
        cursor = (deep[-1]["last_reply_at"], deep[-1]["conversation_id"], deep[-1]["root_seq"])
        rows.append(
            (
                f"myThreads: a page of {PAGE} after {FOLLOWED // 2:,} threads",
                *await _timed(runs, lambda: my_threads(cursor)),
                "",
            )
        )
        # catch-up (sync's threads): a conversation of the follower's, from a version PAGE below its newest, and
        # from 0 (all of its threads changed: a page of PAGE of them)
        per = FOLLOWED // CONVERSATIONS

        async def catch_up(after: int):
            changed = await threads.changed_since(conn, [(BIG + 1, after)], "f", PAGE + 1)
            keys = [(BIG + 1, r["root_seq"]) for r in changed if r["root_seq"] is not None]
            return changed, await threads.threads_of(conn, keys[:PAGE], "f")

        for after, label in ((per - 10, "10 threads changed"), (0, f"all {per} changed, a page of {PAGE}")):
            changed, _ = await catch_up(after)
            rows.append(
                (
                    f"sync(afterThreadVersion:) in one of the follower's conversations: {label}"
                    " (changed_since + threads_of)",
                    *await _timed(runs, lambda after=after: catch_up(after)),
                    f"{len(changed)} rows",
                )
            )
        totals = await threads.followed_totals(conn, "f")
        rows.append(
            (
                f"Viewer.threadUnread and unreadThreads over {FOLLOWED:,} followed (followed_totals)",
                *await _timed(runs, lambda: threads.followed_totals(conn, "f")),
                f"threadUnread {totals['thread_unread']}, unreadThreads {totals['unread_threads']}",
            )
        )
        return rows
    finally:
        await conn.close()


async def _statement_counts(url: str) -> list[tuple[str, int]]:
    """Statements the server receives for a plain send, a reply, and a markRead (a pool of one connection)."""
    from chatgql.services.conversations import do_create_group
    from chatgql.services.messages import do_send_message
    from chatgql.services.reads import do_mark_read

    database = await Database(url, max_size=1, min_size=1).open()
    seen: list[str] = []
    try:
        async with database.connection() as conn:
            conn.add_query_logger(lambda record: seen.append(record.query))
        cid = await do_create_group(database, "s1", "count", ["s2"], max_members=10)

        async def count(call) -> int:
            seen.clear()
            await call()
            return len(seen)

        first = await do_send_message(database, "s1", cid, uuid.uuid4(), "warm")  # the statements are prepared
        counts = [
            ("plain send", await count(lambda: do_send_message(database, "s1", cid, uuid.uuid4(), "plain"))),
            ("markRead", await count(lambda: do_mark_read(database, "s2", cid, 2))),
        ]
        root = first.message.seq
        await do_send_message(database, "s2", cid, uuid.uuid4(), "warm reply", reply_to=root)
        reply = await count(lambda: do_send_message(database, "s2", cid, uuid.uuid4(), "reply", reply_to=root))
        counts.append(("send with replyTo", reply))
        return counts
    finally:
        await database.close()


def _report(rows: list[tuple[str, float, float, str]], counts: list[tuple[str, int]], runs: int) -> str:
    lines = [
        "# Threads at size",
        "",
        "`python -m bench.threads` (bench/threads.py): one embedded PostgreSQL on this machine (2 cores, shared),",
        f"a thread of {REPLIES:,} replies (1 in {DELETED_EVERY} deleted) and a user following {FOLLOWED:,} threads",
        f"over {CONVERSATIONS} groups; each statement run {runs} times on one connection, after one untimed run.",
        "",
        "| what | median ms | worst ms | answer |",
        "|---|---:|---:|---|",
        *(f"| {what} | {median:.2f} | {worst:.2f} | {note} |" for what, median, worst, note in rows),
        "",
        "Statements the server receives per call (asyncpg's query logger on a pool of one connection):",
        "",
        "| call | statements |",
        "|---|---:|",
        *(f"| {what} | {n} |" for what, n in counts),
        "",
    ]
    return "\n".join(lines)


async def _main(args: argparse.Namespace) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="chatgql-bench-threads-"))
    pg = Postgres.start(scratch)
    try:
        await db.upgrade(pg.url)
        counts = await _statement_counts(pg.url)
        log("statements:", counts)
        if args.count_only:
            return
        rows = await _page_times(pg.url, args.runs)
        for row in rows:
            log(*row)
        report = _report(rows, counts, args.runs)
        Path(args.report).write_text(report)
        log("wrote", args.report)
    finally:
        pg.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--count-only", action="store_true")
    parser.add_argument("--report", default=str(RESULTS))
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
