"""The product's own SQL, taken from chatgql.store at run time.

Each store function is called with a recording connection, so the pgbench
baselines run exactly the statements the GraphQL requests run (if someone
changes the SQL in src/, the baseline follows). Bind parameters keep their
names: the product's `$n` placeholders become pgbench variables (`:name`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import orjson

from chatgql.events import types as events
from chatgql.store import conversations, messages, reads


class _RecordingConnection:
    """Stands in for the asyncpg connection store functions take; records what they run."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, tuple]] = []

    async def _record(self, sql: str, *args):
        self.statements.append((sql, args))

    async def fetch(self, sql: str, *args):
        await self._record(sql, *args)
        return []

    async def fetchrow(self, sql: str, *args):
        await self._record(sql, *args)

    async def fetchval(self, sql: str, *args):
        await self._record(sql, *args)

    async def execute(self, sql: str, *args):
        await self._record(sql, *args)
        return ""


@dataclass(frozen=True)
class Statement:
    sql: str  # with pgbench variables (:name) where the product binds $1, $2, ...
    params: dict  # an example of what the product binds, by those names (JSON as text)

    def for_pgbench(self, replace: dict[str, str] | None = None) -> str:
        """The statement as one pgbench command: binds are variables, ';' ends it."""
        sql = self.sql.strip()
        for name, expression in (replace or {}).items():
            sql = re.sub(rf":{name}\b", expression, sql)
        # pgbench reads a command until ';' (comments and newlines are fine)
        return "\n".join(line.rstrip() for line in sql.splitlines() if line.strip()) + ";"


def _is_keys(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


def _record(names: tuple[str, ...], coro_fn, *args, **kwargs) -> list[Statement]:
    """Run a store function against the recorder; name its $n parameters (names[n - 1])."""
    conn = _RecordingConnection()
    # The recording connection never suspends: drive the coroutine by hand
    # (this also works inside a running event loop).
    coro = coro_fn(conn, *args, **kwargs)
    try:
        coro.send(None)
    except StopIteration:
        pass
    else:
        coro.close()
        raise RuntimeError(f"{coro_fn.__name__} awaited something other than the connection")
    statements = []
    for sql, values in conn.statements:
        if len(values) != len(names):
            raise RuntimeError(f"{coro_fn.__name__} binds {len(values)} parameters; names for {len(names)} given")
        # (the event keys a statement fills in are in its text already: store.key_literal)
        named = re.sub(r"\$(\d+)", lambda m: ":" + names[int(m.group(1)) - 1], sql)
        params = {
            name: orjson.dumps(v).decode() if isinstance(v, dict) else v for name, v in zip(names, values, strict=True)
        }
        statements.append(Statement(named, params))
    return statements


def send_statement(conversation_id: int = 1, sender_id: str = "1") -> Statement:
    """sendMessage's one statement (chat_send), with the event payloads the product builds."""
    cmid = UUID("00000000-0000-4000-8000-000000000000")
    message_event = events.MessageNew(
        conversation_id=conversation_id, sender_id=sender_id, client_msg_id=cmid, body="hello"
    ).payload()
    read_event = events.ReadUpdated(conversation_id=conversation_id, user_id=sender_id).payload()
    (stmt,) = _record(
        ("cid", "uid", "cmid", "body", "message_event", "read_event"),
        messages.send,
        conversation_id=conversation_id,
        sender_id=sender_id,
        client_msg_id=cmid,
        body="hello",
        message_event=message_event,
        read_event=read_event,
        message_keys=events.MessageNew.store_keys(),
        read_keys=events.ReadUpdated.store_keys(),
    )
    return stmt


def mark_read_statement(conversation_id: int = 1, user_id: str = "1", seq: int = 1) -> Statement:
    """markRead's statement when the watermark advances (the update and its outbox row)."""
    event = events.ReadUpdated(conversation_id=conversation_id, user_id=user_id).payload()
    keys = events.ReadUpdated.store_keys()
    (stmt,) = _record(
        ("cid", "uid", "seq", "event"), reads.advance_watermark, conversation_id, user_id, seq, event, keys
    )
    return stmt


def inbox_statements(user_id: str, page: int) -> list[Statement]:
    """What the benchmark's inbox document (bench/queries.INBOX) runs: one statement, the page (page + 1
    rows, to learn hasNextPage) with each node's JSON built by PostgreSQL as the plan compiles it
    (engine/prebuilt.py: the bench's selection reads only the row's own values)."""
    from chatgql.graphql.prebuilt import reads_lifecycle, reads_settings

    prebuilt = inbox_prebuilt(page)
    # the default inbox binds a third: not archived (store.conversations.DEFAULT_INBOX)
    return _record(
        ("uid", "limit", "archived"),
        conversations.inbox_page_json,
        user_id,
        page + 1,
        None,
        conversations.DEFAULT_INBOX,
        prebuilt.objects,
        settings=reads_settings(prebuilt),
        lifecycle=reads_lifecycle(prebuilt),
    )


def inbox_prebuilt(page: int) -> Any:
    """The prebuilt nodes (engine/registry.PrebuiltNodes) of the plan of bench/queries.INBOX."""
    from graphql import parse
    from graphql.execution.values import get_variable_values

    from chatgql.compat import strawberry as strawberry_compat
    from chatgql.engine.plan.compile import compile_operation
    from chatgql.graphql.schema import schema

    from .queries import INBOX

    operation = parse(INBOX).definitions[0]
    variables = get_variable_values(strawberry_compat.core_schema(schema), operation.variable_definitions, {"n": page})
    (prebuilt,) = compile_operation(schema, operation, {}, {}, variables).prebuilt
    return prebuilt
