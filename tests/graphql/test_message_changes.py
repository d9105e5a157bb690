"""editMessage and deleteMessage with the change cursor: over HTTP and websockets against the session's
chatgql (real PostgreSQL; outbox -> relay -> bus -> dispatcher), the tables inspected with SQL.

Changes never take a message seq: each takes the conversation's next change seq (gap-free), logged in
message_change; unread counts exclude deleted messages the viewer had not read, kept by counters on
write (the statement test below: no COUNT over history).
"""

from __future__ import annotations

import asyncio
import uuid

from sqlalchemy import text

from chatgql import db
from chatgql.services.groupcommit import MESSAGE_KEYS, READ_KEYS
from chatgql.store import messages

from ..conftest import error_code
from ..support.live import ChatApi, wait_active_subscriptions, ws_connect

EDIT = """
mutation($c: ID!, $s: Long!, $b: String!) {
  editMessage(conversationId: $c, seq: $s, body: $b) {
    changeSeq message { id seq body editedAt deletedAt editHistory { body changeSeq } }
  }
}
"""
DELETE = """
mutation($c: ID!, $s: Long!) {
  deleteMessage(conversationId: $c, seq: $s) { changeSeq message { id seq body deletedAt deletedBy editHistory { body } } }
}
"""
CONVERSATION = "query($c: ID!) { conversation(id: $c) { lastSeq lastChangeSeq unreadCount lastReadSeq } }"
TOTALS = "{ viewer { totalUnread unreadConversations } }"
INBOX = "{ inbox(first: 10) { nodes { id unreadCount lastMessage { seq body deletedAt deletedBy } } } }"
SYNC = """
query($cursors: [SyncCursor!]!) {
  sync(cursors: $cursors) {
    conversationId lastSeq lastChangeSeq changesHaveMore changesTooLong
    messages { seq body }
    changes { changeSeq kind seq changedBy message { id body editedAt deletedAt } }
  }
}
"""
CHANGED = """
subscription($c: ID, $cursors: [ChangeCursor!]) {
  messageChanged(conversationId: $c, cursors: $cursors) {
    conversationId changeSeq kind seq changedBy message { id seq body editedAt deletedAt deletedBy }
  }
}
"""


async def edit(api: ChatApi, user: int, cid: str, seq: int, body: str) -> dict:
    return (await api.data(EDIT, {"c": cid, "s": seq, "b": body}, user=user))["editMessage"]


async def delete(api: ChatApi, user: int, cid: str, seq: int) -> dict:
    return (await api.data(DELETE, {"c": cid, "s": seq}, user=user))["deleteMessage"]


async def conversation(api: ChatApi, user: int, cid: str) -> dict:
    return (await api.data(CONVERSATION, {"c": cid}, user=user))["conversation"]


async def test_an_edit_keeps_the_seq_takes_a_change_seq_and_keeps_the_history(api):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "first")
    await api.send(2, cid, "other")
    before = await conversation(api, 2, cid)
    changed = await edit(api, 1, cid, 1, "second")
    assert changed["changeSeq"] == 1
    assert changed["message"]["seq"] == 1 and changed["message"]["body"] == "second"
    assert changed["message"]["editedAt"] is not None
    again = await edit(api, 1, cid, 1, "third")
    assert again["changeSeq"] == 2
    assert [e["body"] for e in again["message"]["editHistory"]] == ["first", "second"]
    # the same body again: nothing changes, no change seq taken
    same = await edit(api, 1, cid, 1, "third")
    assert same["changeSeq"] is None
    after = await conversation(api, 2, cid)
    assert after["lastSeq"] == before["lastSeq"] == 2  # no message seq taken
    assert after["lastChangeSeq"] == 2
    assert after["unreadCount"] == before["unreadCount"]  # an edit never changes unread
    # any member reads the history
    data = await api.data(
        "query($c: ID!) { messages(conversationId: $c, first: 1) { nodes { body editHistory { body } } } }",
        {"c": cid},
        user=2,
    )
    assert data["messages"]["nodes"][0]["editHistory"] == [{"body": "first"}, {"body": "second"}]


async def test_editing_someone_elses_message_or_a_tombstone_is_a_coded_error_and_writes_nothing(api, engine):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "mine")
    error = await api.error(EDIT, {"c": cid, "s": 1, "b": "x"}, user=2)
    assert error_code(error) == "FORBIDDEN"
    assert error_code(await api.error(EDIT, {"c": cid, "s": 9, "b": "x"}, user=1)) == "NOT_FOUND"
    assert error_code(await api.error(EDIT, {"c": cid, "s": 1, "b": "x"}, user=3)) == "NOT_FOUND"  # not a member
    assert error_code(await api.error(EDIT, {"c": cid, "s": -1, "b": "x"}, user=1)) == "BAD_USER_INPUT"
    await delete(api, 1, cid, 1)
    assert error_code(await api.error(EDIT, {"c": cid, "s": 1, "b": "x"}, user=1)) == "CONFLICT"
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM message_change"))).scalar() == 1
        assert (await conn.execute(text("SELECT last_change_seq FROM conversation"))).scalar() == 1


async def test_a_delete_leaves_a_tombstone_erases_the_content_and_fixes_unread_counts(api, engine):
    cid = await api.create_group(1, [2, 3])
    for i in range(1, 5):
        await api.send(1, cid, f"m{i}")
    await edit(api, 1, cid, 2, "m2 edited")
    await api.mark_read(3, cid, 3)  # user 3 has read 1..3, user 2 nothing
    assert (await conversation(api, 2, cid))["unreadCount"] == 4
    gone = await delete(api, 1, cid, 2)
    assert gone["changeSeq"] == 2
    tomb = gone["message"]
    assert tomb["seq"] == 2 and tomb["body"] == "" and tomb["deletedAt"] and tomb["deletedBy"] == "1"
    assert tomb["editHistory"] == []
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT body, deleted_by FROM message WHERE conversation_id = :c AND seq = 2"), {"c": int(cid)}
            )
        ).one()
        assert tuple(row) == ("", "1")
        assert (await conn.execute(text("SELECT count(*) FROM message_edit"))).scalar() == 0  # erased, not hidden
    # user 2 had not read it: 3 unread now; user 3 had: still 1 (seq 4)
    c2, c3 = await conversation(api, 2, cid), await conversation(api, 3, cid)
    assert (c2["lastSeq"], c2["unreadCount"], c3["unreadCount"]) == (4, 3, 1)
    assert (await api.data(TOTALS, user=2))["viewer"] == {"totalUnread": 3, "unreadConversations": 1}
    # reading past the tombstone: the counter follows the watermark (the trigger)
    assert (await api.mark_read(2, cid, 2))["unreadCount"] == 2
    assert (await api.mark_read(2, cid, 4))["unreadCount"] == 0
    assert (await api.data(TOTALS, user=2))["viewer"] == {"totalUnread": 0, "unreadConversations": 0}
    # deleting the last message: the inbox shows the tombstone; a message nobody had read is not unread
    await delete(api, 1, cid, 4)
    inbox = (await api.data(INBOX, user=3))["inbox"]["nodes"]
    assert inbox[0]["lastMessage"] == {
        "seq": 4,
        "body": "",
        "deletedAt": inbox[0]["lastMessage"]["deletedAt"],
        "deletedBy": "1",
    }
    assert inbox[0]["lastMessage"]["deletedAt"] is not None
    assert inbox[0]["unreadCount"] == 0  # 3 read up to 3; 4 is deleted
    # twice: a coded error
    assert error_code(await api.error(DELETE, {"c": cid, "s": 2}, user=1)) == "CONFLICT"


async def test_only_the_sender_or_a_groups_owner_deletes(api):
    cid = await api.create_group(1, [2, 3])
    await api.send(2, cid, "by two")
    assert error_code(await api.error(DELETE, {"c": cid, "s": 1}, user=3)) == "FORBIDDEN"
    assert (await delete(api, 1, cid, 1))["message"]["deletedBy"] == "1"  # the owner
    direct = (await api.data('mutation { createDirectConversation(userId: "5") { id } }', user=4))[
        "createDirectConversation"
    ]["id"]
    await api.send(4, direct, "dm")
    assert error_code(await api.error(DELETE, {"c": direct, "s": 1}, user=5)) == "FORBIDDEN"
    assert (await delete(api, 4, direct, 1))["message"]["deletedBy"] == "4"


async def test_unread_after_a_delete_is_kept_on_write_not_counted_over_history(api, engine):
    """A delete touches the member rows that had not read the message (once) and the watermark statements
    count only the deleted seqs they move across: the statements of a markRead past a tombstone read
    message_change through its partial index, never the message table."""
    cid = await api.create_group(1, [2])
    for i in range(1, 31):
        await api.send(1, cid, f"m{i}")
    await api.mark_read(2, cid, 10)
    await delete(api, 1, cid, 20)
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text("SELECT user_id, unread_deleted FROM conversation_member WHERE conversation_id = :c ORDER BY 1"),
                {"c": int(cid)},
            )
        ).all()
        assert [tuple(r) for r in rows] == [("1", 0), ("2", 1)]  # the sender had read it: not counted
        plan = (
            await conn.execute(
                text(
                    "EXPLAIN (FORMAT JSON) SELECT count(*) FROM message_change WHERE conversation_id = :c"
                    " AND kind = 'DELETED' AND seq > 10 AND seq <= 30"
                ),
                {"c": int(cid)},
            )
        ).scalar()
        assert "message_change_deleted_idx" in str(plan)
    assert (await conversation(api, 2, cid))["unreadCount"] == 19
    assert (await api.mark_read(2, cid, 30))["unreadCount"] == 0
    async with engine.connect() as conn:
        assert (
            await conn.execute(
                text("SELECT unread_deleted FROM conversation_member WHERE conversation_id = :c AND user_id = '2'"),
                {"c": int(cid)},
            )
        ).scalar() == 0


async def test_sync_returns_the_changes_after_the_change_cursor_with_the_message_as_it_is_now(api):
    cid = await api.create_group(1, [2])
    for i in range(1, 4):
        await api.send(1, cid, f"m{i}")
    await edit(api, 1, cid, 1, "m1'")
    await delete(api, 1, cid, 2)
    await edit(api, 1, cid, 3, "m3'")
    data = await api.data(SYNC, {"cursors": [{"conversationId": cid, "afterSeq": 3, "afterChangeSeq": 1}]}, user=2)
    (answer,) = data["sync"]
    assert answer["messages"] == [] and answer["lastSeq"] == 3 and answer["lastChangeSeq"] == 3
    assert [(c["changeSeq"], c["kind"], c["seq"], c["message"]["body"]) for c in answer["changes"]] == [
        (2, "DELETED", 2, ""),
        (3, "EDITED", 3, "m3'"),
    ]
    assert answer["changes"][0]["changedBy"] == "1" and not answer["changesHaveMore"]
    # without a change cursor: no changes
    plain = await api.data(SYNC, {"cursors": [{"conversationId": cid, "afterSeq": 0}]}, user=2)
    assert plain["sync"][0]["changes"] == [] and len(plain["sync"][0]["messages"]) == 3


async def test_messagechanged_replays_after_the_change_cursor_then_goes_live_without_gap_or_duplicate(server, api):
    cid = await api.create_group(1, [2])
    for i in range(1, 4):
        await api.send(1, cid, f"m{i}")
    await edit(api, 1, cid, 1, "a")
    await edit(api, 1, cid, 2, "b")
    async with await ws_connect(server, 2) as ws:
        resumed = await ws.subscribe(CHANGED, {"c": cid, "cursors": [{"conversationId": cid, "afterChangeSeq": 1}]})
        plain = await ws.subscribe(CHANGED, {})
        replayed = await resumed.collect(1, timeout=20)
        assert [e["messageChanged"]["changeSeq"] for e in replayed] == [2]
        await wait_active_subscriptions(server, 2)
        await delete(api, 1, cid, 3)
        await edit(api, 1, cid, 1, "c")
        live = await resumed.collect(2, timeout=20)
        everywhere = await plain.collect(2, timeout=20)
    for events in (live, everywhere):
        got = [e["messageChanged"] for e in events]
        assert [(g["changeSeq"], g["kind"], g["seq"]) for g in got] == [(3, "DELETED", 3), (4, "EDITED", 1)]
        assert got[0]["message"]["deletedBy"] == "1" and got[0]["message"]["body"] == ""
        assert got[1]["message"]["body"] == "c" and got[1]["message"]["editedAt"] is not None
    first = await api.data(
        "query($c: ID!) { messages(conversationId: $c, first: 1) { nodes { id } } }", {"c": cid}, user=2
    )
    assert got[1]["message"]["id"] == first["messages"]["nodes"][0]["id"]  # the cached object's id


async def test_an_edit_never_reaches_messagenew(server, api):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "x")
    async with await ws_connect(server, 2) as ws:
        new = await ws.subscribe("subscription { messageNew { seq message { body } } }", {})
        changed = await ws.subscribe(CHANGED, {"c": cid})
        await wait_active_subscriptions(server, 2)
        await edit(api, 1, cid, 1, "y")
        assert (await changed.next())["messageChanged"]["message"]["body"] == "y"
        await api.send(1, cid, "z")
        got = [(await new.next())["messageNew"]]
        if got[0]["seq"] == 1:  # "x", sent before the subscription, may be relayed after it (a busy machine)
            got.append((await new.next())["messageNew"])
        assert got[-1] == {"seq": 2, "message": {"body": "z"}}
        assert all(event["message"]["body"] != "y" for event in got), got  # the edit never came as new


async def test_concurrent_changes_take_gap_free_change_seqs(api, engine):
    cid = await api.create_group(1, [2])
    for i in range(1, 11):
        await api.send(1, cid, f"m{i}")
    results = await asyncio.gather(*(edit(api, 1, cid, seq, f"e{seq}") for seq in range(1, 11)))
    assert sorted(r["changeSeq"] for r in results) == list(range(1, 11))
    async with engine.connect() as conn:
        seqs = (
            (
                await conn.execute(
                    text("SELECT change_seq FROM message_change WHERE conversation_id = :c ORDER BY 1"), {"c": int(cid)}
                )
            )
            .scalars()
            .all()
        )
    assert list(seqs) == list(range(1, 11))


async def test_a_markunread_rewind_over_a_deleted_message_does_not_count_it(api):
    """markUnread(fromSeq) rewinds the viewer's own read position below the watermark; the deleted
    messages in the rewound range are not unread either (counted in that range only)."""
    cid = await api.create_group(1, [2])
    for i in range(1, 6):
        await api.send(1, cid, f"m{i}")
    await api.mark_read(2, cid, 5)
    await delete(api, 1, cid, 3)
    assert (await conversation(api, 2, cid))["unreadCount"] == 0
    unread = "mutation($c: ID!, $s: Long!) { markUnread(conversationId: $c, fromSeq: $s) { unreadCount } }"
    await api.data(unread, {"c": cid, "s": 2}, user=2)  # 2..5 unread again, but 3 is a tombstone
    assert (await conversation(api, 2, cid))["unreadCount"] == 3
    assert (await api.data(TOTALS, user=2))["viewer"] == {"totalUnread": 3, "unreadConversations": 1}


async def test_a_retry_of_a_message_edited_or_deleted_since_is_its_acknowledgement(api, migrated_url, engine):
    """Idempotent by clientMsgId whatever happened to the message after (chat_send and chat_send_batch)."""
    send = """
    mutation($c: ID!, $m: UUID!, $b: String!) {
      sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { duplicate message { seq body editedAt deletedAt } }
    }"""
    cid = await api.create_group(1, [2])
    edited, deleted = str(uuid.uuid4()), str(uuid.uuid4())
    await api.send(1, cid, "first", client_msg_id=edited)
    await api.send(1, cid, "second", client_msg_id=deleted)
    await edit(api, 1, cid, 1, "first, edited")
    await delete(api, 1, cid, 2)
    again = (await api.data(send, {"c": cid, "m": edited, "b": "first"}, user=1))["sendMessage"]
    assert again["duplicate"] and again["message"]["seq"] == 1 and again["message"]["body"] == "first, edited"
    assert again["message"]["editedAt"] is not None  # the message as it is now
    gone = (await api.data(send, {"c": cid, "m": deleted, "b": "second"}, user=1))["sendMessage"]
    assert gone["duplicate"] and gone["message"]["seq"] == 2 and gone["message"]["deletedAt"] is not None
    other = await api.error(send, {"c": cid, "m": edited, "b": "something else"}, user=1)
    assert error_code(other) == "CONFLICT"  # neither its original body nor its current one
    assert error_code(await api.error(send, {"c": cid, "m": deleted, "b": "second"}, user=2)) == "CONFLICT"
    database = await db.Database(migrated_url, max_size=1).open()
    try:  # the group-committed path: chat_send_batch
        items = [
            ("1", uuid.UUID(edited), "first", {}, {}),
            ("1", uuid.UUID(deleted), "x", {}, {}),
            ("1", uuid.UUID(edited), "else", {}, {}),
        ]
        async with database.transaction() as conn:
            rows = await messages.send_batch(conn, int(cid), items, MESSAGE_KEYS, READ_KEYS)
        assert [(r["outcome"], r["seq"]) for r in rows] == [("duplicate", 1), ("duplicate", 2), ("conflict", 1)]
    finally:
        await database.close()
    assert (await conversation(api, 2, cid))["lastSeq"] == 2  # nothing stored again
    async with engine.connect() as conn:  # 0013_event_keys' chat_send keeps 0005's generic plans
        config = await conn.execute(text("SELECT proconfig FROM pg_proc WHERE proname = 'chat_send'"))
        assert config.scalar() == ["plan_cache_mode=force_generic_plan"]
