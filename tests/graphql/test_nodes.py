"""Global object ids (the Node interface): node(id:) and nodes(ids:).

Pins: every cached type has a stable id that round-trips through node(id:);
a Conversation's id is still its decimal conversationId; ids are unique
across types; a non-member, a malformed id and a missing object all get the
same null; nodes(ids:) costs a bounded number of statements however many
ids it is given; events carry the ids of what they change.
"""

from __future__ import annotations

import base64

from chatgql.graphql import ids

from ..conftest import error_code
from ..support.live import subscribe_messages, wait_active_subscriptions, ws_connect
from .test_query_count import create_groups, send_many, statements_of

NODE = """
query($id: ID!) {
  node(id: $id) {
    __typename id
    ... on Conversation { title lastSeq }
    ... on Message { conversationId seq body }
    ... on Member { userId role lastReadSeq }
    ... on Viewer { userId totalUnread }
  }
}
"""

HISTORY = """
query($c: ID!) {
  viewer { id userId }
  conversation(id: $c) {
    id
    members { id userId }
    messages(first: 10) { nodes { id seq body } }
    lastMessage { id seq }
  }
}
"""


def test_ids_parse_back_to_what_they_name_and_nothing_else():
    assert ids.parse(ids.message_id(7, 42)) == ids.GlobalId("Message", (7, 42))
    assert ids.parse(ids.member_id(7, "3")) == ids.GlobalId("Member", (7,), "3")
    assert ids.parse(ids.viewer_id(str(2**63 - 1))) == ids.GlobalId("Viewer", (), str(2**63 - 1))
    assert ids.parse(ids.member_id(7, "auth0|a:b")) == ids.GlobalId("Member", (7,), "auth0|a:b")
    assert ids.parse("42") == ids.GlobalId("Conversation", (42,))
    # Opaque ids are never all digits, so they cannot collide with a conversation's id.
    assert not any(i.isdigit() for i in (ids.message_id(1, 1), ids.member_id(1, "1"), ids.viewer_id("1")))
    raw = lambda text: base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")  # noqa: E731
    refused = [
        "",
        "0",
        "042",
        str(2**63),
        "x" * 100,
        "not an id!",
        raw("Message:1"),
        raw("Message:1:0"),
        raw("Message:01:2"),
        raw("Message:1:2:3"),
        raw("Nope:1:2"),
        raw("Viewer:"),  # not a user id: empty, a control character, 256 characters
        raw("Viewer:a\nb"),
        raw("Member:1:" + "u" * 256),
        raw("Viewer:1") + "==",
        raw(f"Member:{2**63}:1"),
        42,
        None,
    ]
    for text in refused:
        assert ids.parse(text) is None, text


async def test_every_cached_type_round_trips_through_node(api):
    cid = await api.create_group(1, [2], title="roundtrip")
    await api.send(1, cid, "first")
    await api.send(2, cid, "second")
    data = await api.data(HISTORY, {"c": cid}, user=2)
    conversation = data["conversation"]
    assert conversation["id"] == cid  # unchanged: the decimal conversationId
    message_ids = [m["id"] for m in conversation["messages"]["nodes"]]
    assert conversation["lastMessage"]["id"] == message_ids[-1]  # one object, one id, wherever it appears
    member_ids = {m["userId"]: m["id"] for m in conversation["members"]}
    every_id = [cid, *message_ids, *member_ids.values(), data["viewer"]["id"]]
    assert len(set(every_id)) == len(every_id)

    expected = {
        cid: {"__typename": "Conversation", "id": cid, "title": "roundtrip", "lastSeq": 2},
        message_ids[0]: {
            "__typename": "Message",
            "id": message_ids[0],
            "conversationId": cid,
            "seq": 1,
            "body": "first",
        },
        message_ids[1]: {
            "__typename": "Message",
            "id": message_ids[1],
            "conversationId": cid,
            "seq": 2,
            "body": "second",
        },
        member_ids["1"]: {
            "__typename": "Member",
            "id": member_ids["1"],
            "userId": "1",
            "role": "OWNER",
            "lastReadSeq": 1,
        },
        member_ids["2"]: {
            "__typename": "Member",
            "id": member_ids["2"],
            "userId": "2",
            "role": "MEMBER",
            "lastReadSeq": 2,
        },
        data["viewer"]["id"]: {"__typename": "Viewer", "id": data["viewer"]["id"], "userId": "2", "totalUnread": 0},
    }
    for node_id, node in expected.items():
        assert (await api.data(NODE, {"id": node_id}, user=2))["node"] == node
    # The same ids again: stable.
    assert await api.data(HISTORY, {"c": cid}, user=2) == data
    # nodes(ids:) answers in order, with null where there is nothing.
    found = await api.data("query($i: [ID!]!) { nodes(ids: $i) { id } }", {"i": [*expected, "nope"]}, user=2)
    assert found["nodes"] == [{"id": i} for i in expected] + [None]


async def test_a_non_member_gets_the_same_null_as_for_a_missing_or_malformed_id(api):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "secret")
    data = await api.data(HISTORY, {"c": cid}, user=1)
    owner_viewer_id = data["viewer"]["id"]
    visible = [
        cid,
        data["conversation"]["messages"]["nodes"][0]["id"],
        *(m["id"] for m in data["conversation"]["members"]),
    ]
    missing = ["999999", ids.message_id(int(cid), 99), ids.member_id(int(cid), 77), "garbage", ids.message_id(999, 1)]
    outsider = 9
    for node_id in [*visible, owner_viewer_id, *missing]:
        body = await api.execute(NODE, {"id": node_id}, user=outsider)
        assert body == {"data": {"node": None}}, (node_id, body)
    body = await api.execute("query($i: [ID!]!) { nodes(ids: $i) { id } }", {"i": visible}, user=outsider)
    assert body == {"data": {"nodes": [None] * len(visible)}}
    # The member sees them all, so the nulls above are about who asks.
    body = await api.execute("query($i: [ID!]!) { nodes(ids: $i) { id } }", {"i": visible}, user=2)
    assert body == {"data": {"nodes": [{"id": i} for i in visible]}}
    # A removed member is an outsider from then on.
    await api.remove_member(1, cid, 2)
    body = await api.execute("query($i: [ID!]!) { nodes(ids: $i) { id } }", {"i": visible}, user=2)
    assert body == {"data": {"nodes": [None] * len(visible)}}


async def test_node_without_a_token_is_unauthenticated_and_too_many_ids_are_a_limit(api):
    assert error_code(await api.error(NODE, {"id": "1"})) == "UNAUTHENTICATED"
    error = await api.error("query($i: [ID!]!) { nodes(ids: $i) { id } }", {"i": ["1"] * 201}, user=1)
    assert error_code(error) == "LIMIT_EXCEEDED"


NODES = """
query($i: [ID!]!) {
  nodes(ids: $i) {
    __typename id
    ... on Conversation { lastSeq }
    ... on Message { body }
    ... on Member { userId role joinedAt }
  }
}
"""


async def test_nodes_with_many_ids_of_every_type_runs_a_bounded_number_of_statements(server, engine, client):
    conversations = await create_groups(client, 1, [2, 3], 20)
    for cid in conversations[:5]:
        await send_many(client, 2, cid, 4)

    async def all_ids(count: int) -> list[str]:
        chosen = conversations[:count]
        out: list[str] = []
        for cid in chosen:
            out.append(cid)
            out += [ids.message_id(int(cid), seq) for seq in (1, 2)]
            out += [ids.member_id(int(cid), uid) for uid in (1, 2, 3)]
        return out + [ids.viewer_id(1)]

    few, few_data = await statements_of(server, engine, client, NODES, {"i": await all_ids(2)}, user=1)
    many, many_data = await statements_of(server, engine, client, NODES, {"i": await all_ids(20)}, user=1)
    nodes = many_data["nodes"]
    assert len(nodes) == 20 * 6 + 1
    # messages exist in the first 5 conversations only
    assert sum(n is not None and n["__typename"] == "Message" for n in nodes) == 10
    assert sum(n is not None and n["__typename"] == "Member" for n in nodes) == 60
    assert nodes[-1] == {"__typename": "Viewer", "id": ids.viewer_id(1)}
    assert len(many) <= 3, many  # conversations, messages, rosters: one statement each
    assert len(many) == len(few), (few, many)


async def test_read_updated_carries_the_member_and_message_new_the_message_with_their_ids(server, api):
    cid = await api.create_group(1, [2])
    async with await ws_connect(server, 1) as ws:
        messages = await subscribe_messages(ws, cid)
        reads = await ws.subscribe(
            "subscription($c: ID) { readUpdated(conversationId: $c) "
            "{ member { __typename id userId lastReadSeq role } } }",
            {"c": cid},
        )
        ids_only = await ws.subscribe(
            "subscription($c: ID) { messageNew(conversationId: $c) { message { __typename id seq } } }", {"c": cid}
        )
        await wait_active_subscriptions(server, 3)
        seq = await api.send(1, cid, "hello")
        await messages.next()
        assert (await ids_only.next())["messageNew"]["message"] == {
            "__typename": "Message",
            "id": ids.message_id(int(cid), seq),
            "seq": seq,
        }
        await api.mark_read(2, cid, seq)
        event = await reads.next()
    assert event["readUpdated"]["member"] == {
        "__typename": "Member",
        "id": ids.member_id(int(cid), 2),
        "userId": "2",
        "lastReadSeq": seq,
        "role": "MEMBER",
    }
    # The same member, read by its id, is the one the event named.
    node = await api.data(NODE, {"id": event["readUpdated"]["member"]["id"]}, user=1)
    assert node["node"]["lastReadSeq"] == seq


CONVERSATION = "conversation { id lastSeq lastReadSeq unreadCount lastMessage { id } }"


async def test_events_carry_the_conversation_as_each_subscriber_sees_it(server, api):
    cid = await api.create_group(1, [2])
    async with await ws_connect(server, 1) as owner, await ws_connect(server, 2) as member:
        new = [await ws.subscribe(f"subscription {{ messageNew {{ seq {CONVERSATION} }} }}") for ws in (owner, member)]
        reads = await member.subscribe(f"subscription {{ readUpdated {{ userId {CONVERSATION} }} }}")
        await wait_active_subscriptions(server, 3)
        seq = await api.send(1, cid, "hello")
        as_owner, as_member = [(await op.next())["messageNew"]["conversation"] for op in new]
        await api.mark_read(2, cid, seq)
        read = (await reads.next())["readUpdated"]
    last = {"id": ids.message_id(int(cid), seq)}
    assert as_owner == {"id": cid, "lastSeq": seq, "lastReadSeq": seq, "unreadCount": 0, "lastMessage": last}
    assert as_member == {"id": cid, "lastSeq": seq, "lastReadSeq": 0, "unreadCount": 1, "lastMessage": last}
    assert read == {
        "userId": "2",
        "conversation": {"id": cid, "lastSeq": seq, "lastReadSeq": seq, "unreadCount": 0, "lastMessage": last},
    }
