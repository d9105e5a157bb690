"""sendMessage: idempotent on (conversationId, clientMsgId), gap-free seq, outbox in the same transaction.

Outbox assertions run against `quiet`: a second chatgql with no relay, on a
database of its own. The session server's relay drains the main database's
outbox continuously (a relay leads per database), so a relay-less server on
the same database would not keep rows around to inspect.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.conftest import GraphQLClient, error_code
from tests.support.writepath import (  # noqa: F401  (fixtures)
    TIMEOUT,
    Quiet,
    burst_server,
    gated,
    open_quiet_server,
    quiet,
    server_settings,
    wave,
)

SEND = """
mutation Send($cid: ID!, $cmid: UUID!, $body: String!) {
  sendMessage(conversationId: $cid, clientMsgId: $cmid, body: $body) {
    duplicate
    message { conversationId seq senderId clientMsgId body createdAt }
  }
}
"""
CREATE_GROUP = """
mutation Group($title: String!, $ids: [ID!]!) { createGroup(title: $title, memberIds: $ids) { id } }
"""
CONVERSATION = """
query Conv($id: ID!) { conversation(id: $id) { id lastSeq lastReadSeq unreadCount } }
"""
MARK_READ = """
mutation Read($cid: ID!, $seq: Long!) { markRead(conversationId: $cid, seq: $seq) { lastReadSeq advanced } }
"""


async def make_group(client: GraphQLClient, owner: int, *others: int) -> str:
    data = await client.data(CREATE_GROUP, {"title": "room", "ids": [str(u) for u in others]}, user=owner)
    return data["createGroup"]["id"]


async def send(client: GraphQLClient, user: int, cid: str, body: str = "hi", cmid: str | None = None) -> dict:
    cmid = cmid or str(uuid.uuid4())
    data = await client.data(SEND, {"cid": cid, "cmid": cmid, "body": body}, user=user)
    return data["sendMessage"]


async def send_error(client: GraphQLClient, user: int | None, cid: Any, body: Any = "hi", cmid: Any = None) -> str:
    cmid = str(uuid.uuid4()) if cmid is None else cmid
    return error_code(await client.error(SEND, {"cid": cid, "cmid": cmid, "body": body}, user=user))


async def scalar(engine: AsyncEngine, sql: str, **params: Any) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar_one()


async def rows(engine: AsyncEngine, sql: str, **params: Any) -> list:
    async with engine.connect() as conn:
        return list(await conn.execute(text(sql), params))


async def message_seqs(engine: AsyncEngine, cid: str) -> list[int]:
    found = await rows(engine, "SELECT seq FROM message WHERE conversation_id = :cid ORDER BY seq", cid=int(cid))
    return [r.seq for r in found]


async def outbox(engine: AsyncEngine, event_type: str | None = None) -> list:
    """Outbox rows in id order, optionally only one event type."""
    found = await rows(engine, "SELECT id, msg_key, payload FROM outbox ORDER BY id")
    return [r for r in found if event_type is None or r.payload["type"] == event_type]


# --- servers for bursts and for outbox checks ------------------------------------------
#
# Bursts go to a server of their own on the test database: its request timeout is far above
# what a queue of hundreds of sends on one row can take on a loaded machine (the session
# server's default could cut a burst short), and it runs no relay (the session server's
# drains this database's outbox). Each wave of concurrent calls gets a new connection pool,
# so every call opens its own connection and none reuses a keep-alive connection that the
# server is closing just as the request goes out (uvicorn drops idle ones after 5 s).


@pytest.fixture(scope="module")
async def quiet_server(migrated_url: str) -> AsyncIterator[Quiet]:
    async with open_quiet_server(migrated_url, "messages") as running:
        yield running


# --- idempotency --------------------------------------------------------------------------


async def test_retry_with_same_client_msg_id_returns_original_seq_as_duplicate_without_new_row(client, engine):
    cid = await make_group(client, 1, 2)
    cmid = str(uuid.uuid4())
    first = await send(client, 1, cid, "hello", cmid)
    await send(client, 2, cid, "in between")
    retry = await send(client, 1, cid, "hello", cmid)

    assert first["duplicate"] is False
    assert first["message"]["seq"] == 1
    assert retry["duplicate"] is True
    assert retry["message"] == first["message"]  # same seq, body, sender, createdAt
    assert await message_seqs(engine, cid) == [1, 2]
    assert await scalar(engine, "SELECT last_seq FROM conversation WHERE id = :cid", cid=int(cid)) == 2
    assert await scalar(engine, "SELECT count(*) FROM message WHERE client_msg_id = :m", m=uuid.UUID(cmid)) == 1


async def test_fifty_concurrent_retries_of_one_client_msg_id_store_exactly_one_message(client, burst_server, engine):
    cid = await make_group(client, 1, 2)
    await send(client, 2, cid, "before")
    cmid = str(uuid.uuid4())

    async with wave(burst_server) as burst:
        answers = await gated(engine, "message", [send(burst, 1, cid, "same body", cmid) for _ in range(50)])

    assert {a["message"]["seq"] for a in answers} == {2}
    assert sum(not a["duplicate"] for a in answers) == 1
    assert len({a["message"]["createdAt"] for a in answers}) == 1
    stored = await rows(
        engine,
        "SELECT seq, sender_id, body FROM message WHERE conversation_id = :cid AND client_msg_id = :m",
        cid=int(cid),
        m=uuid.UUID(cmid),
    )
    assert [(r.seq, r.sender_id, r.body) for r in stored] == [(2, "1", "same body")]
    assert await message_seqs(engine, cid) == [1, 2]
    assert await scalar(engine, "SELECT last_seq FROM conversation WHERE id = :cid", cid=int(cid)) == 2


async def test_reused_client_msg_id_with_another_body_is_conflict_and_writes_nothing(quiet):
    cid = await make_group(quiet.client, 1, 2)
    cmid = str(uuid.uuid4())
    await send(quiet.client, 1, cid, "original", cmid)
    outbox_before = await outbox(quiet.engine)

    assert await send_error(quiet.client, 1, cid, "edited", cmid) == "CONFLICT"

    stored = await rows(quiet.engine, "SELECT seq, body FROM message WHERE conversation_id = :cid", cid=int(cid))
    assert [(r.seq, r.body) for r in stored] == [(1, "original")]
    assert await scalar(quiet.engine, "SELECT last_seq FROM conversation WHERE id = :cid", cid=int(cid)) == 1
    assert await outbox(quiet.engine) == outbox_before


async def test_reused_client_msg_id_by_another_sender_is_conflict_and_writes_nothing(quiet):
    cid = await make_group(quiet.client, 1, 2)
    cmid = str(uuid.uuid4())
    await send(quiet.client, 1, cid, "same text", cmid)
    outbox_before = await outbox(quiet.engine)

    assert await send_error(quiet.client, 2, cid, "same text", cmid) == "CONFLICT"

    stored = await rows(quiet.engine, "SELECT seq, sender_id FROM message WHERE conversation_id = :cid", cid=int(cid))
    assert [(r.seq, r.sender_id) for r in stored] == [(1, "1")]
    assert await outbox(quiet.engine) == outbox_before
    # The other sender's watermark did not move either.
    assert (
        await scalar(
            quiet.engine,
            "SELECT last_read_seq FROM conversation_member WHERE conversation_id = :cid AND user_id = '2'",
            cid=int(cid),
        )
        == 0
    )


async def test_same_client_msg_id_in_another_conversation_is_a_new_message(client, engine):
    first_cid = await make_group(client, 1, 2)
    second_cid = await make_group(client, 1, 2)
    cmid = str(uuid.uuid4())
    a = await send(client, 1, first_cid, "hello", cmid)
    b = await send(client, 1, second_cid, "hello", cmid)
    assert (a["duplicate"], b["duplicate"]) == (False, False)
    assert a["message"]["conversationId"] == first_cid and b["message"]["conversationId"] == second_cid
    assert await scalar(engine, "SELECT count(*) FROM message WHERE client_msg_id = :m", m=uuid.UUID(cmid)) == 2


# --- gap-free seq under concurrency ---------------------------------------------------


@pytest.mark.slow
async def test_two_hundred_concurrent_sends_get_seqs_exactly_1_to_200(client, burst_server, engine):
    senders = [1, 2, 3, 4]
    cid = await make_group(client, 1, 2, 3, 4)
    cmids = [str(uuid.uuid4()) for _ in range(200)]

    async with wave(burst_server) as burst:
        answers = await gated(
            engine, "message", [send(burst, senders[i % 4], cid, f"m{i}", cmids[i]) for i in range(200)]
        )

    assert sorted(a["message"]["seq"] for a in answers) == list(range(1, 201))
    assert not any(a["duplicate"] for a in answers)
    stored = await rows(
        engine,
        "SELECT seq, client_msg_id, sender_id, body FROM message WHERE conversation_id = :cid ORDER BY seq",
        cid=int(cid),
    )
    assert [r.seq for r in stored] == list(range(1, 201))
    # Each answer names the row that was stored for its clientMsgId.
    by_cmid = {str(r.client_msg_id): (r.seq, r.sender_id, r.body) for r in stored}
    for i, answer in enumerate(answers):
        assert by_cmid[cmids[i]] == (answer["message"]["seq"], str(senders[i % 4]), f"m{i}")
    async with wave(burst_server) as fresh:
        conv = (await fresh.data(CONVERSATION, {"id": cid}, user=2))["conversation"]
    assert conv["lastSeq"] == 200
    assert await scalar(engine, "SELECT last_seq FROM conversation WHERE id = :cid", cid=int(cid)) == 200


async def test_concurrent_sends_to_different_conversations_are_each_gap_free(client, burst_server, engine):
    cids = [await make_group(client, 1, 2, 3) for _ in range(4)]
    jobs = [(cid, 1 + n % 3) for n in range(30) for cid in cids]  # interleaved

    async with wave(burst_server) as burst:
        answers = await gated(engine, "message", [send(burst, sender, cid, "x") for cid, sender in jobs])

    for cid in cids:
        seqs = sorted(a["message"]["seq"] for a in answers if a["message"]["conversationId"] == cid)
        assert seqs == list(range(1, 31)), cid
        assert await message_seqs(engine, cid) == list(range(1, 31))
        assert await scalar(engine, "SELECT last_seq FROM conversation WHERE id = :cid", cid=int(cid)) == 30


async def test_send_to_one_conversation_does_not_wait_for_another_conversations_lock(client, engine):
    locked = await make_group(client, 1, 2)
    free = await make_group(client, 1, 2)
    async with engine.connect() as conn, conn.begin():
        # Hold the locked conversation's row lock, as a long send to it would.
        await conn.execute(text("SELECT last_seq FROM conversation WHERE id = :cid FOR UPDATE"), {"cid": int(locked)})
        queued = asyncio.create_task(send(client, 1, locked, "waits"))
        other = await asyncio.wait_for(send(client, 1, free, "passes"), 10)
        assert (other["message"]["conversationId"], other["message"]["seq"]) == (free, 1)
        await asyncio.sleep(0.3)
        assert not queued.done()  # sends to one conversation queue up on its row
        assert await message_seqs(engine, locked) == []
    answer = await asyncio.wait_for(queued, 10)
    assert (answer["message"]["seq"], answer["duplicate"]) == (1, False)
    assert await message_seqs(engine, locked) == [1]


# --- the sender's watermark -------------------------------------------------------------


async def test_sender_has_read_own_message_so_their_unread_count_is_zero(client):
    cid = await make_group(client, 1, 2)
    await send(client, 1, cid, "hello")

    mine = (await client.data(CONVERSATION, {"id": cid}, user=1))["conversation"]
    theirs = (await client.data(CONVERSATION, {"id": cid}, user=2))["conversation"]
    assert mine == {"id": cid, "lastSeq": 1, "lastReadSeq": 1, "unreadCount": 0}
    assert theirs == {"id": cid, "lastSeq": 1, "lastReadSeq": 0, "unreadCount": 1}


async def test_sending_marks_earlier_messages_from_others_as_read(client, engine):
    cid = await make_group(client, 1, 2)
    for _ in range(3):
        await send(client, 2, cid)
    reply = await send(client, 1, cid, "reply")

    assert reply["message"]["seq"] == 4
    mine = (await client.data(CONVERSATION, {"id": cid}, user=1))["conversation"]
    assert (mine["lastReadSeq"], mine["unreadCount"]) == (4, 0)
    assert (
        await scalar(
            engine,
            "SELECT last_read_seq FROM conversation_member WHERE conversation_id = :cid AND user_id = '2'",
            cid=int(cid),
        )
        == 3
    )


# --- the outbox ---------------------------------------------------------------------------


async def test_send_writes_one_message_new_outbox_row_with_the_whole_message(quiet):
    cid = await make_group(quiet.client, 1, 2)
    cmid = str(uuid.uuid4())
    events_before = await outbox(quiet.engine)

    sent = (await send(quiet.client, 1, cid, "héllo \U0001f600", cmid))["message"]

    new_rows = [r for r in await outbox(quiet.engine) if r not in events_before]
    assert len(new_rows) == 1  # message.new only: the sender had nothing unread
    row = new_rows[0]
    assert row.msg_key == cid
    payload = dict(row.payload)
    created_at = payload.pop("createdAt")
    assert payload == {
        "type": "message.new",
        "conversationId": int(cid),
        "seq": 1,
        "senderId": "1",
        "clientMsgId": cmid,
        "body": "héllo \U0001f600",
    }
    assert datetime.fromisoformat(created_at) == datetime.fromisoformat(sent["createdAt"])
    stored_at = await scalar(
        quiet.engine, "SELECT created_at FROM message WHERE conversation_id = :cid AND seq = 1", cid=int(cid)
    )
    assert datetime.fromisoformat(created_at) == stored_at


async def test_message_new_outbox_rows_of_concurrent_sends_are_in_seq_order(quiet):
    cid = await make_group(quiet.client, 1, 2, 3)
    async with wave(quiet.server) as burst:
        await gated(quiet.engine, "message", [send(burst, 1 + i % 3, cid, f"m{i}") for i in range(30)])

    events = await outbox(quiet.engine, "message.new")
    assert [e.payload["seq"] for e in events] == list(range(1, 31))
    stored = await rows(
        quiet.engine, "SELECT seq, client_msg_id FROM message WHERE conversation_id = :cid ORDER BY seq", cid=int(cid)
    )
    assert [e.payload["clientMsgId"] for e in events] == [str(r.client_msg_id) for r in stored]


async def test_duplicate_retry_writes_no_outbox_row(quiet):
    cid = await make_group(quiet.client, 1, 2)
    cmid = str(uuid.uuid4())
    await send(quiet.client, 1, cid, "once", cmid)
    events_before = await outbox(quiet.engine)

    retry = await send(quiet.client, 1, cid, "once", cmid)

    assert retry["duplicate"] is True
    assert await outbox(quiet.engine) == events_before


async def test_send_after_unread_messages_from_others_also_writes_read_updated(quiet):
    cid = await make_group(quiet.client, 1, 2)
    await send(quiet.client, 2, cid)
    await send(quiet.client, 2, cid)
    assert await outbox(quiet.engine, "read.updated") == []

    await send(quiet.client, 1, cid, "reply")

    reads = await outbox(quiet.engine, "read.updated")
    assert [(r.msg_key, r.payload) for r in reads] == [
        (cid, {"type": "read.updated", "conversationId": int(cid), "userId": "1", "lastReadSeq": 3})
    ]
    news = await outbox(quiet.engine, "message.new")
    assert [n.payload["seq"] for n in news] == [1, 2, 3]
    # Written together: the read.updated row follows its message.new row.
    assert news[-1].id < reads[0].id


async def test_send_with_nothing_unread_writes_no_read_updated(quiet):
    cid = await make_group(quiet.client, 1, 2)
    await send(quiet.client, 2, cid)
    await quiet.client.data(MARK_READ, {"cid": cid, "seq": 1}, user=1)
    reads_before = await outbox(quiet.engine, "read.updated")
    assert len(reads_before) == 1  # the markRead's own event

    await send(quiet.client, 1, cid, "first reply")
    await send(quiet.client, 1, cid, "second reply")

    assert await outbox(quiet.engine, "read.updated") == reads_before
    assert [n.payload["seq"] for n in await outbox(quiet.engine, "message.new")] == [1, 2, 3]


# --- who may send, and to what ------------------------------------------------------


async def test_send_by_non_member_is_not_found_and_stores_nothing(client, engine):
    cid = await make_group(client, 1, 2)
    assert await send_error(client, 3, cid) == "NOT_FOUND"
    assert await message_seqs(engine, cid) == []
    assert await scalar(engine, "SELECT last_seq FROM conversation WHERE id = :cid", cid=int(cid)) == 0
    assert await scalar(engine, "SELECT count(*) FROM conversation_member WHERE user_id = '3'") == 0


@pytest.mark.parametrize("cid", ["999999", "9223372036854775807"], ids=["unused", "largest-id"])
async def test_send_to_nonexistent_conversation_is_not_found(client, engine, cid):
    await make_group(client, 1, 2)
    assert await send_error(client, 1, cid) == "NOT_FOUND"
    assert await scalar(engine, "SELECT count(*) FROM message") == 0


async def test_send_without_token_is_unauthenticated_and_stores_nothing(client, engine):
    cid = await make_group(client, 1, 2)
    assert await send_error(client, None, cid) == "UNAUTHENTICATED"
    assert await scalar(engine, "SELECT count(*) FROM message") == 0


async def test_send_with_a_forged_token_is_unauthenticated_and_stores_nothing(client, engine):
    cid = await make_group(client, 1, 2)
    body = await client.execute(
        SEND,
        {"cid": cid, "cmid": str(uuid.uuid4()), "body": "hi"},
        headers={"authorization": f"Bearer {client.token(1)}x"},
    )
    assert [error_code(e) for e in body["errors"]] == ["UNAUTHENTICATED"]
    assert await scalar(engine, "SELECT count(*) FROM message") == 0


# --- input validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    ["", "   \n\t ", "x" * 4001, "a\x00b", "\x00"],
    ids=["empty", "whitespace-only", "4001-chars", "nul-inside", "nul-only"],
)
async def test_invalid_body_is_bad_user_input_and_stores_nothing(client, engine, body):
    cid = await make_group(client, 1, 2)
    assert await send_error(client, 1, cid, body) == "BAD_USER_INPUT"
    assert await scalar(engine, "SELECT count(*) FROM message") == 0
    assert await scalar(engine, "SELECT last_seq FROM conversation WHERE id = :cid", cid=int(cid)) == 0


@pytest.mark.parametrize("body", ["x" * 4000, "é" * 4000, "\U0001f600" * 4000], ids=["ascii", "latin", "emoji"])
async def test_body_of_exactly_4000_characters_is_accepted_and_stored_intact(client, engine, body):
    cid = await make_group(client, 1, 2)
    sent = await send(client, 1, cid, body)
    assert sent["message"]["body"] == body
    stored = await scalar(engine, "SELECT body FROM message WHERE conversation_id = :cid AND seq = 1", cid=int(cid))
    assert stored == body


@pytest.mark.parametrize(
    "cmid",
    ["not-a-uuid", "", "1234", "g2345678-1234-5678-1234-567812345678", "12345678-1234-5678-1234-56781234567", 42],
    ids=["words", "empty", "short", "non-hex", "too-short", "number"],
)
async def test_malformed_client_msg_id_is_bad_user_input(client, engine, cmid):
    cid = await make_group(client, 1, 2)
    assert await send_error(client, 1, cid, "hi", cmid) == "BAD_USER_INPUT"
    assert await scalar(engine, "SELECT count(*) FROM message") == 0


async def test_malformed_client_msg_id_literal_is_bad_user_input(client, engine):
    cid = await make_group(client, 1, 2)
    query = f'mutation {{ sendMessage(conversationId: "{cid}", clientMsgId: "nope", body: "hi") {{ duplicate }} }}'
    assert error_code(await client.error(query, user=1)) == "BAD_USER_INPUT"
    assert await scalar(engine, "SELECT count(*) FROM message") == 0


@pytest.mark.parametrize("cid", ["abc", "-1", "1.5", "0", "", "9223372036854775808"])
async def test_malformed_conversation_id_is_bad_user_input(client, cid):
    await make_group(client, 1, 2)
    assert await send_error(client, 1, cid) == "BAD_USER_INPUT"
