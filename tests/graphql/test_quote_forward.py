"""Quotes (sendMessage(quote:), Message.quote) and forwards (forwardMessage): a quote shows the original as
each viewer may read it now (deleted, hidden history, left, banned, never a member), a forward is a new
message of its conversation marked forwarded that names nothing of the original; both idempotent on
clientMsgId, both live and in sync; and the plain send runs the one statement it ran before. Against the
session's chatgql and its PostgreSQL."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from ..conftest import error_code
from ..support.live import ChatApi, wait_active_subscriptions, ws_connect
from .test_query_count import counting_statements

SEND = """
mutation($c: ID!, $k: UUID!, $b: String!, $q: ID, $a: [AttachmentInput!]) {
  sendMessage(conversationId: $c, clientMsgId: $k, body: $b, quote: $q, attachments: $a) {
    duplicate message { id seq body forwarded quote { state message { seq body deletedAt } } }
  }
}
"""
FORWARD = """
mutation($m: ID!, $c: ID!, $k: UUID!) {
  forwardMessage(messageId: $m, conversationId: $c, clientMsgId: $k) {
    duplicate message { id conversationId seq body forwarded quote { state } attachments { url name } }
  }
}
"""
MESSAGE = """
query($c: ID!) {
  conversation(id: $c) { lastSeq messages(last: 1) { nodes { seq body forwarded quote { state message { conversationId seq body deletedAt } } } } }
}
"""
DELETE = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }"
EDIT = "mutation($c: ID!, $s: Long!, $b: String!) { editMessage(conversationId: $c, seq: $s, body: $b) { changeSeq } }"
HIDE = "mutation($c: ID!) { setHistoryVisibility(conversationId: $c, hideHistory: true) { hideHistory } }"
BAN = "mutation($c: ID!, $u: ID!) { banMember(conversationId: $c, userId: $u) { userId } }"
SYNC = """
query($cursors: [SyncCursor!]!) {
  sync(cursors: $cursors) { messages { seq forwarded quote { state message { seq } } } }
}
"""
NEW = """
subscription($c: ID) {
  messageNew(conversationId: $c) { seq message { seq body forwarded quote { state message { seq body } } } }
}
"""
MARK_READ_STATEMENTS = 1
FILE = {"url": "https://files.example/a.png", "mimeType": "image/png", "name": "a.png", "sizeBytes": 10}


async def send(api: ChatApi, user: int, cid: str, body: str, quote: str | None = None, key: str | None = None) -> dict:
    variables = {"c": cid, "k": key or str(uuid.uuid4()), "b": body, "q": quote}
    return (await api.data(SEND, variables, user=user))["sendMessage"]


async def message_id(api: ChatApi, user: int, cid: str, body: str) -> str:
    return (await send(api, user, cid, body))["message"]["id"]


async def last(api: ChatApi, user: int, cid: str) -> dict:
    return (await api.data(MESSAGE, {"c": cid}, user=user))["conversation"]["messages"]["nodes"][-1]


async def count(engine, sql: str) -> int:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql))).scalar()


async def test_a_quote_shows_the_original_to_who_reads_it_and_nothing_to_who_does_not(api):
    source = await api.create_group(1, [2, 3])  # 1, 2, 3 read the source
    target = await api.create_group(1, [2, 4, 5])  # 4 and 5 never were in the source
    original = await message_id(api, 3, source, "the original")
    quoting = await send(api, 1, target, "look", quote=original)
    assert quoting["message"]["quote"] == {
        "state": "VISIBLE",
        "message": {"seq": 1, "body": "the original", "deletedAt": None},
    }
    seen = {u: (await last(api, u, target))["quote"] for u in (1, 2, 4)}
    assert seen[1] == seen[2] and seen[2]["state"] == "VISIBLE" and seen[2]["message"]["conversationId"] == source
    assert seen[4] == {"state": "UNAVAILABLE", "message": None}  # not told which conversation, seq or body
    await api.remove_member(2, source, 2)  # 2 leaves the source: the quote closes to them
    assert (await last(api, 2, target))["quote"] == {"state": "UNAVAILABLE", "message": None}
    await api.data(BAN, {"c": source, "u": "3"}, user=1)  # a ban removes: the author no longer reads it either
    await api.add_members(1, target, [3])
    assert (await last(api, 3, target))["quote"] == {"state": "UNAVAILABLE", "message": None}
    await api.data(DELETE, {"c": source, "s": 1}, user=1)  # deleted: a tombstone, to those who read it
    deleted = (await last(api, 1, target))["quote"]
    assert deleted["state"] == "DELETED" and deleted["message"]["body"] == "" and deleted["message"]["deletedAt"]
    assert (await last(api, 4, target))["quote"] == {"state": "UNAVAILABLE", "message": None}


async def test_a_quote_of_history_hidden_from_a_late_joiner_is_unavailable_to_them(api):
    cid = await api.create_group(1, [2])
    await api.data(HIDE, {"c": cid}, user=1)
    early = await message_id(api, 2, cid, "before the join")
    await api.add_members(1, cid, [3])  # 3 reads from the next seq on
    await send(api, 1, cid, "about that", quote=early)
    assert (await last(api, 2, cid))["quote"]["state"] == "VISIBLE"
    assert (await last(api, 3, cid))["quote"] == {"state": "UNAVAILABLE", "message": None}
    # 3 may not quote it either: as if it did not exist, and nothing is stored
    refused = await api.error(SEND, {"c": cid, "k": str(uuid.uuid4()), "b": "x", "q": early}, user=3)
    assert error_code(refused) == "BAD_USER_INPUT" and refused["extensions"]["reason"] == "QUOTE_NOT_FOUND"
    assert (await api.data(MESSAGE, {"c": cid}, user=1))["conversation"]["lastSeq"] == 2


async def test_who_may_quote_member_other_user_anonymous_and_what_a_refusal_leaves(api, engine):
    source = await api.create_group(1, [2])
    target = await api.create_group(5, [1, 6])
    original = await message_id(api, 2, source, "secret")
    messages = await count(engine, "SELECT count(*) FROM message")
    for user, quote in ((6, original), (1, "not-an-id")):  # 6 does not read the source; a bad id
        refused = await api.error(SEND, {"c": target, "k": str(uuid.uuid4()), "b": "x", "q": quote}, user=user)
        assert error_code(refused) == "BAD_USER_INPUT", refused
    await api.data(DELETE, {"c": source, "s": 1}, user=2)
    deleted = await api.error(SEND, {"c": target, "k": str(uuid.uuid4()), "b": "x", "q": original}, user=1)
    assert deleted["extensions"]["reason"] == "QUOTE_NOT_FOUND"
    other = await api.error(SEND, {"c": source, "k": str(uuid.uuid4()), "b": "x", "q": original}, user=9)
    assert error_code(other) == "NOT_FOUND"  # a conversation the caller is not in
    anonymous = await api.error(SEND, {"c": target, "k": str(uuid.uuid4()), "b": "x", "q": original})
    assert error_code(anonymous) == "UNAUTHENTICATED"
    assert await count(engine, "SELECT count(*) FROM message") == messages


async def test_a_quote_send_is_idempotent_on_its_client_msg_id(api):
    cid = await api.create_group(1, [2])
    original = await message_id(api, 2, cid, "o")
    key = str(uuid.uuid4())
    first = await send(api, 1, cid, "q", quote=original, key=key)
    again = await send(api, 1, cid, "q", quote=original, key=key)
    assert (first["duplicate"], again["duplicate"]) == (False, True)
    assert again["message"] == first["message"]


async def test_a_forward_is_a_new_marked_message_naming_nothing_of_the_original(api, engine):
    source = await api.create_group(1, [2])
    target = await api.create_group(1, [3])
    quoted = await message_id(api, 2, source, "quoted")
    with_file = await api.data(
        SEND, {"c": source, "k": str(uuid.uuid4()), "b": "see file", "q": quoted, "a": [FILE]}, user=2
    )
    original = with_file["sendMessage"]["message"]["id"]
    key = str(uuid.uuid4())
    forwarded = (await api.data(FORWARD, {"m": original, "c": target, "k": key}, user=1))["forwardMessage"]
    assert forwarded["duplicate"] is False
    assert forwarded["message"] | {"id": None} == {
        "id": None,
        "conversationId": target,
        "seq": 1,
        "body": "see file",
        "forwarded": True,
        "quote": None,  # no link back: not even the quote it carried
        "attachments": [{"url": FILE["url"], "name": "a.png"}],
    }
    assert (await last(api, 3, target))["forwarded"] is True
    stored = await count(
        engine, f"SELECT count(*) FROM message WHERE conversation_id = {target} AND quote_conversation_id IS NOT NULL"
    )
    assert stored == 0
    # a retry answers the stored forward, whatever became of the original since
    await api.data(EDIT, {"c": source, "s": 2, "b": "edited"}, user=2)
    await api.data(DELETE, {"c": source, "s": 2}, user=2)
    again = (await api.data(FORWARD, {"m": original, "c": target, "k": key}, user=1))["forwardMessage"]
    assert again["duplicate"] is True and again["message"]["seq"] == 1 and again["message"]["body"] == "see file"
    assert (await api.data(MESSAGE, {"c": target}, user=1))["conversation"]["lastSeq"] == 1
    node = "query($id: ID!) { node(id: $id) { id ... on Message { body forwarded } } }"
    copy_id = forwarded["message"]["id"]
    assert (await api.data(node, {"id": copy_id}, user=3))["node"]["forwarded"] is True  # a member of the target
    assert (await api.data(node, {"id": copy_id}, user=2))["node"] is None  # not in the target: its id opens nothing
    assert error_code(await api.error(node, {"id": copy_id})) == "UNAUTHENTICATED"


async def test_who_may_forward_and_what_a_refusal_leaves(api, engine):
    source = await api.create_group(1, [2])
    target = await api.create_group(1, [3])
    original = await message_id(api, 2, source, "o")
    used = str(uuid.uuid4())
    await send(api, 1, target, "plain", key=used)
    messages = await count(engine, "SELECT count(*) FROM message")
    refusals = [
        (3, original, target, "NOT_FOUND"),  # 3 does not read the source
        (2, original, target, "NOT_FOUND"),  # 2 is not a member of the target
        (9, original, target, "NOT_FOUND"),  # another user
        (None, original, target, "UNAUTHENTICATED"),
        (1, "nope", target, "BAD_USER_INPUT"),
    ]
    for user, mid, cid, code in refusals:
        refused = await api.error(FORWARD, {"m": mid, "c": cid, "k": str(uuid.uuid4())}, user=user)
        assert error_code(refused) == code, (user, refused)
    conflict = await api.error(FORWARD, {"m": original, "c": target, "k": used}, user=1)
    assert error_code(conflict) == "CONFLICT"  # that clientMsgId holds a plain message
    await api.data(DELETE, {"c": source, "s": 1}, user=2)
    deleted = await api.error(FORWARD, {"m": original, "c": target, "k": str(uuid.uuid4())}, user=1)
    assert error_code(deleted) == "CONFLICT" and deleted["extensions"]["reason"] == "MESSAGE_DELETED"
    assert await count(engine, "SELECT count(*) FROM message") == messages


async def test_quotes_and_forwards_reach_live_subscribers_and_sync_as_each_viewer_may_read_them(server, api):
    source = await api.create_group(1, [2])
    target = await api.create_group(1, [2, 3])
    original = await message_id(api, 2, source, "o")
    reader, outsider = await ws_connect(server, 2), await ws_connect(server, 3)
    try:
        ops = [await reader.subscribe(NEW, {"c": target}), await outsider.subscribe(NEW, {"c": target})]
        await wait_active_subscriptions(server, 2)
        await send(api, 1, target, "q", quote=original)
        await api.data(FORWARD, {"m": original, "c": target, "k": str(uuid.uuid4())}, user=1)
        got = [[event["messageNew"]["message"] for event in await op.collect(2)] for op in ops]
    finally:
        await reader.close()
        await outsider.close()
    visible = {"state": "VISIBLE", "message": {"seq": 1, "body": "o"}}
    assert got[0] == [
        {"seq": 1, "body": "q", "forwarded": False, "quote": visible},
        {"seq": 2, "body": "o", "forwarded": True, "quote": None},
    ]
    assert got[1][0]["quote"] == {"state": "UNAVAILABLE", "message": None}
    assert got[1][1]["forwarded"] is True
    cursors = [{"conversationId": target, "afterSeq": 0}]
    synced = {u: (await api.data(SYNC, {"cursors": cursors}, user=u))["sync"][0]["messages"] for u in (2, 3)}
    assert synced[2] == [
        {"seq": 1, "forwarded": False, "quote": {"state": "VISIBLE", "message": {"seq": 1}}},
        {"seq": 2, "forwarded": True, "quote": None},
    ]
    assert synced[3][0]["quote"] == {"state": "UNAVAILABLE", "message": None}


async def test_the_plain_send_and_mark_read_run_the_statements_they_ran_before(server, api):
    """A send with neither quote nor forward takes the path it took before them: the one chat_send statement (a
    quote or a forward takes the send's transaction with its extras, never this path); markRead its one
    statement. Counted on the server's pool (the same counts on the code before quotes, forwards and saves)."""
    cid = await api.create_group(1, [2])
    await api.send(2, cid, "to read")
    with counting_statements(server) as plain:
        await api.send(1, cid, "plain")
    with counting_statements(server) as read:
        await api.mark_read(2, cid, 2)
    assert len(plain) == 1 and "chat_send" in plain[0], plain
    assert len(read) == MARK_READ_STATEMENTS, read
    assert not [s for s in plain + read if "saved" in s or "quote" in s or "forwarded" in s]
