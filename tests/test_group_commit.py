"""Group commit of hot conversations (services/groupcommit.py, chat_send_batch in migration 0006).

- chat_send_batch gives, item for item, what chat_send gives when the same
  sends run one after the other: outcomes, seqs, watermarks, outbox events;
- 300 sends to one conversation, racing from three `chatgql serve` processes
  (with retries of the same clientMsgId and conflicting reuse of it), store
  seqs 1..300 once each, as acknowledged, with the outbox in seq order, and
  they went in batches;
- a batch whose database backend is killed while its transaction is open
  stores nothing, fails every caller in it, and their retries store once.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from itertools import pairwise
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from chatgql.auth import issue_token
from chatgql.db import Database
from chatgql.events import types as events
from chatgql.services.groupcommit import SendItem
from chatgql.settings import load_settings
from chatgql.store import messages

from .conftest import REPO, RunningServer, drop_database, free_port, scratch_database

SEND = (
    "mutation($c: ID!, $m: UUID!, $b: String!) "
    "{ sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { duplicate message { seq senderId body } } }"
)
CREATE_GROUP = "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }"
TOKENS = load_settings()


def authorization(user: int) -> dict[str, str]:
    return {"authorization": f"Bearer {issue_token(TOKENS, user)}"}


async def post(http: httpx.AsyncClient, url: str, user: int, query: str, variables: dict) -> dict:
    response = await http.post(url, json={"query": query, "variables": variables}, headers=authorization(user))
    assert response.status_code == 200, response.text
    return response.json()


def code(body: dict) -> str | None:
    errors = body.get("errors")
    return (errors[0].get("extensions") or {}).get("code") if errors else None


async def fetch(engine, sql: str, **params) -> list:
    async with engine.connect() as conn:
        return list(await conn.execute(text(sql), params))


def item(conversation_id: int, sender: int, cmid: uuid.UUID, body: str) -> SendItem:
    _, new = events.message_new(conversation_id=conversation_id, sender_id=sender, client_msg_id=cmid, body=body)
    _, read = events.read_updated(conversation_id=conversation_id, user_id=sender)
    return SendItem(sender, cmid, body, new, read)


# ---------------------------------------------------------------- the batch function


async def test_a_batch_answers_and_writes_what_the_same_sends_one_by_one_would(migrated_url, engine):
    """Every rule of chat_send, item by item: a clientMsgId stored before or taken by an
    earlier item of the batch is a duplicate (same sender and body) or a conflict
    (nothing written); a non-member is not_found and claims nothing; seqs are
    contiguous in item order; watermarks and read.updated events as chat_send's."""
    async with engine.begin() as conn:
        one, batched = (
            await conn.execute(
                text("INSERT INTO conversation (type) VALUES ('GROUP'), ('GROUP') RETURNING id")
            )
        ).scalars()
        await conn.execute(
            text(
                "INSERT INTO conversation_member (conversation_id, user_id) "
                "SELECT c, u FROM unnest(CAST(:c AS bigint[])) c, generate_series(1, 3) u"
            ),
            {"c": [one, batched]},
        )
    a, b, c, d = (uuid.uuid4() for _ in range(4))
    before = [(1, a, "first"), (2, b, "second")]  # stored before the batch
    batch = [
        (3, c, "third"),
        (1, a, "first"),  # duplicate of a stored message
        (2, a, "not first"),  # conflict with a stored message
        (3, c, "third"),  # duplicate of an earlier item
        (1, c, "third"),  # conflict with an earlier item (other sender)
        (3, c, "3rd"),  # conflict with an earlier item (other body)
        (9, d, "stranger"),  # not a member: claims nothing...
        (2, d, "fourth"),  # ...so this one stores d
        (2, uuid.uuid4(), "fifth"),
        (1, uuid.uuid4(), "sixth"),
        (3, uuid.uuid4(), "seventh"),
        (3, uuid.uuid4(), "eighth"),
    ]
    # One transaction, read before it ends: the session server's relay drains committed outbox rows.
    database = await Database(migrated_url, max_size=1).open()
    try:
        async with database.transaction() as conn:
            for cid in (one, batched):
                for sender, cmid, body in before:
                    await messages.send(conn, conversation_id=cid, **item(cid, sender, cmid, body)._asdict())
            alone = [await messages.send(conn, conversation_id=one, **item(one, *send)._asdict()) for send in batch]
            together = await messages.send_batch(conn, batched, [item(batched, *send) for send in batch])
            state = {
                cid: (
                    await conn.fetch(
                        "SELECT seq, sender_id, client_msg_id, body FROM message WHERE conversation_id = $1 "
                        "ORDER BY seq",
                        cid,
                    ),
                    await conn.fetch(
                        "SELECT user_id, last_read_seq FROM conversation_member WHERE conversation_id = $1 "
                        "ORDER BY user_id",
                        cid,
                    ),
                    await conn.fetchval("SELECT last_seq FROM conversation WHERE id = $1", cid),
                    [
                        {k: v for k, v in r.payload.items() if k not in ("conversationId", "createdAt")}
                        for r in await conn.fetch("SELECT payload FROM outbox WHERE msg_key = $1 ORDER BY id", str(cid))
                    ],
                )
                for cid in (one, batched)
            }
            created = await conn.fetch(
                "SELECT seq, created_at FROM message WHERE conversation_id = $1 ORDER BY seq", batched
            )
    finally:
        await database.close()

    assert [r.i for r in together] == list(range(1, len(batch) + 1))
    fields = ("outcome", "seq", "sender_id", "body")
    assert [tuple(r[f] for f in fields) for r in together] == [tuple(r[f] for f in fields) for r in alone]
    assert [r.outcome for r in together] == [
        *("stored", "duplicate", "conflict", "duplicate", "conflict", "conflict", "not_found"),
        *("stored",) * 5,
    ]
    assert [r.seq for r in together if r.outcome == "stored"] == [3, 4, 5, 6, 7, 8]
    assert [r.created_at for r in together if r.outcome == "stored"] == [created[-1].created_at] * 6
    assert state[one] == state[batched]
    messages_, watermarks, last_seq, outbox = state[batched]
    assert last_seq == 8 and [m.seq for m in messages_] == list(range(1, 9))
    assert [tuple(w) for w in watermarks] == [(1, 6), (2, 5), (3, 8)]
    kinds = [(e["type"], e.get("seq", e.get("lastReadSeq"))) for e in outbox]
    assert [s for t, s in kinds if t == events.MESSAGE_NEW] == list(range(1, 9))
    # read.updated right after a send that also read others' messages (chat_send's rule)
    assert ("read.updated", 3) in kinds and kinds.index(("read.updated", 3)) == kinds.index(("message.new", 3)) + 1
    assert all(x.created_at <= y.created_at for x, y in pairwise(created))
