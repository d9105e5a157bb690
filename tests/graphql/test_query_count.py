"""No N+1: the SQL statements one GraphQL request runs do not grow with the page size.

Statements are counted with asyncpg query loggers on the connections the
server's own pool hands out, for the duration of one HTTP request. The outbox
relay shares that pool from its own tasks ("outbox-relay*"); their statements
are left out, and the outbox is drained before measuring.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from ..support.live import outbox_drained

ALIASES = 20  # fields per setup document (the server's default alias limit)
# The most statements any request below may run (what they need is 3 or 4 batched reads).
SMALL = 6


@contextlib.contextmanager
def recording_statements(server, record: Callable[[Any], None]) -> Iterator[None]:
    """record(asyncpg's LoggedQuery) for every statement the server's pool runs meanwhile, but
    the background tasks' (the outbox relay's, named outbox-relay*, and the ban list's reload)."""
    database = server.runtime.deps.database
    acquire = database.connection

    @contextlib.asynccontextmanager
    async def recorded() -> AsyncIterator:
        async with acquire() as conn:
            task = asyncio.current_task()
            if task is not None and task.get_name().startswith(("outbox-relay", "ban-list")):
                yield conn
                return
            # asyncpg reports each statement (call_soon) once it has run
            conn.add_query_logger(record)
            try:
                yield conn
            finally:
                conn.remove_query_logger(record)

    database.connection = recorded
    try:
        yield
    finally:
        del database.connection


@contextlib.contextmanager
def logging_statements(server) -> Iterator[list[tuple[str, tuple]]]:
    """(query, args) of every statement the server's pool runs meanwhile, but the outbox relay's."""
    statements: list[tuple[str, tuple]] = []
    with recording_statements(server, lambda record: statements.append((record.query, tuple(record.args or ())))):
        yield statements


@contextlib.contextmanager
def counting_statements(server) -> Iterator[list[str]]:
    statements: list[str] = []
    with recording_statements(server, lambda record: statements.append(" ".join(record.query.split()))):
        yield statements


async def statements_of(server, engine, client, query: str, variables: dict, user: int) -> tuple[list[str], dict]:
    await outbox_drained(engine, 10)
    with counting_statements(server) as statements:
        data = await client.data(query, variables, user=user)
        await asyncio.sleep(0.05)  # the last statements' loggers run on the loop's next turns
    return list(statements), data


# ---------------------------------------------------------------- setup through the API


async def create_groups(client, owner: int, members: list[int], count: int) -> list[str]:
    ids: list[str] = []
    member_list = ", ".join(f'"{m}"' for m in members)
    for start in range(0, count, ALIASES):
        fields = " ".join(
            f'g{i}: createGroup(title: "g{i}", memberIds: [{member_list}]) {{ id }}'
            for i in range(start, min(count, start + ALIASES))
        )
        data = await client.data(f"mutation {{ {fields} }}", user=owner)
        ids += [data[f"g{i}"]["id"] for i in range(start, min(count, start + ALIASES))]
    return ids


async def send_to_each(client, sender: int, conversation_ids: list[str], rounds: int = 1) -> None:
    """`rounds` messages from sender into every conversation."""
    for r in range(rounds):
        for start in range(0, len(conversation_ids), ALIASES):
            chunk = conversation_ids[start : start + ALIASES]
            fields = " ".join(
                f'm{n}: sendMessage(conversationId: "{cid}", clientMsgId: "{uuid.uuid4()}", body: "r{r} {cid}")'
                " { duplicate }"
                for n, cid in enumerate(chunk)
            )
            await client.data(f"mutation {{ {fields} }}", user=sender)


async def send_many(client, sender: int, cid: str, count: int) -> None:
    for start in range(0, count, ALIASES):
        fields = " ".join(
            f'm{n}: sendMessage(conversationId: "{cid}", clientMsgId: "{uuid.uuid4()}", body: "m{n}") {{ duplicate }}'
            for n in range(start, min(count, start + ALIASES))
        )
        await client.data(f"mutation {{ {fields} }}", user=sender)


async def mark_read_each(client, user: int, conversation_ids: list[str], seq: int) -> None:
    for start in range(0, len(conversation_ids), ALIASES):
        chunk = conversation_ids[start : start + ALIASES]
        fields = " ".join(
            f'r{n}: markRead(conversationId: "{cid}", seq: {seq}) {{ advanced }}' for n, cid in enumerate(chunk)
        )
        await client.data(f"mutation {{ {fields} }}", user=user)


# ---------------------------------------------------------------- inbox

INBOX = """
query($n: Int!) {
  inbox(first: $n) {
    nodes {
      id unreadCount memberCount
      members { userId }
      lastMessage { body seenByCount }
    }
    pageInfo { hasNextPage }
  }
}
"""


async def test_inbox_page_runs_the_same_few_statements_for_5_and_50_conversations(server, engine, client):
    conversations = await create_groups(client, 1, [2, 3], 200)
    await send_to_each(client, 2, conversations)
    await mark_read_each(client, 3, conversations[::2], 1)

    small, small_data = await statements_of(server, engine, client, INBOX, {"n": 5}, user=1)
    large, large_data = await statements_of(server, engine, client, INBOX, {"n": 50}, user=1)

    assert len(small_data["inbox"]["nodes"]) == 5
    nodes = large_data["inbox"]["nodes"]
    assert len(nodes) == 50
    assert large_data["inbox"]["pageInfo"]["hasNextPage"] is True
    for node in nodes:  # the batched answers are each conversation's own
        assert node["unreadCount"] == 1
        assert node["memberCount"] == 3
        assert sorted(m["userId"] for m in node["members"]) == ["1", "2", "3"]
        assert node["lastMessage"]["body"] == f"r0 {node['id']}"
        expected_seen = 1 if conversations.index(node["id"]) % 2 == 0 else 0
        assert node["lastMessage"]["seenByCount"] == expected_seen

    assert len(large) <= SMALL, large
    assert len(large) == len(small), (small, large)


INBOX_LAST_MESSAGE_SPELLINGS = {
    "nodes": "query($n: Int!) { inbox(first: $n) { nodes { id lastMessage { seq body } } } }",
    "alias": "query($n: Int!) { inbox(first: $n) { nodes { id last: lastMessage { seq body } } } }",
    "edges": "query($n: Int!) { inbox(first: $n) { edges { node { id lastMessage { seq body } } } } }",
    "fragment": "query($n: Int!) { inbox(first: $n) { ...Page } } "
    "fragment Page on ConversationConnection { nodes { id ...Last } } "
    "fragment Last on Conversation { lastMessage { seq body } }",
    "inline": "query($n: Int!) { inbox(first: $n) { ... on ConversationConnection { nodes { id "
    "... on Conversation { lastMessage { seq body } } } } } }",
}


@pytest.mark.parametrize("spelling", sorted(INBOX_LAST_MESSAGE_SPELLINGS))
async def test_inbox_loads_every_last_message_in_one_statement_however_it_is_asked_for(
    server, engine, client, spelling
):
    conversations = await create_groups(client, 41, [42], 30)
    await send_to_each(client, 42, conversations[:20], rounds=2)  # 10 conversations without messages
    query = INBOX_LAST_MESSAGE_SPELLINGS[spelling]
    statements, data = await statements_of(server, engine, client, query, {"n": 30}, user=41)
    page = data["inbox"]
    nodes = page["nodes"] if "nodes" in page else [edge["node"] for edge in page["edges"]]
    assert len(nodes) == 30
    for node in nodes:
        last = node.get("lastMessage", node.get("last"))
        if conversations.index(node["id"]) < 20:
            assert last == {"seq": 2, "body": f"r1 {node['id']}"}
        else:
            assert last is None
    # the page and its last messages together (store.conversations.inbox_page_with_last_messages)
    assert len(statements) == 1, statements
    assert "FROM message" in statements[0], statements  # the page joined to its last messages


INBOX_WITH_HISTORY = """
query($n: Int!) {
  inbox(first: $n) {
    nodes {
      id
      messages(last: 3) { nodes { seq body seenByCount } pageInfo { hasPreviousPage } }
    }
  }
}
"""


async def test_conversation_messages_on_every_inbox_conversation_is_batched(server, engine, client):
    conversations = await create_groups(client, 1, [2], 60)
    await send_to_each(client, 2, conversations, rounds=4)

    small, _ = await statements_of(server, engine, client, INBOX_WITH_HISTORY, {"n": 5}, user=1)
    large, data = await statements_of(server, engine, client, INBOX_WITH_HISTORY, {"n": 50}, user=1)

    nodes = data["inbox"]["nodes"]
    assert len(nodes) == 50
    for node in nodes:
        page = node["messages"]
        assert [m["seq"] for m in page["nodes"]] == [2, 3, 4]
        assert [m["body"] for m in page["nodes"]] == [f"r{r} {node['id']}" for r in (1, 2, 3)]
        assert [m["seenByCount"] for m in page["nodes"]] == [0, 0, 0]
        assert page["pageInfo"]["hasPreviousPage"] is True

    assert len(large) <= SMALL, large
    assert len(large) == len(small), (small, large)


# ---------------------------------------------------------------- history

HISTORY = """
query($c: ID!, $n: Int!) {
  messages(conversationId: $c, last: $n) {
    nodes { seq seenByCount seen seenBy }
  }
}
"""


async def test_history_page_of_200_with_seen_fields_runs_as_many_statements_as_a_page_of_10(server, engine, client):
    members = [str(u) for u in range(2, 22)]  # seenBy is in text order: "10" before "2"
    (cid,) = await create_groups(client, 1, members, 1)
    await send_many(client, 1, cid, 250)
    for n, user in enumerate(members):  # watermarks spread over the history
        await mark_read_each(client, user, [cid], 60 + 10 * n)

    small, small_data = await statements_of(server, engine, client, HISTORY, {"c": cid, "n": 10}, user=1)
    large, large_data = await statements_of(server, engine, client, HISTORY, {"c": cid, "n": 200}, user=1)

    assert [m["seq"] for m in small_data["messages"]["nodes"]] == list(range(241, 251))
    nodes = large_data["messages"]["nodes"]
    assert [m["seq"] for m in nodes] == list(range(51, 251))
    watermarks = {user: 60 + 10 * n for n, user in enumerate(members)}
    for node in nodes:
        readers = sorted(u for u, w in watermarks.items() if w >= node["seq"])
        assert node["seenByCount"] == len(readers)
        assert node["seenBy"] == [str(u) for u in readers]
        assert node["seen"] is (len(readers) == len(members))

    assert len(large) <= SMALL, large
    assert len(large) == len(small), (small, large)


SYNC = """
query($cursors: [SyncCursor!]!) {
  sync(cursors: $cursors, limit: 5) { conversationId hasMore messages { seq seenByCount seen } }
}
"""


async def test_sync_runs_the_same_statements_for_5_and_50_cursors(server, engine, client):
    conversations = await create_groups(client, 1, [2], 50)
    await send_to_each(client, 2, conversations, rounds=2)

    def cursors(ids: list[str]) -> dict:
        return {"cursors": [{"conversationId": cid, "afterSeq": 0} for cid in ids]}

    small, _ = await statements_of(server, engine, client, SYNC, cursors(conversations[:5]), user=1)
    large, data = await statements_of(server, engine, client, SYNC, cursors(conversations), user=1)

    assert [r["conversationId"] for r in data["sync"]] == conversations
    assert all([m["seq"] for m in r["messages"]] == [1, 2] and not r["hasMore"] for r in data["sync"])
    assert len(large) <= SMALL, large
    assert len(large) == len(small), (small, large)


async def test_the_statement_counter_sees_the_requests_statements(server, engine, client):
    """The listener is on the engine the server really uses (else every count above would be 0)."""
    (cid,) = await create_groups(client, 1, [2], 1)
    statements, _ = await statements_of(server, engine, client, HISTORY, {"c": cid, "n": 10}, user=1)
    assert any("conversation" in s for s in statements), statements
    assert len(statements) >= 2
