"""Migration 0014_text_user_ids: a database of decimal user ids carries over, and answers as before.

A scratch database is taken back to 0013_event_keys (bigint user ids) and filled the way chatgql of
before filled it: a group and a direct conversation, messages (one edited, one deleted, one that
mentions a member, one with a reaction), read state and a user setting, and an event still in the
outbox with numbers for its user ids. After the upgrade every user id is its decimal text, the
direct pair of users 9 and 10 is re-keyed in text order ('10' < '9'), and a chatgql on it answers
users 9 and 10 what it answered before (members, messages, unread counts, seenBy, the inbox, node
ids built before). The downgrade gives the numbers back.
"""

from __future__ import annotations

import asyncio
import base64
import uuid

import asyncpg
import httpx

from chatgql import db

from ..conftest import GraphQLClient, RunningServer, drop_database, make_settings, scratch_database
from .test_partitioning import _alembic

NAME = "chatgql_text_user_ids_migration"
USER_COLUMNS = {
    ("conversation", "created_by"),
    ("conversation_member", "user_id"),
    ("message", "sender_id"),
    ("message", "deleted_by"),
    ("message_change", "user_id"),
    ("message_reaction", "user_id"),
    ("message_mention", "user_id"),
    ("user_setting", "user_id"),
    ("direct_pair", "user_low"),
    ("direct_pair", "user_high"),
}
COLUMN_TYPES = """
SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), coalesce(l.collname, '')
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_collation l ON l.oid = a.attcollation AND a.attcollation <> 0
 WHERE c.relkind IN ('r', 'p') AND c.relnamespace = 'public'::regnamespace AND NOT a.attisdropped
   AND (c.relname, a.attname) IN (SELECT * FROM unnest($1::text[], $2::text[]))
"""
# Queries a client of before asks, and their answers must not change.
CONVERSATION = """
query($c: ID!) {
  conversation(id: $c) {
    id type title lastSeq lastReadSeq unreadCount memberCount
    members { id userId role lastReadSeq }
    messages(last: 10) { nodes { id seq senderId deletedBy mentions seenBy seenByCount reactions { emoji count } } }
  }
}
"""
INBOX = (
    "{ viewer { id userId totalUnread } inbox(first: 10) { nodes { id unreadCount lastMessage { seq senderId } } } }"
)
NODE = "query($id: ID!) { node(id: $id) { id ... on Member { userId role } ... on Viewer { userId } } }"
SEND = """
mutation($c: ID!, $m: UUID!) { sendMessage(conversationId: $c, clientMsgId: $m, body: "after") { message { seq senderId } } }
"""
DIRECT_CHAT = "mutation($u: ID!) { createDirectConversation(userId: $u) { id } }"


async def _fill_at_0013(conn: asyncpg.Connection) -> None:
    """Rows as chatgql wrote them at 0013 (bigint user ids), the messages through its own send function."""
    await conn.execute(
        """
        INSERT INTO conversation (id, type, title, created_by) VALUES (1, 'GROUP', 'team', 9), (2, 'DIRECT', NULL, NULL);
        INSERT INTO conversation_member (conversation_id, user_id, role)
        VALUES (1, 9, 'OWNER'), (1, 10, 'MEMBER'), (1, 100, 'ADMIN'), (2, 9, 'MEMBER'), (2, 10, 'MEMBER');
        INSERT INTO direct_pair (user_low, user_high, conversation_id) VALUES (9, 10, 2);
        INSERT INTO user_setting (user_id, private_receipts) VALUES (100, false);
        SELECT setval(pg_get_serial_sequence('conversation', 'id'), 2);
        """
    )
    for i, (cid, sender) in enumerate([(1, 9), (1, 10), (1, 9), (1, 100), (2, 10)]):
        row = await conn.fetchrow(
            "SELECT * FROM chat_send($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7, $8)",
            cid,
            sender,
            uuid.uuid4(),
            f"m{i}",
            '{"type": "message.new"}',
            '{"type": "read.updated"}',
            ["seq", "createdAt"],
            ["lastReadSeq"],
        )
        assert row["outcome"] == "stored"
    await conn.execute(
        """
        UPDATE conversation_member SET last_read_seq = 3 WHERE conversation_id = 1 AND user_id = 10;
        INSERT INTO message_mention (conversation_id, user_id, seq) VALUES (1, 10, 3);
        INSERT INTO message_reaction (conversation_id, seq, user_id, emoji) VALUES (1, 1, 10, '👍');
        INSERT INTO message_reaction_count (conversation_id, seq, emoji, count) VALUES (1, 1, '👍', 1);
        UPDATE conversation SET last_change_seq = 1 WHERE id = 1;
        INSERT INTO message_change (conversation_id, change_seq, seq, kind, user_id) VALUES (1, 1, 1, 'REACTION', 10);
        """
    )
    # An event of before still in the outbox: its user ids are numbers (the relay reads them as text).
    await conn.execute(
        "INSERT INTO outbox (msg_key, payload) VALUES ('1', $1::jsonb)",
        '{"type": "member.added", "conversationId": 1, "userIds": [9, 10, 100]}',
    )


def _opaque(raw: str) -> str:
    """A node id as chatgql built it before text user ids (graphql/ids.py of 0013's time)."""
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _member(user: str, role: str, read: int) -> dict:
    return {"id": _opaque(f"Member:1:{user}"), "userId": user, "role": role, "lastReadSeq": read}


def _message(seq: int, sender: str, seen_by: list[str], mentions: list[str] = [], reactions: list[dict] = []) -> dict:  # noqa: B006
    return {
        "id": _opaque(f"Message:1:{seq}"),
        "seq": seq,
        "senderId": sender,
        "deletedBy": None,
        "mentions": mentions,
        "seenBy": seen_by,
        "seenByCount": len(seen_by),
        "reactions": reactions,
    }


# What chatgql answered user 9 about the group at 0013, with the members and seenBy in text order now
# (they were in number order: 9, 10, 100): the one change of order docs/guide/api.md announces.
GROUP_FOR_9 = {
    "id": "1",
    "type": "GROUP",
    "title": "team",
    "lastSeq": 4,
    "lastReadSeq": 3,
    "unreadCount": 1,
    "memberCount": 3,
    "members": [_member("10", "MEMBER", 3), _member("100", "ADMIN", 4), _member("9", "OWNER", 3)],
    "messages": {
        "nodes": [
            _message(1, "9", ["10", "100"], reactions=[{"emoji": "👍", "count": 1}]),
            _message(2, "10", ["100", "9"]),
            _message(3, "9", ["10", "100"], mentions=["10"]),
            _message(4, "100", []),
        ]
    },
}


async def _check_answers(url: str) -> None:
    """What a chatgql on url answers users 9 and 10: the same as before the migration."""
    settings = make_settings(url)
    async with RunningServer(settings) as server, httpx.AsyncClient(timeout=30) as http:
        client = GraphQLClient(http, server.url, settings)
        group = (await client.data(CONVERSATION, {"c": "1"}, user=9))["conversation"]
        assert group == GROUP_FOR_9
        mine = (await client.data(CONVERSATION, {"c": "1"}, user=10))["conversation"]
        assert (mine["lastReadSeq"], mine["unreadCount"]) == (3, 1)
        direct = (await client.data(CONVERSATION, {"c": "2"}, user=9))["conversation"]
        assert (direct["type"], direct["lastSeq"], direct["unreadCount"]) == ("DIRECT", 1, 1)
        assert [m["userId"] for m in direct["members"]] == ["10", "9"]
        inbox = await client.data(INBOX, user=9)
        assert inbox["viewer"] == {"id": _opaque("Viewer:9"), "userId": "9", "totalUnread": 2}
        assert inbox["inbox"]["nodes"] == [
            {"id": "2", "unreadCount": 1, "lastMessage": {"seq": 1, "senderId": "10"}},
            {"id": "1", "unreadCount": 1, "lastMessage": {"seq": 4, "senderId": "100"}},
        ]
        # node ids a client got before the migration still name the same objects
        member = await client.data(NODE, {"id": _opaque("Member:1:10")}, user=9)
        assert member["node"] == {"id": _opaque("Member:1:10"), "userId": "10", "role": "MEMBER"}
        viewer = await client.data(NODE, {"id": _opaque("Viewer:9")}, user=9)
        assert viewer["node"] == {"id": _opaque("Viewer:9"), "userId": "9"}
        # a members cursor of before (a decimal user id) pages on, in text order
        after = await client.data(
            'query($c: ID!) { conversation(id: $c) { members(first: 5, after: "10") { userId } } }', {"c": "1"}, user=9
        )
        assert after["conversation"]["members"] == [{"userId": "100"}, {"userId": "9"}]
        # the same direct conversation from either side (its pair was re-keyed), and a send
        for user, other in ((9, "10"), (10, "9")):
            found = await client.data(DIRECT_CHAT, {"u": other}, user=user)
            assert found["createDirectConversation"]["id"] == "2"
        sent = await client.data(SEND, {"c": "1", "m": str(uuid.uuid4())}, user=10)
        assert sent["sendMessage"]["message"] == {"seq": 5, "senderId": "10"}


async def test_0014_carries_decimal_user_ids_over_and_answers_as_before(database_url):
    url = await scratch_database(database_url, NAME)
    try:
        await asyncio.to_thread(_alembic, url, "downgrade", "0013_event_keys")
        conn = await asyncpg.connect(db.dsn(url))
        try:
            await _fill_at_0013(conn)
            members_before = await conn.fetch(
                "SELECT conversation_id, user_id::text, role, last_read_seq FROM conversation_member ORDER BY 1, 2"
            )
            messages_before = await conn.fetch(
                "SELECT conversation_id, seq, sender_id::text, body, created_at FROM message ORDER BY 1, 2"
            )
        finally:
            await conn.close()

        await asyncio.to_thread(_alembic, url, "upgrade", "0014_text_user_ids")
        conn = await asyncpg.connect(db.dsn(url))
        try:
            kinds = await conn.fetch(COLUMN_TYPES, [t for t, _ in USER_COLUMNS], [c for _, c in USER_COLUMNS])
            assert {(r[0], r[1]) for r in kinds} == USER_COLUMNS
            assert {(r[2], r[3]) for r in kinds} == {("text", "C")}, kinds
            members = "SELECT conversation_id, user_id, role, last_read_seq FROM conversation_member ORDER BY 1, 2"
            assert await conn.fetch(members) == members_before
            messages = "SELECT conversation_id, seq, sender_id, body, created_at FROM message ORDER BY 1, 2"
            assert await conn.fetch(messages) == messages_before
            # text order: the pair (9, 10) is ('10', '9') now, one row as before
            pairs = await conn.fetch("SELECT user_low, user_high, conversation_id FROM direct_pair")
            assert [tuple(r) for r in pairs] == [("10", "9", 2)]
            assert await conn.fetchval("SELECT user_id FROM message_mention") == "10"
            assert await conn.fetchval("SELECT user_id FROM message_reaction") == "10"
            assert await conn.fetchval("SELECT user_id FROM message_change") == "10"
            assert await conn.fetchval("SELECT user_id FROM user_setting") == "100"
            assert await conn.fetchval("SELECT created_by FROM conversation WHERE id = 1") == "9"
            # the bigint send functions are gone, the text ones are there (with 0005's generic plans)
            functions = await conn.fetch(
                "SELECT p.oid::regprocedure::text AS signature, p.proconfig FROM pg_proc p"
                " WHERE p.proname IN ('chat_send', 'chat_send_batch') ORDER BY 1"
            )
            assert [f["signature"] for f in functions] == [
                "chat_send(bigint,text,uuid,text,jsonb,jsonb,text[],text[])",
                "chat_send_batch(bigint,text[],uuid[],text[],jsonb[],jsonb[],text[],text[])",
            ]
            assert functions[0]["proconfig"] == ["plan_cache_mode=force_generic_plan"]
        finally:
            await conn.close()

        # today's code needs today's schema: the later migrations carry 0014's rows on unchanged
        await asyncio.to_thread(_alembic, url, "upgrade", "head")
        await _check_answers(url)

        # and back: numbers again, the pair in number order
        await asyncio.to_thread(_alembic, url, "downgrade", "0013_event_keys")
        conn = await asyncpg.connect(db.dsn(url))
        try:
            kind = await conn.fetchval(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
                " WHERE attrelid = 'conversation_member'::regclass AND attname = 'user_id'"
            )
            assert kind == "bigint"
            assert [tuple(r) for r in await conn.fetch("SELECT user_low, user_high FROM direct_pair")] == [(9, 10)]
            assert await conn.fetchval("SELECT count(*) FROM message WHERE sender_id = 10") == 3
        finally:
            await conn.close()
        await asyncio.to_thread(_alembic, url, "upgrade", "head")
    finally:
        await drop_database(database_url, NAME)
