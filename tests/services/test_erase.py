"""The operator's erases (services/erase.py): one user's messages (GDPR) and the retention policy make
tombstones as deleteMessage does, in bounded batches, idempotent and resumable. Real PostgreSQL: set up
through the session's chatgql, erased through the services (as the CLI does), read back over GraphQL and SQL."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from chatgql import db
from chatgql.graphql.ids import message_id
from chatgql.server import cli
from chatgql.services.erase import Batch, erase_user, retention_loop, run_retention
from tests.support.live import ChatApi, wait_active_subscriptions, wait_until, ws_connect

SEND = """
mutation($c: ID!, $m: UUID!, $b: String!, $mentions: [ID!], $files: [AttachmentInput!], $r: ID) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: $b, mentions: $mentions, attachments: $files, replyTo: $r) {
    message { seq } } }
"""
STATE = "query($c: ID!) { conversation(id: $c) { lastSeq lastChangeSeq unreadCount unreadMentions } }"
TOTALS = "{ viewer { totalUnread totalUnreadMentions } }"
SYNC = """
query($c: ID!, $after: Long!) {
  sync(cursors: [{conversationId: $c, afterSeq: 0, afterChangeSeq: $after}]) {
    lastChangeSeq changes { changeSeq kind seq changedBy reason message { body deletedAt deletedBy replyCount } } } }
"""
CHANGED = (
    "subscription($c: ID) { messageChanged(conversationId: $c) { seq kind changedBy reason message { replyCount } } }"
)
FILE = {"url": "https://files.example/a.png", "mimeType": "image/png", "name": "a.png", "sizeBytes": 10}


@pytest.fixture
async def database(migrated_url: str) -> AsyncIterator[db.Database]:
    database = await db.Database(migrated_url, max_size=2).open()
    yield database
    await database.close()


async def scalar(engine, sql: str, **params) -> object:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar_one()


async def test_an_erase_of_a_users_messages_makes_tombstones_everywhere_fixes_the_counts_and_resumes(
    server, http, engine, database, monkeypatch, capsys
):
    """Killed after its first batch, the erase run again finishes: each message tombstoned once."""
    api = ChatApi.of(server, http)
    group = await api.create_group(1, [2, 3])
    other = await api.create_group(2, [1])
    for i in range(5):
        await api.send(1, group, f"g{i}")  # seqs 1..5
    await api.send(3, group, "three's")  # 6: stays
    sent = {
        "c": group,
        "m": str(uuid.uuid4()),
        "b": "@2",
        "mentions": ["2"],
        "files": [FILE],
        "r": message_id(group, 5),
    }
    await api.data(SEND, sent, user=1)  # 7: a mention of 2, an attachment, a reply to 5
    await api.data(
        'mutation($c: ID!) { editMessage(conversationId: $c, seq: 1, body: "g0\'") { changeSeq } }',
        {"c": group},
        user=1,
    )
    await api.data(
        'mutation($c: ID!) { addReaction(conversationId: $c, seq: 2, emoji: "👍") { changeSeq } }', {"c": group}, user=3
    )
    await api.data(
        "mutation($c: ID!) { deleteMessage(conversationId: $c, seq: 3) { changeSeq } }", {"c": group}, user=1
    )  # a tombstone already: left alone
    await api.send(1, other, "in the other one")
    await api.mark_read(3, group, 6)  # 3 has read 1..6: only 7 was unread for them
    before = (await api.data(STATE, {"c": group}, user=2))["conversation"]
    assert (before["unreadCount"], before["unreadMentions"], before["lastChangeSeq"]) == (6, 1, 3)

    def killed(batch: Batch) -> None:  # the first batch committed, then the process died
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await erase_user(database, "1", batch_size=2, on_batch=killed)
    assert (await api.data(STATE, {"c": group}, user=2))["conversation"]["unreadCount"] == 4  # 1 and 2 erased
    # run again with the CLI, as an operator would: it finishes, batch by batch
    monkeypatch.setenv("CHATGQL_DATABASE_URL", server.settings.database_url.get_secret_value())
    monkeypatch.setenv("CHATGQL_MIGRATE_ON_START", "false")
    await asyncio.to_thread(cli.main, ["erase-user", "1", "--batch", "2"])
    assert capsys.readouterr().out.splitlines() == [
        f"conversation {group}: 2 erased (2 in all)",  # 4 and 5 (3 is a tombstone already)
        f"conversation {group}: 1 erased (3 in all)",
        f"conversation {other}: 1 erased (4 in all)",
        "erased 4 messages of user 1",
    ]
    # the viewer who had read none of them: only three's message is unread now; the mention is gone
    after = (await api.data(STATE, {"c": group}, user=2))["conversation"]
    assert (after["lastSeq"], after["unreadCount"], after["unreadMentions"], after["lastChangeSeq"]) == (7, 1, 0, 8)
    assert (await api.data(STATE, {"c": group}, user=3))["conversation"]["unreadCount"] == 0
    assert (await api.data(TOTALS, user=2))["viewer"] == {"totalUnread": 1, "totalUnreadMentions": 0}
    # each tombstone took a change seq: sync after the cursor the client held sees them, by the operator
    changes = (await api.data(SYNC, {"c": group, "after": 3}, user=2))["sync"][0]["changes"]
    assert {c["reason"] for c in changes} == {"ERASE"}
    assert [(c["changeSeq"], c["kind"], c["seq"], c["changedBy"]) for c in changes] == [
        (4, "DELETED", 1, None),
        (5, "DELETED", 2, None),
        (6, "DELETED", 4, None),
        (7, "DELETED", 5, None),
        (8, "DELETED", 7, None),
    ]
    assert all(
        c["message"]["body"] == "" and c["message"]["deletedAt"] and c["message"]["deletedBy"] is None for c in changes
    )
    # erased, not hidden: body, edit history, reactions, attachments, mentions
    cid = int(group)
    assert await scalar(engine, "SELECT count(*) FROM message WHERE sender_id = '1' AND body <> ''") == 0
    assert await scalar(engine, "SELECT body FROM message WHERE conversation_id = :c AND seq = 6", c=cid) == "three's"
    assert await scalar(engine, "SELECT deleted_by FROM message WHERE conversation_id = :c AND seq = 3", c=cid) == "1"
    replies = "SELECT (reply_count, last_reply_at) FROM message WHERE conversation_id = :c AND seq = 5"
    assert await scalar(engine, replies, c=cid) == (0, None)  # its reply is erased too
    for table in (
        "message_edit",
        "message_reaction",
        "message_reaction_count",
        "message_attachment",
        "message_mention",
    ):
        assert await scalar(engine, f"SELECT count(*) FROM {table}") == 0, table
    # again: nothing more to do, no change seq taken; a bad user id is refused
    assert await erase_user(database, "1") == 0
    assert await scalar(engine, "SELECT last_change_seq FROM conversation WHERE id = :c", c=cid) == 8
    with pytest.raises(SystemExit) as refused:
        cli.main(["erase-user", "x" * 256])  # not a user id: 256 characters
    assert refused.value.code == 2 and "USER_ID" in capsys.readouterr().err


async def test_retention_erases_only_what_is_older_than_the_bound_in_batches_and_resumes_after_it(
    server, http, engine, database
):
    api = ChatApi.of(server, http)
    old, new = await api.create_group(1, [2, 3]), await api.create_group(1, [2])
    await api.send(1, old, "o0")
    await api.data(SEND, {"c": old, "m": str(uuid.uuid4()), "b": "o1", "r": message_id(old, 1)}, user=1)
    for i in range(2, 5):
        await api.send(1, old, f"o{i}")
    await api.send(1, new, "n")  # after the bound: kept
    bound = await scalar(engine, "SELECT created_at FROM message WHERE conversation_id = :c AND seq = 5", c=int(old))
    await api.send(2, old, "later")  # seq 6, after the bound
    batches: list[Batch] = []
    async with await ws_connect(server, 2) as ws:
        live = await ws.subscribe(CHANGED, {"c": old})
        await wait_active_subscriptions(server, 1)
        assert await run_retention(database, bound, batch_size=2, on_batch=batches.append) == 4
        events = [e["messageChanged"] for e in await live.collect(4, timeout=20)]
    assert [b.erased for b in batches] == [2, 2]
    assert [(e["seq"], e["kind"], e["changedBy"], e["reason"]) for e in events] == [
        (s, "DELETED", None, "RETENTION") for s in (1, 2, 3, 4)
    ]
    assert events[0]["message"]["replyCount"] == 0  # erased with its reply in one batch: the event says so
    cid = int(old)
    bodies = (
        await api.data(
            "query($c: ID!) { messages(conversationId: $c, first: 10) { nodes { body deletedBy } } }",
            {"c": old},
            user=2,
        )
    )["messages"]["nodes"]
    assert [n["body"] for n in bodies] == ["", "", "", "", "o4", "later"]  # tombstones keep their seq
    assert await scalar(engine, "SELECT retained_seq FROM conversation WHERE id = :c", c=cid) == 4
    assert (await api.data(STATE, {"c": old}, user=3))["conversation"]["unreadCount"] == 2  # o4 and "later"
    # the next pass starts at retained_seq; a later bound takes the rest
    assert await run_retention(database, bound, batch_size=2) == 0
    assert await scalar(engine, "SELECT count(*) FROM message_change") == 4
    later = await scalar(engine, "SELECT clock_timestamp()")
    assert await run_retention(database, later, batch_size=2) == 3  # o4, later, and new's n
    assert await scalar(engine, "SELECT retained_seq FROM conversation WHERE id = :c", c=cid) == 6
    # the loop in the background (app.py runs it beside the relay), with a bound of a millisecond
    await api.send(2, new, "soon past it")
    loop = asyncio.create_task(retention_loop(database, 1e-3 / 86400, interval_seconds=0.05, batch_size=2))
    try:

        async def all_erased() -> bool:
            return await scalar(engine, "SELECT count(*) FROM message WHERE deleted_at IS NULL") == 0

        await wait_until(all_erased, 20, "the retention loop's tombstones")
    finally:
        loop.cancel()
    assert await scalar(engine, "SELECT retained_seq FROM conversation WHERE id = :c", c=int(new)) == 2
