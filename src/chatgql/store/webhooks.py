"""The webhook queue (events for the app's endpoint) and its dead letters (migration 0012_webhooks).

Rows arrive from the outbox: the statement that deletes relayed outbox rows copies those of the
webhook kinds here (`queue_from`, used by store/outbox.py). A conversation's rows are delivered
in (msg_key, id) order, one at a time: its head is the row with the lowest id.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..db import Connection, Row
from ..runtime.tracing import TRACE_KEY

_COLUMNS = "id, msg_key, webhook_id, payload, created_at, attempts, next_attempt_at, body, last_error"
_READ = (
    "q.id, q.msg_key, q.webhook_id, q.payload::text AS payload, extract(epoch FROM q.created_at)::float8 AS created,"
    " q.attempts, q.body"
)


# The key an outbox row's payload gets when its message was deleted before the row was relayed
# (store/outbox.py erase_txn): its body is erased, and it is never queued for the webhooks.
ERASED = "erased"


def queue_from(source: str, kinds_param: int) -> str:
    """INSERT of the rows of `source` (outbox rows) whose type is in parameter $kinds_param, but
    those erased by a delete; without the trace an event was written in (runtime/tracing.py)."""
    return (
        "INSERT INTO webhook_queue (id, msg_key, payload, created_at)"
        f" SELECT id, msg_key, payload - '{TRACE_KEY}', created_at FROM {source}"
        f" WHERE payload->>'type' = ANY(${kinds_param}::text[])"
        f" AND NOT payload ? '{ERASED}' ON CONFLICT (id) DO NOTHING"
    )


async def withdraw_txn(conn: Connection, msg_key: str, seqs: Sequence[int], kinds: Sequence[str]) -> int:
    """Delete the queued and dead-lettered events of these kinds about these seqs of the
    conversation msg_key (their payload and body hold what a delete erases): they are never
    posted. Returns how many. Run it after store/outbox.py erase_txn, as a statement of its own:
    a row the relay moved from the outbox into the queue meanwhile is committed by then, and seen."""
    return await conn.fetchval(
        """
        WITH queued AS (
                DELETE FROM webhook_queue
                 WHERE msg_key = $1 AND payload->>'type' = ANY($3::text[]) AND (payload->>'seq')::bigint = ANY($2::bigint[])
                RETURNING 1),
             dead AS (
                DELETE FROM webhook_dead
                 WHERE msg_key = $1 AND payload->>'type' = ANY($3::text[]) AND (payload->>'seq')::bigint = ANY($2::bigint[])
                RETURNING 1)
        SELECT (SELECT count(*) FROM queued) + (SELECT count(*) FROM dead)
        """,
        msg_key,
        list(seqs),
        list(kinds),
    )


async def heads(conn: Connection, busy: Sequence[str], limit: int) -> list[Row]:
    """The head row of every conversation with rows, but those in `busy`, earliest attempt first,
    at most `limit`; each with `wait`: seconds until it is due (0 or less: due now).

    One probe of the (msg_key, id) index per conversation with rows (a loose index scan), never a
    scan of the rows themselves: a long backlog behind a dead endpoint costs no more per poll."""
    return await conn.fetch(
        f"""
        WITH RECURSIVE head AS (
            (SELECT * FROM webhook_queue ORDER BY msg_key, id LIMIT 1)
            UNION ALL
            SELECT n.* FROM head h CROSS JOIN LATERAL (
                SELECT * FROM webhook_queue q WHERE q.msg_key > h.msg_key ORDER BY q.msg_key, q.id LIMIT 1
            ) AS n
        )
        SELECT {_READ}, extract(epoch FROM q.next_attempt_at - now())::float8 AS wait
          FROM head q
         WHERE q.msg_key <> ALL($1::text[])
         ORDER BY q.next_attempt_at, q.id
         LIMIT $2
        """,
        list(busy),
        limit,
    )


async def delivered_next(conn: Connection, row_id: int, msg_key: str) -> Row | None:
    """Delete the delivered row; the conversation's next row when it is due now (one statement)."""
    return await conn.fetchrow(
        f"""
        WITH gone AS (DELETE FROM webhook_queue WHERE id = $1)
        SELECT {_READ} FROM webhook_queue q
         WHERE q.msg_key = $2 AND q.id <> $1 AND q.next_attempt_at <= now()
         ORDER BY q.id LIMIT 1
        """,
        row_id,
        msg_key,
    )


async def set_body(conn: Connection, row_id: int, body: str) -> bool:
    """Fix the request body at the first attempt: retries send the same bytes. False: the row is
    gone (withdrawn by a delete since it was read)."""
    return await conn.fetchval("UPDATE webhook_queue SET body = $2 WHERE id = $1 RETURNING true", row_id, body) or False


async def retry_later(conn: Connection, row_id: int, delay_seconds: float, error: str) -> None:
    await conn.execute(
        """
        UPDATE webhook_queue
           SET attempts = attempts + 1, last_error = $3,
               next_attempt_at = now() + make_interval(secs => $2)
         WHERE id = $1
        """,
        row_id,
        delay_seconds,
        error,
    )


async def dead_letter_next(conn: Connection, row_id: int, msg_key: str, error: str) -> Row | None:
    """Move a row that ran out of attempts to webhook_dead; the conversation's next row, as
    `delivered_next` (the conversation goes on without it)."""
    return await conn.fetchrow(
        f"""
        WITH gone AS (DELETE FROM webhook_queue WHERE id = $1 RETURNING *),
             dead AS (INSERT INTO webhook_dead ({_COLUMNS})
                      SELECT id, msg_key, webhook_id, payload, created_at, attempts + 1, next_attempt_at, body, $3
                        FROM gone)
        SELECT {_READ} FROM webhook_queue q
         WHERE q.msg_key = $2 AND q.id <> $1 AND q.next_attempt_at <= now()
         ORDER BY q.id LIMIT 1
        """,
        row_id,
        msg_key,
        error,
    )


async def dead_letters(conn: Connection, limit: int) -> list[Row]:
    """The oldest dead letters (what `chatgql webhooks dead` lists)."""
    return await conn.fetch(
        """
        SELECT id, msg_key, webhook_id, payload->>'type' AS type, created_at, attempts, dead_at, last_error
          FROM webhook_dead ORDER BY id LIMIT $1
        """,
        limit,
    )


async def replay(conn: Connection, ids: Sequence[int] | None) -> int:
    """Queue dead letters again (all when ids is None), with their id, webhook id and body: the
    endpoint sees the same idempotency key. Returns how many."""
    where = "" if ids is None else "WHERE id = ANY($1::bigint[])"
    args = [] if ids is None else [list(ids)]
    status = await conn.execute(
        f"""
        WITH back AS (DELETE FROM webhook_dead {where} RETURNING *)
        INSERT INTO webhook_queue (id, msg_key, webhook_id, payload, created_at, body, last_error)
        SELECT id, msg_key, webhook_id, payload, created_at, body, last_error FROM back
        ON CONFLICT (id) DO NOTHING
        """,
        *args,
    )
    return int(status.rsplit(" ", 1)[1])


async def backlog(conn: Connection) -> Row:
    """(pending rows, age of the oldest in seconds, dead letters), for /metrics."""
    return await conn.fetchrow(
        """
        SELECT (SELECT count(*) FROM webhook_queue) AS pending,
               coalesce((SELECT extract(epoch FROM now() - min(created_at)) FROM webhook_queue), 0)::float8
                   AS oldest_age,
               (SELECT count(*) FROM webhook_dead) AS dead
        """
    )


WEBHOOK_LOCK = 7261303  # the advisory lock of the one deliverer that delivers (others stand by)
DELIVERER_APPLICATION = "chatgql-webhooks"


async def take_lead(conn: Connection) -> bool:
    """Take the deliverer's lock on this (dedicated) connection; False: another one holds it."""
    return bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)", WEBHOOK_LOCK))
