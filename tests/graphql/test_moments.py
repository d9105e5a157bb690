"""One moment per edit and per reply, the same wherever it is shown: an edit's editedAt is the replacedAt of
the body it replaced (so one edit's history entry ends where the next one's starts), in the mutation's answer,
queries, sync's changes, the messageChanged payload and the stored rows; a reply's createdAt is its parent's
lastReplyAt, before and after a newer reply is deleted. Exact timestamps, against the session's chatgql on
real PostgreSQL."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from ..support.live import ChatApi, wait_active_subscriptions, ws_connect

EDIT = """
mutation($c: ID!, $s: Long!, $b: String!) {
  editMessage(conversationId: $c, seq: $s, body: $b) {
    changeSeq message { createdAt editedAt editHistory { body writtenAt replacedAt } }
  }
}
"""
MESSAGE = """
query($c: ID!, $a: String!) {
  messages(conversationId: $c, after: $a, first: 1) {
    nodes { id seq createdAt editedAt replyCount lastReplyAt editHistory { body writtenAt replacedAt } }
  }
}
"""
SYNC = """
query($c: ID!) {
  sync(cursors: [{conversationId: $c, afterSeq: 0, afterChangeSeq: 0}]) {
    messages { seq createdAt editedAt lastReplyAt }
    changes { changeSeq kind seq message { seq editedAt lastReplyAt } }
  }
}
"""
CHANGED = "subscription($c: ID) { messageChanged(conversationId: $c) { changeSeq kind message { seq editedAt } } }"
NEW = "subscription($c: ID) { messageNew(conversationId: $c) { seq message { createdAt replyTo { seq } } } }"
REPLY = """
mutation($c: ID!, $m: UUID!, $b: String!, $r: ID) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: $b, replyTo: $r) { message { seq createdAt } }
}
"""
DELETE = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }"


async def message(api: ChatApi, user: int, cid: str, seq: int) -> dict:
    data = await api.data(MESSAGE, {"c": cid, "a": str(seq - 1)}, user=user)
    return data["messages"]["nodes"][0]


async def test_each_edit_is_one_moment_in_its_history_answer_queries_sync_events_and_rows(server, api, engine):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "v1")
    async with await ws_connect(server, 2) as ws:
        changed = await ws.subscribe(CHANGED, {"c": cid})
        await wait_active_subscriptions(server, 1)
        answers = [
            (await api.data(EDIT, {"c": cid, "s": 1, "b": body}, user=1))["editMessage"] for body in ("v2", "v3")
        ]
        events = [e["messageChanged"] for e in await changed.collect(2, timeout=20)]
    first, second = (a["message"] for a in answers)
    now = await message(api, 2, cid, 1)
    history = now["editHistory"]
    assert [h["body"] for h in history] == ["v1", "v2"]
    assert history[0]["writtenAt"] == now["createdAt"]
    assert history[0]["replacedAt"] == first["editedAt"] == history[1]["writtenAt"]
    assert history[1]["replacedAt"] == second["editedAt"] == now["editedAt"]
    assert second["editHistory"] == history
    assert first["editedAt"] < second["editedAt"]
    assert [(e["changeSeq"], e["message"]["editedAt"]) for e in events] == [
        (1, first["editedAt"]),
        (2, second["editedAt"]),
    ]
    synced = (await api.data(SYNC, {"c": cid}, user=2))["sync"][0]
    assert synced["messages"][0]["editedAt"] == now["editedAt"]
    assert [c["message"]["editedAt"] for c in synced["changes"]] == [now["editedAt"], now["editedAt"]]
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT e.written_at, e.replaced_at, m.created_at, m.edited_at FROM message_edit e"
                    " JOIN message m USING (conversation_id, seq)"
                    " WHERE e.conversation_id = :c AND e.seq = 1 ORDER BY e.change_seq"
                ),
                {"c": int(cid)},
            )
        ).all()
    assert rows[0].written_at == rows[0].created_at
    assert rows[0].replaced_at == rows[1].written_at
    assert rows[1].replaced_at == rows[1].edited_at


async def reply(api: ChatApi, user: int, cid: str, to: str, body: str) -> dict:
    variables = {"c": cid, "m": str(uuid.uuid4()), "b": body, "r": to}
    return (await api.data(REPLY, variables, user=user))["sendMessage"]["message"]


async def test_a_replys_createdat_is_its_parents_lastreplyat_before_and_after_a_newer_reply_is_deleted(
    server, api, engine
):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "root")
    root = await message(api, 1, cid, 1)
    async with await ws_connect(server, 2) as ws:
        new = await ws.subscribe(NEW, {"c": cid})
        await wait_active_subscriptions(server, 1)
        older = await reply(api, 2, cid, root["id"], "r1")
        newer = await reply(api, 1, cid, root["id"], "r2")
        events = {e["messageNew"]["seq"]: e["messageNew"]["message"] for e in await new.collect(2, timeout=20)}
    assert events[older["seq"]]["createdAt"] == older["createdAt"] == (await message(api, 1, cid, 2))["createdAt"]
    assert events[newer["seq"]]["createdAt"] == newer["createdAt"] == (await message(api, 1, cid, 3))["createdAt"]
    assert (await message(api, 2, cid, 1))["lastReplyAt"] == newer["createdAt"]
    synced = (await api.data(SYNC, {"c": cid}, user=2))["sync"][0]
    assert synced["messages"][0]["lastReplyAt"] == newer["createdAt"]
    await api.data(DELETE, {"c": cid, "s": newer["seq"]}, user=1)
    after = await message(api, 2, cid, 1)
    assert (after["replyCount"], after["lastReplyAt"]) == (1, older["createdAt"])
    latest = await reply(api, 2, cid, root["id"], "r3")
    assert (await message(api, 2, cid, 1))["lastReplyAt"] == latest["createdAt"]
    async with engine.connect() as conn:
        stored = (
            await conn.execute(
                text(
                    "SELECT p.last_reply_at, r.created_at FROM message p JOIN message r"
                    " ON r.conversation_id = p.conversation_id AND r.seq = :r"
                    " WHERE p.conversation_id = :c AND p.seq = 1"
                ),
                {"c": int(cid), "r": latest["seq"]},
            )
        ).one()
    assert stored.last_reply_at == stored.created_at
