"""The fast paths' switches (settings: prebuilt_pages, prepared_documents, park_subscriptions,
shared_event_results), which bench/fastpaths.py turns off one at a time to measure each against
the plain path: off, each path is really left out, and the answers stay the same."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import UTC, datetime, timedelta

from chatgql.graphql.prebuilt import INBOX_NODE
from chatgql.graphql.types import Conversation, Message

from ..conftest import GraphQLClient, RunningServer, make_settings
from ..support.live import MESSAGE_NEW, ChatApi, subscribe_messages, wait_active_subscriptions, wait_until, ws_connect

INBOX = (
    "query { inbox(first: 20) { nodes { id title unreadCount lastMessage { seq senderId body createdAt } } "
    "pageInfo { hasNextPage endCursor } } }"
)


async def _inbox_twice(client: GraphQLClient, query: str, user: int) -> dict:
    first = await client.data(query, user=user)
    second = await client.data(query, user=user)  # an accepted document: the fast paths' way, if on
    assert first == second
    return second


async def _user_with_an_inbox(client: GraphQLClient) -> int:
    user = 7_000 + uuid.uuid4().int % 1_000_000
    for i in range(3):
        data = await client.data(
            "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }",
            {"t": f"switches {i}", "m": ["2"]},
            user=user,
        )
        cid = data["createGroup"]["id"]
        await client.data(
            'mutation($c: ID!, $k: UUID!) { sendMessage(conversationId: $c, clientMsgId: $k, body: "hi") '
            "{ duplicate } }",
            {"c": cid, "k": str(uuid.uuid4())},
            user=user,
        )
    return user


async def test_an_inbox_page_answers_alike_with_prebuilt_pages_or_prepared_documents_off(
    server, client, migrated_url, http
):
    user = await _user_with_an_inbox(client)
    query = f"# {uuid.uuid4()}\n{INBOX}"
    prebuilt_before = server.app.graphql.planner.stats.prebuilt
    fast = await _inbox_twice(client, query, user)
    assert server.app.graphql.planner.stats.prebuilt == prebuilt_before + 1  # the session's server prebuilt it
    assert len(fast["inbox"]["nodes"]) == 3

    settings = make_settings(migrated_url, run_relay=False, prebuilt_pages=False)
    async with RunningServer(settings) as no_prebuilt:
        other = GraphQLClient(http, no_prebuilt.url, no_prebuilt.settings)
        assert await _inbox_twice(other, query, user) == fast
        stats = no_prebuilt.app.graphql.planner.stats
        assert (stats.executions, stats.prebuilt) == (1, 0)  # planned, nothing prebuilt

    settings = make_settings(migrated_url, run_relay=False, prepared_documents=False)
    async with RunningServer(settings) as plain:
        other = GraphQLClient(http, plain.url, plain.settings)
        assert await _inbox_twice(other, query, user) == fast
        assert query not in plain.app.graphql.accepted  # Strawberry's whole way, every time
        assert plain.app.graphql.planner.stats.executions == 0


# Every field an inbox node's JSON shape answers (graphql/prebuilt.py INBOX_NODE: a new field is in it, and so
# compared here, with no change to this test), under nodes and edges { node }; and the plain ones alone (the
# page without the membership's settings columns or the last message's lifecycle ones), and the two mixed.
_MESSAGE_SHAPE = INBOX_NODE.objects["lastMessage"]
ALL_CONVERSATION = " ".join(["__typename", *INBOX_NODE.values])
ALL_MESSAGE = " ".join(["__typename", *_MESSAGE_SHAPE.values])
PLAIN_CONVERSATION = " ".join(name for name in INBOX_NODE.values if name in Conversation.PLAIN_FIELDS)
PLAIN_MESSAGE = " ".join(name for name in _MESSAGE_SHAPE.values if name in Message.PLAIN_FIELDS)
SHAPED_INBOXES = [
    f"{{ nodes {{ {ALL_CONVERSATION} lastMessage {{ {ALL_MESSAGE} }} }}"
    f" edges {{ cursor node {{ {ALL_CONVERSATION} lastMessage {{ {ALL_MESSAGE} }} }} }} pageInfo {{ endCursor }} }}",
    f"{{ nodes {{ {PLAIN_CONVERSATION} lastMessage {{ {PLAIN_MESSAGE} }} }} }}",
    f"{{ edges {{ node {{ {PLAIN_CONVERSATION} lastMessage {{ {ALL_MESSAGE} }} }} }} }}",
    f"{{ nodes {{ {ALL_CONVERSATION} lastMessage {{ {PLAIN_MESSAGE} }} }} }}",
]
TRICKY = 'quote " back \\ slash\nnew line\ttab \x01 control, 😀 emoji, \u2028 line separator, </script>'
SEND = (
    "mutation($c: ID!, $k: UUID!, $b: String!, $r: ID, $a: [AttachmentInput!], $m: [ID!]) { sendMessage("
    "conversationId: $c, clientMsgId: $k, body: $b, replyTo: $r, attachments: $a, mentions: $m) { message { id } } }"
)
MEMBERSHIP = (
    "mutation($c: ID!, $mu: Boolean, $until: DateTime, $ar: Boolean, $keep: Boolean, $pin: Boolean, $pr: Boolean) {"
    " updateMembership(conversationId: $c, muted: $mu, mutedUntil: $until, archived: $ar, keepArchived: $keep,"
    " pinned: $pin, privateReceipts: $pr) { id } }"
)


async def _inbox_of_every_kind(server, client: GraphQLClient) -> int:
    """A viewer whose inbox shows every optional field set, and each timestamp both on a whole second
    and not: a group whose last message is an edited reply (attachments, mentions, a reaction, a tricky
    body) with replies of its own, muted until a time, pinned, private receipts, slow mode, hidden history and
    the viewer's rewind (markUnread); a DIRECT chat (no title) whose last message another member deleted, archived and kept so,
    its mute expired; a group without messages, muted with no end, keepArchived but not archived."""
    viewer = 7_000 + uuid.uuid4().int % 1_000_000
    other = viewer + 1

    async def do(query: str, user: int, **variables: object) -> dict:
        return await client.data(query, variables, user=user)

    async def send(cid: str, user: int, body: str, **extra: object) -> str:
        data = await do(SEND, user, c=cid, k=str(uuid.uuid4()), b=body, **extra)
        return data["sendMessage"]["message"]["id"]

    group = "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }"
    lived = (await do(group, viewer, t=f"every field {TRICKY}", m=[str(other)]))["createGroup"]["id"]
    first = await send(lived, other, "first")
    image = {"url": "https://files.example/a.png", "mimeType": "image/png", "name": "a.png", "sizeBytes": 2048}
    await send(lived, viewer, "a reply", r=first, a=[image], m=[str(other)])
    edit = (
        "mutation($c: ID!, $s: Long!, $v: String!) { editMessage(conversationId: $c, seq: $s, body: $v) { changeSeq } }"
    )
    await do(edit, viewer, c=lived, s=2, v=TRICKY)
    react = 'mutation($c: ID!, $s: Long!) { addReaction(conversationId: $c, seq: $s, emoji: "👍") { changeSeq } }'
    await do(react, other, c=lived, s=2)
    await do("mutation($c: ID!) { markUnread(conversationId: $c, fromSeq: 1) { id } }", viewer, c=lived)
    until = (datetime.now(UTC) + timedelta(days=400)).isoformat()
    await do(MEMBERSHIP, viewer, c=lived, mu=True, until=until, pin=True, pr=True)
    await do("mutation($c: ID!) { setSlowMode(conversationId: $c, seconds: 30) { id } }", viewer, c=lived)
    await do(
        "mutation($c: ID!) { setHistoryVisibility(conversationId: $c, hideHistory: true) { id } }", viewer, c=lived
    )

    direct = "mutation($u: ID!) { createDirectConversation(userId: $u) { id } }"
    gone = (await do(direct, viewer, u=str(other)))["createDirectConversation"]["id"]
    await send(gone, viewer, "kept")
    await send(gone, other, "gone")
    await do("mutation($c: ID!) { deleteMessage(conversationId: $c, seq: 2) { changeSeq } }", other, c=gone)
    await do(MEMBERSHIP, viewer, c=gone, ar=True, keep=True)

    empty = (await do(group, viewer, t="empty", m=[str(other)]))["createGroup"]["id"]
    await do(MEMBERSHIP, viewer, c=empty, mu=True)

    async with server.runtime.deps.database.connection() as conn:
        # Replies to the last message (a state the API gives only to an earlier message: the inbox shows the
        # last), on a whole second; and whole seconds for the tombstone's times and the empty group's.
        await conn.execute(
            "UPDATE message SET reply_count = 2, last_reply_at = date_trunc('second', now())"
            " WHERE conversation_id = $1 AND seq = 2",
            int(lived),
        )
        await conn.execute(
            "UPDATE message SET created_at = date_trunc('second', created_at),"
            " deleted_at = date_trunc('second', deleted_at) WHERE conversation_id = $1 AND seq = 2",
            int(gone),
        )
        await conn.execute(
            "UPDATE conversation SET created_at = date_trunc('second', created_at) WHERE id = $1", int(empty)
        )
        # What the membership's settings hold but the answer hides: an expired mute, keepArchived while not archived.
        membership = "UPDATE conversation_member SET {} WHERE conversation_id = $1 AND user_id = $2"
        await conn.execute(
            membership.format("muted = true, muted_until = now() - interval '1 day'"), int(gone), str(viewer)
        )
        await conn.execute(membership.format("keep_archived = true"), int(empty), str(viewer))
    return viewer


_JSON_SPACE = re.compile(rb'("(?:[^"\\]|\\.)*")|\s+')


def _json_tokens(body: bytes) -> bytes:
    """The answer's bytes without the whitespace between JSON tokens (the nodes PostgreSQL built keep its
    json_build_object spacing, ' : ' and ', '): every key, string (escapes included) and number as written."""
    return _JSON_SPACE.sub(lambda match: match.group(1) or b"", body)


async def test_an_inbox_with_every_field_set_answers_the_same_json_with_prebuilt_pages_on_and_off(
    server, client, migrated_url, http
):
    viewer = await _inbox_of_every_kind(server, client)
    queries = [
        f"# {uuid.uuid4()}\nquery {{ inbox(first: 10, filter: {{archived: null}}) {s} }}" for s in SHAPED_INBOXES
    ]
    fast = {}
    for query in queries:
        before = server.app.graphql.planner.stats.prebuilt
        fast[query] = [await client.raw(query, user=viewer) for _ in range(2)]  # the second: by the plan
        assert server.app.graphql.planner.stats.prebuilt == before + 1, query
    answer = json.loads(fast[queries[0]][1].content)["data"]["inbox"]
    assert len(answer["nodes"]) == 3
    # every field set (not null, false, 0 or empty) in some node, and the last message of one node null
    conversations = {key for node in answer["nodes"] for key, value in node.items() if value not in (None, False, 0)}
    messages = [node["lastMessage"] for node in answer["nodes"]]
    assert set(conversations) == set(ALL_CONVERSATION.split()) | {"lastMessage"}
    assert {key for m in messages if m for key, value in m.items() if value not in (None, False, 0, "")} == set(
        ALL_MESSAGE.split()
    )
    assert None in messages

    settings = make_settings(migrated_url, run_relay=False, prebuilt_pages=False)
    async with RunningServer(settings) as no_prebuilt:
        other = GraphQLClient(http, no_prebuilt.url, no_prebuilt.settings)
        for query in queries:
            for i, built in enumerate(fast[query]):
                plain = await other.raw(query, user=viewer)
                assert plain.status_code == built.status_code == 200
                assert "errors" not in json.loads(plain.content), plain.content
                assert _json_tokens(plain.content) == _json_tokens(built.content), (query, i)
        assert no_prebuilt.app.graphql.planner.stats.prebuilt == 0


def _operation_tasks() -> int:
    names = {"run_operation", "handle_async_results"}
    return sum(1 for task in asyncio.all_tasks() if getattr(task.get_coro(), "__name__", None) in names)


async def test_with_parking_and_sharing_off_a_message_new_subscription_keeps_its_task(migrated_url, http):
    settings = make_settings(migrated_url, run_relay=False, park_subscriptions=False, shared_event_results=False)
    async with RunningServer(settings) as quiet:
        assert quiet.app.graphql.schema.sharing is None
        api = ChatApi.of(quiet, http)
        cid = await api.create_group(1, [2])
        for _ in range(2):  # the second subscriber of an accepted document is the one that would park
            idle = _operation_tasks()
            async with await ws_connect(quiet, 2) as ws:
                op = await subscribe_messages(ws, cid)
                await wait_active_subscriptions(quiet, 1)
                await wait_until(lambda idle=idle: _operation_tasks() == idle + 1, 10, "its task")
                await op.stop()
                await wait_active_subscriptions(quiet, 0)
        assert MESSAGE_NEW in quiet.app.graphql.accepted
