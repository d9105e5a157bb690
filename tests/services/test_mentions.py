"""Mentions: sendMessage(mentions:) for members only, Message.mentions, Conversation.unreadMentions,
Viewer.totalUnreadMentions, and edits (editMessage(mentions:)) and deletes keeping them exact."""

from __future__ import annotations

import uuid

from chatgql import db
from chatgql.store import mentions
from tests.conftest import error_code
from tests.support.live import ChatApi

SEND = """
mutation($c: ID!, $m: UUID!, $b: String!, $mentions: [ID!]) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: $b, mentions: $mentions) {
    duplicate message { seq mentions } } }
"""
STATE = """
query($c: ID!) { conversation(id: $c) { lastSeq unreadMentions lastMessage { mentions } }
                 viewer { totalUnreadMentions } }
"""


async def send(api: ChatApi, user: int, cid: str, mentioned: list[int] | None, cmid: str | None = None) -> dict:
    variables = {
        "c": cid,
        "m": cmid or str(uuid.uuid4()),
        "b": "hey",
        "mentions": mentioned and [str(u) for u in mentioned],
    }
    return (await api.data(SEND, variables, user=user))["sendMessage"]


async def state(api: ChatApi, user: int, cid: str) -> tuple[int, int]:
    data = await api.data(STATE, {"c": cid}, user=user)
    return data["conversation"]["unreadMentions"], data["viewer"]["totalUnreadMentions"]


async def test_mentions_count_until_read_and_again_after_mark_unread(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2, 3])
    other = await api.create_group(1, [2])
    sent = await send(api, 1, cid, [3, 2])
    assert sent["message"]["mentions"] == ["2", "3"]
    await send(api, 1, cid, None)
    await send(api, 1, other, [2])
    assert await state(api, 2, cid) == (1, 2)
    assert await state(api, 1, cid) == (0, 0)  # the sender has read its own message
    await api.mark_read(2, cid, 2)
    assert await state(api, 2, cid) == (0, 1)
    await api.data("mutation($c: ID!) { markUnread(conversationId: $c, fromSeq: 1) { id } }", {"c": cid}, user=2)
    assert await state(api, 2, cid) == (1, 2)


async def test_a_mention_of_a_non_member_is_refused_and_nothing_is_stored(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2])
    body = await api.execute(SEND, {"c": cid, "m": str(uuid.uuid4()), "b": "x", "mentions": ["2", "9"]}, user=1)
    assert error_code(body["errors"][0]) == "BAD_USER_INPUT"
    assert body["errors"][0]["extensions"]["notMembers"] == ["9"]
    assert (await api.data(STATE, {"c": cid}, user=2))["conversation"]["lastSeq"] == 0
    bad = await api.execute(SEND, {"c": cid, "m": str(uuid.uuid4()), "b": "x", "mentions": ["nope"]}, user=1)
    assert error_code(bad["errors"][0]) == "BAD_USER_INPUT"
    too_many = [str(u) for u in range(1, server.settings.max_mentions + 2)]
    many = await api.execute(SEND, {"c": cid, "m": str(uuid.uuid4()), "b": "x", "mentions": too_many}, user=1)
    assert error_code(many["errors"][0]) == "LIMIT_EXCEEDED"


async def test_a_retry_keeps_the_original_mentions(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2, 3])
    cmid = str(uuid.uuid4())
    await send(api, 1, cid, [2], cmid)
    again = await send(api, 1, cid, [2], cmid)
    assert again["duplicate"] is True and again["message"]["mentions"] == ["2"]
    assert await state(api, 2, cid) == (1, 1)


async def test_muted_conversations_mentions_still_count(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2])
    await send(api, 1, cid, [2])
    await api.data("mutation($c: ID!) { updateMembership(conversationId: $c, muted: true) { id } }", {"c": cid}, user=2)
    assert await state(api, 2, cid) == (1, 1)
    totals = await api.data("{ viewer { totalUnread } }", user=2)
    assert totals["viewer"]["totalUnread"] == 0


async def test_edits_and_deletes_can_keep_the_counts_exact(server, http, migrated_url):
    """store.mentions.replace_txn / delete_txn, as message edits and deletes will call them."""
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2, 3])
    await send(api, 1, cid, [2])
    database = await db.Database(migrated_url, max_size=1).open()
    try:
        async with database.transaction() as conn:
            await mentions.replace_txn(conn, int(cid), 1, ["3"])  # edited: 2 mentioned no more, 3 now
        assert await state(api, 2, cid) == (0, 0)
        assert await state(api, 3, cid) == (1, 1)
        async with database.transaction() as conn:
            await mentions.delete_txn(conn, int(cid), [1])
        assert await state(api, 3, cid) == (0, 0)
    finally:
        await database.close()


async def test_an_everyone_mention_counts_for_each_member_and_is_for_a_groups_admins(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2, 3, 4])
    everyone = """
    mutation($c: ID!, $m: UUID!) {
      sendMessage(conversationId: $c, clientMsgId: $m, body: "@all", mentionEveryone: true) { message { seq mentions } }
    }"""
    refused = await api.error(everyone, {"c": cid, "m": str(uuid.uuid4())}, user=2)  # a MEMBER
    assert error_code(refused) == "FORBIDDEN" and refused["extensions"]["reason"] == "MENTION_EVERYONE_NOT_ALLOWED"
    assert (await api.data(STATE, {"c": cid}, user=3))["conversation"]["lastSeq"] == 0  # nothing stored
    role = 'mutation($c: ID!) { setMemberRole(conversationId: $c, userId: "2", role: ADMIN) { userId } }'
    await api.data(role, {"c": cid}, user=1)
    sent = (await api.data(everyone, {"c": cid, "m": str(uuid.uuid4())}, user=2))["sendMessage"]["message"]
    assert sent["mentions"] == ["1", "3", "4"]  # every member but the sender
    await send(api, 1, cid, [3])  # and a direct one
    assert await state(api, 3, cid) == (2, 2) and await state(api, 4, cid) == (1, 1)
    assert await state(api, 1, cid) == (0, 0)  # 1 sent after it: read
    assert await state(api, 2, cid) == (0, 0)
    direct = (await api.data('mutation { createDirectConversation(userId: "5") { id } }', user=1))[
        "createDirectConversation"
    ]["id"]
    dm = await api.error(everyone, {"c": direct, "m": str(uuid.uuid4())}, user=1)
    assert error_code(dm) == "BAD_USER_INPUT" and dm["extensions"]["reason"] == "MENTION_EVERYONE_IN_DIRECT"


EDIT = """
mutation($c: ID!, $s: Long!, $b: String!, $mentions: [ID!]) {
  editMessage(conversationId: $c, seq: $s, body: $b, mentions: $mentions) { changeSeq message { body mentions } } }
"""


async def edit(api: ChatApi, user: int, cid: str, seq: int, body: str, mentioned: list[int] | None) -> dict:
    variables = {"c": cid, "s": seq, "b": body, "mentions": None if mentioned is None else [str(u) for u in mentioned]}
    return (await api.data(EDIT, variables, user=user))["editMessage"]


async def test_an_edit_that_removes_a_mention_stops_it_counting_and_one_that_adds_it_counts(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2, 3])
    await send(api, 1, cid, [2])  # "@anna": the wrong one
    assert await state(api, 2, cid) == (1, 1) and await state(api, 3, cid) == (0, 0)
    fixed = await edit(api, 1, cid, 1, "@ana look", [3])
    assert fixed["message"] == {"body": "@ana look", "mentions": ["3"]} and fixed["changeSeq"] == 1
    assert await state(api, 2, cid) == (0, 0)
    assert await state(api, 3, cid) == (1, 1)
    kept = await edit(api, 1, cid, 1, "@ana look!", None)  # no mentions given: it keeps them
    assert kept["message"]["mentions"] == ["3"] and await state(api, 3, cid) == (1, 1)
    await api.mark_read(3, cid, 1)
    await edit(api, 1, cid, 1, "@ana @anna look!", [2, 3])  # 3 has read it; 2 has not
    assert await state(api, 3, cid) == (0, 0) and await state(api, 2, cid) == (1, 1)
    gone = await edit(api, 1, cid, 1, "look!", [])
    assert gone["message"]["mentions"] == [] and await state(api, 2, cid) == (0, 0)


async def test_an_edit_of_the_mentions_alone_is_a_change_and_the_same_again_is_none(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2])
    await send(api, 1, cid, None)
    first = await edit(api, 1, cid, 1, "hey", [2])  # the body it has, a mention more
    assert first["changeSeq"] == 1 and first["message"]["mentions"] == ["2"]
    assert await state(api, 2, cid) == (1, 1)
    again = await edit(api, 1, cid, 1, "hey", [2])
    assert again["changeSeq"] is None


async def test_an_edit_mentioning_a_non_member_is_refused_and_changes_nothing(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2])
    await send(api, 1, cid, [2])
    body = await api.execute(EDIT, {"c": cid, "s": 1, "b": "changed", "mentions": ["2", "9"]}, user=1)
    assert error_code(body["errors"][0]) == "BAD_USER_INPUT"
    assert body["errors"][0]["extensions"]["notMembers"] == ["9"]
    data = await api.data(
        "query($c: ID!) { conversation(id: $c) { lastMessage { body mentions } } }", {"c": cid}, user=1
    )
    assert data["conversation"]["lastMessage"] == {"body": "hey", "mentions": ["2"]}
    assert await state(api, 2, cid) == (1, 1)


async def test_an_edit_replaces_an_everyone_mention_too(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2, 3])
    everyone = 'mutation($c: ID!, $m: UUID!) { sendMessage(conversationId: $c, clientMsgId: $m, body: "@all", mentionEveryone: true) { message { seq } } }'
    await api.data(everyone, {"c": cid, "m": str(uuid.uuid4())}, user=1)
    assert await state(api, 2, cid) == (1, 1) and await state(api, 3, cid) == (1, 1)
    await edit(api, 1, cid, 1, "@bea only", [3])
    assert await state(api, 2, cid) == (0, 0) and await state(api, 3, cid) == (1, 1)
