"""Edits, deletes, pins and unpins reach subscribers through the outbox, the relay, a real Kafka and the consumer,
carrying the message with its id, and keep their place in the conversation's order (keyed by it)."""

from __future__ import annotations

import uuid

from chatgql.server import cli
from chatgql.services.erase import erase_user

from ..support.live import ChatApi, wait_active_subscriptions, ws_connect

CHANGED = """
subscription($c: ID) {
  messageChanged(conversationId: $c) { changeSeq kind seq reason message { id body editedAt deletedAt deletedBy } }
}
"""


async def test_edits_and_deletes_arrive_on_messagechanged_through_kafka_in_change_seq_order(kafka_server, http):
    api = ChatApi.of(kafka_server, http)
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "one")
    await api.send(1, cid, "two")
    async with await ws_connect(kafka_server, 2) as ws:
        op = await ws.subscribe(CHANGED, {"c": cid})
        await wait_active_subscriptions(kafka_server, 1)
        await api.data(
            'mutation($c: ID!) { editMessage(conversationId: $c, seq: 1, body: "uno") { changeSeq } }',
            {"c": cid},
            user=1,
        )
        await api.data(
            "mutation($c: ID!) { deleteMessage(conversationId: $c, seq: 2) { changeSeq } }", {"c": cid}, user=1
        )
        # the operator's erase of user 1 (another process, as `chatgql erase-user 1`): seq 2 is a tombstone already
        operator = kafka_server.settings.model_copy(update={"migrate_on_start": False})
        assert await cli._with_database(operator, lambda database: erase_user(database, "1")) == 1
        got = [e["messageChanged"] for e in await op.collect(3, timeout=60)]
    assert [(g["changeSeq"], g["kind"], g["seq"]) for g in got] == [
        (1, "EDITED", 1),
        (2, "DELETED", 2),
        (3, "DELETED", 1),
    ]
    assert got[0]["message"]["body"] == "uno" and got[0]["message"]["editedAt"] is not None
    assert got[1]["message"]["body"] == "" and got[1]["message"]["deletedBy"] == "1"
    assert got[2]["message"]["body"] == "" and got[2]["message"]["deletedAt"] and got[2]["message"]["deletedBy"] is None
    assert [g["reason"] for g in got] == [None, None, "ERASE"]


async def test_pins_and_unpins_arrive_on_messagechanged_through_kafka_in_change_seq_order(kafka_server, http):
    api = ChatApi.of(kafka_server, http)
    cid = await api.create_group(1, [2])
    await api.send(2, cid, "pin me")
    pin = "mutation($c: ID!) { pinMessage(conversationId: $c, seq: 1) { changeSeq } }"
    unpin = "mutation($c: ID!) { unpinMessage(conversationId: $c, seq: 1) { changeSeq } }"
    async with await ws_connect(kafka_server, 2) as ws:
        op = await ws.subscribe(CHANGED, {"c": cid})
        await wait_active_subscriptions(kafka_server, 1)
        await api.data(pin, {"c": cid}, user=1)
        await api.data(unpin, {"c": cid}, user=1)
        await api.data(pin, {"c": cid}, user=1)
        got = [e["messageChanged"] for e in await op.collect(3, timeout=60)]
    assert [(g["changeSeq"], g["kind"], g["seq"]) for g in got] == [
        (1, "PINNED", 1),
        (2, "UNPINNED", 1),
        (3, "PINNED", 1),
    ]
    assert {g["message"]["body"] for g in got} == {"pin me"}


async def test_a_late_joiner_of_a_group_hiding_its_history_gets_no_change_of_an_older_message_through_kafka(
    kafka_server, http
):
    api = ChatApi.of(kafka_server, http)
    owner, member, late = (200_000 + uuid.uuid4().int % 10_000_000 * 10 + i for i in range(3))
    cid = await api.create_group(owner, [member])
    await api.send(member, cid, "before the join")
    hide = "mutation($c: ID!) { setHistoryVisibility(conversationId: $c, hideHistory: true) { id } }"
    await api.data(hide, {"c": cid}, user=owner)
    await api.add_members(owner, cid, [late])
    await api.send(member, cid, "after the join")
    edit = 'mutation($c: ID!, $s: Long!) { editMessage(conversationId: $c, seq: $s, body: "edited") { changeSeq } }'
    async with await ws_connect(kafka_server, late) as joiner, await ws_connect(kafka_server, member) as old:
        late_op = await joiner.subscribe(CHANGED, {"c": cid})
        old_op = await old.subscribe(CHANGED, {"c": cid})
        await wait_active_subscriptions(kafka_server, 2)
        await api.data(edit, {"c": cid, "s": 1}, user=member)  # hidden from the late joiner
        await api.data(edit, {"c": cid, "s": 2}, user=member)
        everything = [e["messageChanged"] for e in await old_op.collect(2, timeout=60)]
        (seen,) = [e["messageChanged"] for e in await late_op.collect(1, timeout=60)]
    assert [(e["changeSeq"], e["seq"]) for e in everything] == [(1, 1), (2, 2)]
    assert (seen["changeSeq"], seen["seq"], seen["message"]["body"]) == (2, 2, "edited")
