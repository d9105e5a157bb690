"""The transactional outbox: events written with the data they describe."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from ..db import Connection, Row
from ..runtime.tracing import TRACE_KEY
from . import webhooks


async def append(conn: Connection, events: Sequence[tuple[str, dict]]) -> None:
    """Queue (key, payload) events in the caller's transaction."""
    if not events:
        return
    await conn.execute(
        """
        INSERT INTO outbox (msg_key, payload)
        SELECT key, payload FROM unnest($1::text[], $2::jsonb[]) WITH ORDINALITY AS e(key, payload, n) ORDER BY n
        """,
        [key for key, _ in events],
        [payload for _, payload in events],
    )


async def erase_txn(conn: Connection, msg_key: str, seqs: Sequence[int], kinds: Sequence[str]) -> None:
    """Erase the body of the events of these kinds about these seqs of the conversation msg_key
    that are not relayed yet (a delete's transaction): they are relayed with an empty body and
    the key webhooks.ERASED, which keeps them out of the webhook queue."""
    await conn.execute(
        f"""
        UPDATE outbox SET payload = payload || jsonb_build_object('body', '', '{webhooks.ERASED}', true)
         WHERE slot = (hashtextextended($1::text, 0) & 63)::smallint AND msg_key = $1
           AND payload->>'type' = ANY($3::text[]) AND (payload->>'seq')::bigint = ANY($2::bigint[])
        """,
        msg_key,
        list(seqs),
        list(kinds),
    )


# Every outbox row has a slot, a fixed hash of its key (migration 0008): one conversation's
# events are always in one slot. Shard s of R relays the slots with slot % R == s.
SLOTS = 64


def shard_slots(shard: int, shards: int) -> list[int]:
    """The slots shard `shard` of `shards` relays."""
    return list(range(shard, SLOTS, shards))


async def oldest(
    conn: Connection,
    slots: Sequence[int],
    limit: int,
    *,
    text: bool = False,
    delete: Sequence[int] = (),
    queue_kinds: Sequence[str] = (),
    traced: bool = False,
) -> list[Row]:
    """The next events of these slots to relay, at most `limit`, in id order, each with
    `created`: its transaction's time (epoch seconds), the commit time the live path's
    delay bound counts from. text: `payload` as its JSON text (what Kafka and the bus
    carry: the relay then never decodes it), else decoded. delete: ids of rows already
    relayed, deleted by the same statement (one round trip per relay cycle, not two); those of
    the kinds in queue_kinds are copied into the webhook queue by it (see `delete`).

    Each slot's rows come from its own (slot, id) index range, so a shard reads only its
    own rows however long the others' backlog is. Whatever is returned is, for every
    slot, a prefix of that slot's rows in id order: nothing of a conversation is skipped.
    traced: each row also has `traceparent`, the trace its event was written in (tracing.TRACE_KEY
    of its payload, taken out of `payload`), or None.
    """
    # all of them (one relay leads every shard): the primary key's order
    shard = None if len(slots) == SLOTS else tuple(slots)
    args: list = [limit]
    if delete:
        args.append(list(delete))
        if queue_kinds:
            args.append(list(queue_kinds))
    return await conn.fetch(_oldest_sql(shard, text, bool(delete), bool(delete) and bool(queue_kinds), traced), *args)


@functools.lru_cache(maxsize=256)
def _oldest_sql(shard: tuple[int, ...] | None, text: bool, deleting: bool, queueing: bool, traced: bool = False) -> str:
    """oldest's statement for a shard's slots (None: every slot), made once, not on every relay
    cycle. The slots, the same on each of a shard's cycles, are in its text, not a parameter: a
    shard's 16 as a smallint[] parameter cost asyncpg CPU on every statement (its array encoder
    checks each element against collections.abc's ABCs: bench/results/micro.md). Parameters: the limit, then the
    ids to delete and the kinds to queue, when deleting and queueing."""

    def payload(row: str) -> str:
        value = f"({row}.payload - '{TRACE_KEY}')" if traced else f"{row}.payload"
        trace = f", {row}.payload->>'{TRACE_KEY}' AS traceparent" if traced else ""
        return (f"{value}::text AS payload" if text else f"{value} AS payload") + trace

    # A data-modifying WITH runs on the statement's snapshot: the SELECT still sees the rows it
    # deletes, so it leaves them out itself.
    deleting_ = _deleting_sql(2, 3 if queueing else None) if deleting else ""
    if shard is None:
        where = " WHERE o.id <> ALL($2::bigint[])" if deleting else ""
        return (
            deleting_
            + f"SELECT o.id, o.slot, o.msg_key, {payload('o')}, extract(epoch FROM o.created_at)::float8 AS created"
            + f" FROM outbox o{where} ORDER BY o.id LIMIT $1"
        )
    not_gone = "AND o.id <> ALL($2::bigint[])" if deleting else ""
    slots = ",".join(str(int(slot)) for slot in shard)
    return (
        deleting_
        + f"""
        SELECT e.id, e.slot, e.msg_key, {payload("e")}, extract(epoch FROM e.created_at)::float8 AS created
          FROM unnest('{{{slots}}}'::smallint[]) AS s(slot)
          CROSS JOIN LATERAL (
                SELECT o.id, o.slot, o.msg_key, o.payload, o.created_at FROM outbox o
                 WHERE o.slot = s.slot {not_gone} ORDER BY o.id LIMIT $1
          ) AS e
         ORDER BY e.id
         LIMIT $1
        """
    )


def _deleting(ids: Sequence[int], args: list, queue_kinds: Sequence[str]) -> str:
    """The WITH clause deleting `ids` (the last of `args`), copying the rows of `queue_kinds`
    into the webhook queue (appended to `args`)."""
    if not ids:
        return ""
    if not queue_kinds:
        return _deleting_sql(len(args), None)
    args.append(list(queue_kinds))
    return _deleting_sql(len(args) - 1, len(args))


def _deleting_sql(ids_param: int, kinds_param: int | None) -> str:
    """The WITH clause deleting the ids of parameter ids_param, copying the rows of the kinds of
    parameter kinds_param (if any) into the webhook queue."""
    if kinds_param is None:
        return f"WITH gone AS (DELETE FROM outbox WHERE id = ANY(${ids_param}::bigint[])) "
    return (
        f"WITH gone AS (DELETE FROM outbox WHERE id = ANY(${ids_param}::bigint[]) RETURNING *), "
        f"queued AS ({webhooks.queue_from('gone', kinds_param)}) "
    )


async def delete(conn: Connection, ids: Sequence[int], queue_kinds: Sequence[str] = ()) -> None:
    """Delete relayed rows; those of the kinds in queue_kinds are copied into the webhook queue
    by the same statement: an event is queued once, as it leaves the outbox (the relay deletes
    a row only after publishing it), whether it goes through Kafka or not."""
    args: list = [list(ids)]
    if queue_kinds:
        await conn.execute(_deleting(ids, args, queue_kinds) + "SELECT 1", *args)
        return
    await conn.execute("DELETE FROM outbox WHERE id = ANY($1::bigint[])", *args)


async def backlog(conn: Connection, shards: int) -> list[Row]:
    """(shard, rows, age of the oldest row in seconds) for every shard with rows, for /metrics."""
    return await conn.fetch(
        """
        SELECT slot % $1::int AS shard, count(*) AS rows,
               coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age
          FROM outbox
         GROUP BY 1
        """,
        shards,
    )


RELAY_LOCK = 7261302  # advisory locks (RELAY_LOCK, slot): the relay leading a slot holds its lock
NOTIFY_CHANNEL = "chatgql_outbox"
# The application_name of a relay process's control connection (it holds the slot locks and
# LISTENs): relays count each other by it to share the shards out.
RELAY_APPLICATION = "chatgql-relay"


async def take_slots(conn: Connection, slots: Sequence[int]) -> bool:
    """Take the advisory locks of all these slots on this (dedicated) connection, or none.

    Never ask for a slot this session holds already: session locks count up.
    """
    taken = await conn.fetchval(
        "SELECT coalesce(array_agg(s), '{}') FROM unnest($2::int[]) AS s WHERE pg_try_advisory_lock($1, s)",
        RELAY_LOCK,
        list(slots),
    )
    if len(taken) == len(slots):
        return True
    await release_slots(conn, taken)
    return False


async def release_slots(conn: Connection, slots: Sequence[int]) -> None:
    await conn.execute("SELECT pg_advisory_unlock($1, s) FROM unnest($2::int[]) AS s", RELAY_LOCK, list(slots))


async def relay_processes(conn: Connection) -> list[str]:
    """The application_name of every relay process connected to this database (their control
    connections), this one included."""
    return list(
        await conn.fetchval(
            """
            SELECT coalesce(array_agg(application_name ORDER BY application_name), '{}')
              FROM pg_stat_activity
             WHERE datname = current_database() AND application_name LIKE $1
            """,
            RELAY_APPLICATION + " %",
        )
    )


async def slot_leaders(conn: Connection) -> list[Row]:
    """(pid, application_name, slots) of every session holding relay slot locks in this database."""
    return await conn.fetch(
        """
        SELECT l.pid, a.application_name, array_agg(l.objid::int ORDER BY l.objid) AS slots
          FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = $1::int::oid
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
         GROUP BY 1, 2
        """,
        RELAY_LOCK,
    )


async def notify(conn: Connection) -> None:
    """Tell listening relays that events have committed (run it after the commit)."""
    await conn.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)


async def listen(conn: Connection, callback: Callable[[], None]) -> None:
    """Call callback() whenever events commit (LISTEN on this dedicated connection)."""
    await conn.add_listener(NOTIFY_CHANNEL, lambda *_: callback())
