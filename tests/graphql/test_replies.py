"""Replies: sendMessage(replyTo:) quotes an earlier message of the same conversation (its tombstone once
deleted), counts on it (replyCount, lastReplyAt) in the send's transaction, and pages its replies;
replying across conversations is a coded error that writes nothing. Against the session's chatgql."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from ..conftest import error_code
from ..support.live import ChatApi, wait_active_subscriptions, ws_connect

REPLY = """
mutation($c: ID!, $m: UUID!, $b: String!, $r: ID) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: $b, replyTo: $r) {
    duplicate message { id seq replyTo { seq body deletedAt } }
  }
}
"""
THREAD = """
query($c: ID!, $after: String) {
  messages(conversationId: $c, first: 1) {
    nodes { id replyCount lastReplyAt replies(first: 2, after: $after) { seq body replyTo { seq } } }
  }
}
"""


async def message_id(api: ChatApi, user: int, cid: str, seq: int) -> str:
    data = await api.data(
        "query($c: ID!, $a: String!) { messages(conversationId: $c, after: $a, first: 1) { nodes { id } } }",
        {"c": cid, "a": str(seq - 1)},
        user=user,
    )
    return data["messages"]["nodes"][0]["id"]


async def reply(api: ChatApi, user: int, cid: str, to: str, body: str, cmid: str | None = None) -> dict:
    variables = {"c": cid, "m": cmid or str(uuid.uuid4()), "b": body, "r": to}
    return (await api.data(REPLY, variables, user=user))["sendMessage"]


async def test_a_reply_quotes_counts_and_pages_and_a_retry_counts_once(api):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "root")
    root = await message_id(api, 1, cid, 1)
    first = await reply(api, 2, cid, root, "r1", cmid="00000000-0000-4000-8000-00000000a001")
    assert first["message"]["seq"] == 2 and first["message"]["replyTo"] == {"seq": 1, "body": "root", "deletedAt": None}
    again = await reply(api, 2, cid, root, "r1", cmid="00000000-0000-4000-8000-00000000a001")
    assert again["duplicate"] is True
    await api.send(1, cid, "not a reply")
    await reply(api, 1, cid, root, "r2")
    await reply(api, 2, cid, root, "r3")
    node = (await api.data(THREAD, {"c": cid}, user=2))["messages"]["nodes"][0]
    assert node["replyCount"] == 3 and node["lastReplyAt"] is not None  # the retry counted once
    assert [(r["seq"], r["body"]) for r in node["replies"]] == [(2, "r1"), (4, "r2")]
    rest = (await api.data(THREAD, {"c": cid, "after": "4"}, user=2))["messages"]["nodes"][0]["replies"]
    assert [r["seq"] for r in rest] == [5]
    # a deleted reply stops counting; lastReplyAt follows the newest reply left; its tombstone stays listed
    delete = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }"
    await api.data(delete, {"c": cid, "s": 5}, user=2)
    left = (await api.data(THREAD, {"c": cid, "after": "4"}, user=2))["messages"]["nodes"][0]
    assert left["replyCount"] == 2 and left["lastReplyAt"] is not None and left["lastReplyAt"] != node["lastReplyAt"]
    assert [(r["seq"], r["body"]) for r in left["replies"]] == [(5, "")]
    assert error_code(await api.error(delete, {"c": cid, "s": 5}, user=2)) == "CONFLICT"  # counted off once
    for seq in (2, 4):
        await api.data(delete, {"c": cid, "s": seq}, user=1)
    gone = (await api.data(THREAD, {"c": cid}, user=2))["messages"]["nodes"][0]
    assert (gone["replyCount"], gone["lastReplyAt"]) == (0, None)


async def test_a_reply_to_a_deleted_message_quotes_its_tombstone(api):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "soon gone")
    root = await message_id(api, 1, cid, 1)
    await api.data("mutation($c: ID!) { deleteMessage(conversationId: $c, seq: 1) { changeSeq } }", {"c": cid}, user=1)
    quoted = (await reply(api, 2, cid, root, "what was it?"))["message"]["replyTo"]
    assert quoted["seq"] == 1 and quoted["body"] == "" and quoted["deletedAt"] is not None


async def test_replying_across_conversations_or_to_nothing_is_a_coded_error_that_writes_nothing(api, engine):
    one = await api.create_group(1, [2])
    other = await api.create_group(1, [2])
    await api.send(1, other, "elsewhere")
    elsewhere = await message_id(api, 1, other, 1)
    error = await api.error(REPLY, {"c": one, "m": str(uuid.uuid4()), "b": "x", "r": elsewhere}, user=1)
    assert error_code(error) == "BAD_USER_INPUT" and error["extensions"]["reason"] == "REPLY_ACROSS_CONVERSATIONS"
    await api.send(1, one, "only")
    from chatgql.graphql.ids import message_id as make_id

    error = await api.error(REPLY, {"c": one, "m": str(uuid.uuid4()), "b": "x", "r": make_id(int(one), 7)}, user=1)
    assert error_code(error) == "BAD_USER_INPUT"
    error = await api.error(REPLY, {"c": one, "m": str(uuid.uuid4()), "b": "x", "r": "nonsense"}, user=1)
    assert error_code(error) == "BAD_USER_INPUT"
    async with engine.connect() as conn:
        last = (await conn.execute(text("SELECT last_seq FROM conversation WHERE id = :c"), {"c": int(one)})).scalar()
        assert last == 1  # the refused reply took no seq: its transaction rolled back


async def test_a_live_reply_carries_what_it_quotes(server, api):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "root")
    root = await message_id(api, 1, cid, 1)
    async with await ws_connect(server, 2) as ws:
        op = await ws.subscribe("subscription { messageNew { seq message { replyTo { seq body } } } }", {})
        await wait_active_subscriptions(server, 1)
        await reply(api, 1, cid, root, "live reply")
        event = (await op.next())["messageNew"]
    assert event == {"seq": 2, "message": {"replyTo": {"seq": 1, "body": "root"}}}
