"""A long history, fast: messages stored by chat_send_batch (store.messages.send_batch, the
transaction a group-committed send runs), a thousand per transaction instead of one request each."""

from __future__ import annotations

import uuid

from chatgql.db import Database
from chatgql.events import types as events
from chatgql.store import messages

PER_TRANSACTION = 1000


async def seed_history(database_url: str, conversation_id: int, sender_id: str, count: int, prefix: str = "m") -> None:
    """`count` messages from sender_id (a member) into an empty conversation, bodies f"{prefix}{seq}";
    seqs, lastSeq, the sender's watermark and the outbox as the API would leave them."""
    database = await Database(database_url, max_size=1).open()
    try:
        for start in range(1, count + 1, PER_TRANSACTION):
            items = []
            for seq in range(start, min(count, start + PER_TRANSACTION - 1) + 1):
                cmid, body = uuid.uuid4(), f"{prefix}{seq}"
                new = events.MessageNew(
                    conversation_id=conversation_id, sender_id=sender_id, client_msg_id=cmid, body=body
                ).payload()
                read = events.ReadUpdated(conversation_id=conversation_id, user_id=sender_id).payload()
                items.append((sender_id, cmid, body, new, read))
            async with database.transaction() as conn:
                rows = await messages.send_batch(
                    conn, conversation_id, items, events.MessageNew.store_keys(), events.ReadUpdated.store_keys()
                )
            assert [(row["outcome"], row["seq"]) for row in rows] == [
                ("stored", start + i) for i in range(len(items))
            ], rows[:3]
    finally:
        await database.close()
