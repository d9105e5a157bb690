"""markRead: the monotonic, clamped watermark, and read.updated only when it moved.

Outbox assertions run against `quiet`: a second chatgql with no relay, on a
database of its own (the session server's relay drains the main database's
outbox continuously).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from chatgql.edge.auth import issue_token
from tests.conftest import GraphQLClient, RunningServer, error_code
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

MARK_READ = """
mutation Read($cid: ID!, $seq: Long!) {
  markRead(conversationId: $cid, seq: $seq) { conversationId lastReadSeq advanced unreadCount }
}
"""
SEND = """
mutation Send($cid: ID!, $cmid: UUID!, $body: String!) {
  sendMessage(conversationId: $cid, clientMsgId: $cmid, body: $body) { message { seq } }
}
"""
CREATE_GROUP = """
mutation Group($title: String!, $ids: [ID!]!) { createGroup(title: $title, memberIds: $ids) { id } }
"""
CONVERSATION = """
query Conv($id: ID!) { conversation(id: $id) { lastSeq lastReadSeq unreadCount } }
"""
VIEWER = "{ viewer { totalUnread unreadConversations } }"
MAX_LONG = 2**63 - 1


async def make_group(client: GraphQLClient, owner: int, *others: int) -> str:
    data = await client.data(CREATE_GROUP, {"title": "room", "ids": [str(u) for u in others]}, user=owner)
    return data["createGroup"]["id"]


async def fill(client: GraphQLClient, cid: str, count: int, sender: int = 2) -> None:
    """`count` messages from `sender`, one after another (seq 1..count in a fresh conversation)."""
    for _ in range(count):
        await client.data(SEND, {"cid": cid, "cmid": str(uuid.uuid4()), "body": "m"}, user=sender)


async def mark(client: GraphQLClient, user: int, cid: str, seq: Any) -> dict:
    return (await client.data(MARK_READ, {"cid": cid, "seq": seq}, user=user))["markRead"]


async def mark_error(client: GraphQLClient, user: int | None, cid: Any, seq: Any) -> str:
    return error_code(await client.error(MARK_READ, {"cid": cid, "seq": seq}, user=user))


async def watermark(engine: AsyncEngine, cid: str, user: int | str) -> int | None:
    async with engine.connect() as conn:
        result = await conn.execute(
            text("SELECT last_read_seq FROM conversation_member WHERE conversation_id = :cid AND user_id = :uid"),
            {"cid": int(cid), "uid": str(user)},
        )
        return result.scalar_one_or_none()


async def read_events(engine: AsyncEngine) -> list:
    """read.updated outbox rows in id order."""
    async with engine.connect() as conn:
        result = await conn.execute(text("SELECT id, msg_key, payload FROM outbox ORDER BY id"))
        return [row for row in result if row.payload["type"] == "read.updated"]


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
    async with open_quiet_server(migrated_url, "reads") as running:
        yield running


# --- monotonic and clamped ------------------------------------------------------------


async def test_watermark_never_moves_backward(client, engine):
    cid = await make_group(client, 1, 2)
    await fill(client, cid, 52)

    forward = await mark(client, 1, cid, 50)
    backward = await mark(client, 1, cid, 45)

    assert forward == {"conversationId": cid, "lastReadSeq": 50, "advanced": True, "unreadCount": 2}
    assert backward == {"conversationId": cid, "lastReadSeq": 50, "advanced": False, "unreadCount": 2}
    assert await watermark(engine, cid, 1) == 50
    conv = (await client.data(CONVERSATION, {"id": cid}, user=1))["conversation"]
    assert conv == {"lastSeq": 52, "lastReadSeq": 50, "unreadCount": 2}


async def test_seq_beyond_last_seq_is_clamped_to_last_seq(client, engine):
    cid = await make_group(client, 1, 2)
    await fill(client, cid, 3)

    first = await mark(client, 1, cid, 999)
    again = await mark(client, 1, cid, 999)

    assert first == {"conversationId": cid, "lastReadSeq": 3, "advanced": True, "unreadCount": 0}
    assert again == {"conversationId": cid, "lastReadSeq": 3, "advanced": False, "unreadCount": 0}
    assert await watermark(engine, cid, 1) == 3
    # The clamp is to the lastSeq of the moment: a later message is unread again.
    await fill(client, cid, 1)
    conv = (await client.data(CONVERSATION, {"id": cid}, user=1))["conversation"]
    assert conv == {"lastSeq": 4, "lastReadSeq": 3, "unreadCount": 1}
    assert await mark(client, 1, cid, 999) == {
        "conversationId": cid,
        "lastReadSeq": 4,
        "advanced": True,
        "unreadCount": 0,
    }


async def test_largest_long_seq_is_clamped_to_last_seq(client, engine):
    cid = await make_group(client, 1, 2)
    await fill(client, cid, 2)
    assert await mark(client, 1, cid, MAX_LONG) == {
        "conversationId": cid,
        "lastReadSeq": 2,
        "advanced": True,
        "unreadCount": 0,
    }
    assert await watermark(engine, cid, 1) == 2


async def test_mark_read_at_the_current_watermark_is_not_advanced(client, engine):
    cid = await make_group(client, 1, 2)
    await fill(client, cid, 5)
    assert (await mark(client, 1, cid, 2))["advanced"] is True
    assert await mark(client, 1, cid, 2) == {
        "conversationId": cid,
        "lastReadSeq": 2,
        "advanced": False,
        "unreadCount": 3,
    }
    assert (await mark(client, 1, cid, 3))["advanced"] is True
    assert await watermark(engine, cid, 1) == 3


async def test_mark_read_without_messages_stays_at_zero_and_is_not_advanced(client, engine):
    cid = await make_group(client, 1, 2)
    assert await mark(client, 1, cid, 5) == {
        "conversationId": cid,
        "lastReadSeq": 0,
        "advanced": False,
        "unreadCount": 0,
    }
    assert await watermark(engine, cid, 1) == 0


async def test_mark_read_moves_only_the_callers_watermark(client, engine):
    cid = await make_group(client, 1, 2, 3)
    await fill(client, cid, 4, sender=2)
    await mark(client, 1, cid, 3)
    assert [await watermark(engine, cid, u) for u in (1, 2, 3)] == [3, 4, 0]


async def test_unread_count_in_payload_is_last_seq_minus_last_read_seq(client):
    cid = await make_group(client, 1, 2)
    await fill(client, cid, 10)

    payload = await mark(client, 1, cid, 4)

    assert (payload["lastReadSeq"], payload["unreadCount"]) == (4, 6)
    conv = (await client.data(CONVERSATION, {"id": cid}, user=1))["conversation"]
    assert conv == {"lastSeq": 10, "lastReadSeq": 4, "unreadCount": 6}
    assert (await client.data(VIEWER, user=1))["viewer"] == {"totalUnread": 6, "unreadConversations": 1}
    payload = await mark(client, 1, cid, 10)
    assert (payload["lastReadSeq"], payload["unreadCount"]) == (10, 0)
    assert (await client.data(VIEWER, user=1))["viewer"] == {"totalUnread": 0, "unreadConversations": 0}


# --- read.updated in the outbox ----------------------------------------------------------


async def test_read_updated_outbox_row_is_written_once_per_advance_and_never_for_a_no_op(quiet):
    cid = await make_group(quiet.client, 1, 2)
    await fill(quiet.client, cid, 5)
    assert await read_events(quiet.engine) == []  # user 2 sent them all: nothing was unread for them

    await mark(quiet.client, 1, cid, 2)  # advances to 2
    await mark(quiet.client, 1, cid, 1)  # lower: no-op
    await mark(quiet.client, 1, cid, 2)  # equal: no-op
    await mark(quiet.client, 1, cid, 999)  # advances, clamped to 5
    await mark(quiet.client, 1, cid, 999)  # already at lastSeq: no-op

    events = await read_events(quiet.engine)
    assert [(e.msg_key, e.payload) for e in events] == [
        (cid, {"type": "read.updated", "conversationId": int(cid), "userId": "1", "lastReadSeq": 2}),
        (cid, {"type": "read.updated", "conversationId": int(cid), "userId": "1", "lastReadSeq": 5}),
    ]


async def test_mark_read_errors_write_no_read_updated(quiet):
    cid = await make_group(quiet.client, 1, 2)
    await fill(quiet.client, cid, 3)
    assert await mark_error(quiet.client, 1, cid, -1) == "BAD_USER_INPUT"
    assert await mark_error(quiet.client, 9, cid, 2) == "NOT_FOUND"
    assert await read_events(quiet.engine) == []


async def test_concurrent_advances_write_one_read_updated_each_in_increasing_order(quiet):
    cid = await make_group(quiet.client, 1, 2)
    await fill(quiet.client, cid, 40)
    seqs = random.Random(7).choices(range(1, 41), k=60)

    async with wave(quiet.server) as burst:
        answers = await gated(quiet.engine, "conversation_member", [mark(burst, 1, cid, s) for s in seqs])

    advanced = sorted(a["lastReadSeq"] for a in answers if a["advanced"])
    events = [e.payload["lastReadSeq"] for e in await read_events(quiet.engine)]
    assert sorted(events) == advanced
    # Each advance committed after the one before it: the event stream only goes up.
    assert events == sorted(set(events))
    assert events[-1] == max(seqs)
    assert await watermark(quiet.engine, cid, 1) == max(seqs)


# --- storms ------------------------------------------------------------------------------


def device_tokens(settings, user: int, devices: int) -> list[str]:
    """Distinct valid tokens of one user, one per device (they differ by expiry)."""
    return [issue_token(settings, str(user), ttl_seconds=3600 * (d + 1)) for d in range(devices)]


async def storm(
    server: RunningServer, engine: AsyncEngine, cid: str, user: int, seqs: list[int], devices: int = 5
) -> list[dict]:
    """markRead(seq) for every seq at once, spread over `devices` tokens of `user`."""
    tokens = device_tokens(server.settings, user, devices)
    assert len(set(tokens)) == devices

    async with wave(server) as burst:

        async def one(i: int, seq: int) -> dict:
            body = await burst.execute(
                MARK_READ, {"cid": cid, "seq": seq}, headers={"authorization": f"Bearer {tokens[i % devices]}"}
            )
            assert "errors" not in body, body["errors"]
            return body["data"]["markRead"]

        return await gated(engine, "conversation_member", [one(i, s) for i, s in enumerate(seqs)])


async def test_concurrent_mark_read_storm_from_several_devices_keeps_the_maximum(client, burst_server, engine):
    cid = await make_group(client, 1, 2)
    await fill(client, cid, 60)
    seqs = random.Random(42).choices(range(0, 50), k=100)  # all below lastSeq: the max must win

    answers = await storm(burst_server, engine, cid, 1, seqs)

    assert await watermark(engine, cid, 1) == max(seqs)
    assert any(a["advanced"] for a in answers)
    # No answer reports a watermark below what that call asked for (it is never lowered).
    assert all(a["lastReadSeq"] >= s for a, s in zip(answers, seqs, strict=True))
    assert all(a["unreadCount"] == 60 - a["lastReadSeq"] for a in answers)
    async with wave(burst_server) as fresh:
        conv = (await fresh.data(CONVERSATION, {"id": cid}, user=1))["conversation"]
    assert conv == {"lastSeq": 60, "lastReadSeq": max(seqs), "unreadCount": 60 - max(seqs)}


async def test_concurrent_mark_read_storm_beyond_last_seq_ends_clamped_to_last_seq(client, burst_server, engine):
    cid = await make_group(client, 1, 2)
    await fill(client, cid, 30)
    seqs = random.Random(9).choices(range(0, 500), k=100)
    assert max(seqs) > 30

    answers = await storm(burst_server, engine, cid, 1, seqs)

    assert await watermark(engine, cid, 1) == 30
    assert all(a["lastReadSeq"] <= 30 for a in answers)
    assert sum(a["advanced"] and a["lastReadSeq"] == 30 for a in answers) == 1


# --- errors ------------------------------------------------------------------------------


async def test_negative_seq_is_bad_user_input_and_leaves_the_watermark(client, engine):
    cid = await make_group(client, 1, 2)
    await fill(client, cid, 3)
    await mark(client, 1, cid, 2)
    assert await mark_error(client, 1, cid, -1) == "BAD_USER_INPUT"
    assert await mark_error(client, 1, cid, -(2**63)) == "BAD_USER_INPUT"
    assert await watermark(engine, cid, 1) == 2


@pytest.mark.parametrize("seq", ["abc", 1.5, True, None, 2**63], ids=["word", "fraction", "bool", "null", "overflow"])
async def test_seq_that_is_not_a_64_bit_integer_is_bad_user_input(client, engine, seq):
    cid = await make_group(client, 1, 2)
    await fill(client, cid, 1)
    assert await mark_error(client, 1, cid, seq) == "BAD_USER_INPUT"
    assert await watermark(engine, cid, 1) == 0


async def test_mark_read_by_non_member_is_not_found_and_joins_nothing(client, engine):
    cid = await make_group(client, 1, 2)
    await fill(client, cid, 3)
    assert await mark_error(client, 3, cid, 2) == "NOT_FOUND"
    assert await watermark(engine, cid, 3) is None
    assert await watermark(engine, cid, 1) == 0


async def test_mark_read_on_nonexistent_conversation_is_not_found(client):
    await make_group(client, 1, 2)
    assert await mark_error(client, 1, "999999", 1) == "NOT_FOUND"


@pytest.mark.parametrize("cid", ["abc", "-1", "1.5", "0"])
async def test_malformed_conversation_id_is_bad_user_input(client, cid):
    assert await mark_error(client, 1, cid, 1) == "BAD_USER_INPUT"


async def test_mark_read_without_token_is_unauthenticated_and_changes_nothing(client, engine):
    cid = await make_group(client, 1, 2)
    await fill(client, cid, 2)
    assert await mark_error(client, None, cid, 2) == "UNAUTHENTICATED"
    assert await watermark(engine, cid, 1) == 0
