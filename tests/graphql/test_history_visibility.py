"""History visibility (setHistoryVisibility, migration 0024_history_visibility): a group's OWNER or an ADMIN
hides its earlier history from the members added from then on. Such a late joiner reads nothing sent before
their join on any read path (history pages, node ids, search, sync and its changes, replies and replyTo, pins,
the inbox's last message with prebuilt pages on and off, resume cursors, live messageChanged), and may not act
on those messages either; a member of a group that shows its history reads everything. Against the session's
chatgql and its PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass

from chatgql.events.dispatch import Dispatcher, MembershipCache, Subscription
from chatgql.store import conversations

from ..conftest import GraphQLClient, RunningServer, error_code, make_settings
from ..support.live import ChatApi, wait_active_subscriptions, ws_connect

SET = "mutation($c: ID!, $h: Boolean!) { setHistoryVisibility(conversationId: $c, hideHistory: $h) { id hideHistory } }"
SEND = (
    "mutation($c: ID!, $k: UUID!, $b: String!, $r: ID) "
    "{ sendMessage(conversationId: $c, clientMsgId: $k, body: $b, replyTo: $r) { message { seq id } } }"
)
ROLE = (
    "mutation($c: ID!, $u: ID!, $r: MemberRole!) { setMemberRole(conversationId: $c, userId: $u, role: $r) { role } }"
)
EDIT = "mutation($c: ID!, $s: Long!, $b: String!) { editMessage(conversationId: $c, seq: $s, body: $b) { changeSeq } }"
DELETE = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }"
REACT = 'mutation($c: ID!, $s: Long!) { addReaction(conversationId: $c, seq: $s, emoji: "👍") { changeSeq } }'
PIN = "mutation($c: ID!, $s: Long!) { pinMessage(conversationId: $c, seq: $s) { changeSeq } }"
UNREAD = "mutation($c: ID!, $s: Long!) { markUnread(conversationId: $c, fromSeq: $s) { lastReadSeq unreadCount } }"
HISTORY = """
query($c: ID!) {
  conversation(id: $c) {
    hideHistory lastSeq lastReadSeq unreadCount lastMessage { seq }
    forward: messages(first: 50) { nodes { seq replyTo { seq } } pageInfo { hasPreviousPage hasNextPage } }
    backward: messages(last: 50) { nodes { seq } pageInfo { hasPreviousPage } }
    before: messages(last: 50, before: "3") { nodes { seq } }
  }
  messages(conversationId: $c, first: 50) { nodes { seq } }
  pinnedMessages(conversationId: $c) { seq }
}
"""
REPLIES = "query($id: ID!) { node(id: $id) { ... on Message { seq replies { seq } replyTo { seq } } } }"
NODES = "query($ids: [ID!]!) { nodes(ids: $ids) { id ... on Message { seq body } } }"
NODE = "query($id: ID!) { node(id: $id) { id ... on Message { seq body } } }"
SEARCH = """
query($q: String!, $c: ID) {
  everywhere: searchMessages(query: $q) { nodes { seq } }
  here: searchMessages(query: $q, conversationId: $c) { nodes { seq } }
}
"""
SYNC = """
query($cursors: [SyncCursor!]!) {
  sync(cursors: $cursors) { lastSeq lastReadSeq tooLong messages { seq } changes { seq kind } changesHaveMore }
}
"""
MESSAGE_NEW = (
    "subscription($c: ID, $cursors: [SyncCursor!]) { messageNew(conversationId: $c, cursors: $cursors) { seq } }"
)
CHANGED = """
subscription($c: ID, $cursors: [ChangeCursor!]) {
  messageChanged(conversationId: $c, cursors: $cursors) { changeSeq kind seq message { seq body } }
}
"""
UPDATED = (
    "subscription($c: ID) { conversationUpdated(conversationId: $c) { change userId conversation { hideHistory } } }"
)
INBOX = "{ inbox(first: 50) { nodes { id lastSeq lastReadSeq unreadCount hideHistory lastMessage { seq body } } } }"


def users() -> tuple[int, int, int, int, int]:
    """owner, admin, original member, late joiner, outsider: fresh ids, so a search over all of a user's
    conversations meets only this test's."""
    base = 100_000 + uuid.uuid4().int % 10_000_000 * 10
    return base, base + 1, base + 2, base + 3, base + 9


async def send(api: ChatApi, user: int, cid: str, body: str, reply_to: str | None = None) -> dict:
    variables = {"c": cid, "k": str(uuid.uuid4()), "b": body, "r": reply_to}
    return (await api.data(SEND, variables, user=user))["sendMessage"]["message"]


def refusal(body: dict) -> dict:
    (error,) = body["errors"]
    assert body["data"] is None
    return error["extensions"]


@dataclass
class Group:
    cid: str
    word: str
    early: list[dict]  # seq 1..3: before the late join
    late: list[dict]  # seq 4..: after it


async def group_with_a_late_joiner(api: ChatApi, who: tuple[int, ...], *, hide: bool) -> Group:
    """owner, an ADMIN and a member; three messages (the second a reply to the first), a pin, a reaction and an edit
    of the first; then (hidden or not) the late joiner is added, and two more messages come (a reply to the hidden
    first, a reply to the fourth), with a change each of a hidden message and a visible one."""
    owner, admin, member, late, _ = who
    word = f"w{uuid.uuid4().hex[:10]}"
    cid = await api.create_group(owner, [admin, member])
    await api.data(ROLE, {"c": cid, "u": str(admin), "r": "ADMIN"}, user=owner)
    one = await send(api, member, cid, f"{word} one")
    two = await send(api, admin, cid, f"{word} two", one["id"])
    three = await send(api, owner, cid, f"{word} three")
    await api.data(PIN, {"c": cid, "s": 1}, user=owner)
    await api.data(REACT, {"c": cid, "s": 1}, user=admin)
    await api.data(EDIT, {"c": cid, "s": 1, "b": f"{word} one, edited"}, user=member)
    if hide:
        assert (await api.data(SET, {"c": cid, "h": True}, user=owner))["setHistoryVisibility"] == {
            "id": cid,
            "hideHistory": True,
        }
    await api.add_members(owner, cid, [late])
    four = await send(api, member, cid, f"{word} four", one["id"])
    five = await send(api, admin, cid, f"{word} five", four["id"])
    await api.data(REACT, {"c": cid, "s": 2}, user=member)  # a change of a hidden message
    await api.data(REACT, {"c": cid, "s": 4}, user=admin)  # and of a visible one
    await api.data(PIN, {"c": cid, "s": 4}, user=owner)
    return Group(cid, word, [one, two, three], [four, five])


async def test_a_late_joiner_reads_nothing_from_before_the_join_where_the_group_hides_it(api):
    who = users()
    owner, admin, member, late, other = who
    g = await group_with_a_late_joiner(api, who, hide=True)
    cid = g.cid
    seen = await api.data(HISTORY, {"c": cid}, user=late)
    conv = seen["conversation"]
    assert conv["hideHistory"] is True and conv["lastSeq"] == 5
    # unread starts at the join: the two messages since
    assert (conv["lastReadSeq"], conv["unreadCount"]) == (3, 2)
    assert conv["lastMessage"] == {"seq": 5}
    assert [n["seq"] for n in conv["forward"]["nodes"]] == [4, 5]
    # the fourth replies to a message the late joiner may not read: replyTo null; the fifth's is the fourth
    assert [n["replyTo"] for n in conv["forward"]["nodes"]] == [None, {"seq": 4}]
    assert conv["forward"]["pageInfo"] == {"hasPreviousPage": False, "hasNextPage": False}
    assert [n["seq"] for n in conv["backward"]["nodes"]] == [4, 5]
    assert conv["backward"]["pageInfo"] == {"hasPreviousPage": False}
    assert conv["before"]["nodes"] == []
    assert [n["seq"] for n in seen["messages"]["nodes"]] == [4, 5]
    assert seen["pinnedMessages"] == [{"seq": 4}]
    # the members from before read everything, as before
    for user in (owner, admin, member):
        everything = await api.data(HISTORY, {"c": cid}, user=user)
        assert [n["seq"] for n in everything["conversation"]["forward"]["nodes"]] == [1, 2, 3, 4, 5]
        assert everything["conversation"]["forward"]["nodes"][3]["replyTo"] == {"seq": 1}
        assert everything["pinnedMessages"] == [{"seq": 4}, {"seq": 1}]
    # node ids of hidden messages: null, as for a non-member (no existence leak); the visible ones answer
    ids = [m["id"] for m in g.early + g.late]
    assert (await api.data(NODES, {"ids": ids}, user=late))["nodes"] == [None, None, None] + [
        {"id": m["id"], "seq": m["seq"], "body": f"{g.word} {name}"}
        for m, name in zip(g.late, ("four", "five"), strict=True)
    ]
    for hidden in g.early:
        assert (await api.data(NODE, {"id": hidden["id"]}, user=late))["node"] is None
        assert (await api.data(NODE, {"id": hidden["id"]}, user=other))["node"] is None
        assert (await api.data(NODE, {"id": hidden["id"]}, user=member))["node"]["seq"] == hidden["seq"]
        assert error_code(await api.error(NODE, {"id": hidden["id"]})) == "UNAUTHENTICATED"
    # the replies of a visible message; a hidden one's replies are out of reach (its node is null)
    replies = (await api.data(REPLIES, {"id": g.late[0]["id"]}, user=late))["node"]
    assert replies == {"seq": 4, "replies": [{"seq": 5}], "replyTo": None}
    assert (await api.data(REPLIES, {"id": g.early[0]["id"]}, user=member))["node"]["replies"] == [
        {"seq": 2},
        {"seq": 4},
    ]
    # search, everywhere and in the conversation
    found = await api.data(SEARCH, {"q": g.word, "c": cid}, user=late)
    assert [h["seq"] for h in found["everywhere"]["nodes"]] == [5, 4]
    assert [h["seq"] for h in found["here"]["nodes"]] == [5, 4]
    by_member = await api.data(SEARCH, {"q": g.word, "c": cid}, user=member)
    assert [h["seq"] for h in by_member["here"]["nodes"]] == [5, 4, 3, 2, 1]
    assert [h["seq"] for h in (await api.data(SEARCH, {"q": g.word}, user=other))["everywhere"]["nodes"]] == []
    # sync: messages and changes of messages from the join on, whatever cursor the client claims
    for after in (0, 1, 3):
        (synced,) = (
            await api.data(
                SYNC, {"cursors": [{"conversationId": cid, "afterSeq": after, "afterChangeSeq": 0}]}, user=late
            )
        )["sync"]
        assert [m["seq"] for m in synced["messages"]] == [4, 5]
        assert [(c["seq"], c["kind"]) for c in synced["changes"]] == [(4, "REACTION"), (4, "PINNED")]
        assert synced["tooLong"] is False and synced["changesHaveMore"] is False
    (everything,) = (
        await api.data(SYNC, {"cursors": [{"conversationId": cid, "afterSeq": 0, "afterChangeSeq": 0}]}, user=member)
    )["sync"]
    assert [m["seq"] for m in everything["messages"]] == [1, 2, 3, 4, 5]
    assert [c["seq"] for c in everything["changes"]] == [1, 1, 1, 2, 4, 4]
    assert (
        error_code(await api.error(SYNC, {"cursors": [{"conversationId": cid, "afterSeq": 0}]}, user=other))
        == "NOT_FOUND"
    )


async def test_a_group_that_shows_its_history_gives_a_late_joiner_everything(api):
    who = users()
    late = who[3]
    g = await group_with_a_late_joiner(api, who, hide=False)
    seen = await api.data(HISTORY, {"c": g.cid}, user=late)
    assert seen["conversation"]["hideHistory"] is False
    assert (seen["conversation"]["lastReadSeq"], seen["conversation"]["unreadCount"]) == (3, 2)
    assert [n["seq"] for n in seen["conversation"]["forward"]["nodes"]] == [1, 2, 3, 4, 5]
    assert seen["conversation"]["forward"]["nodes"][3]["replyTo"] == {"seq": 1}
    assert seen["pinnedMessages"] == [{"seq": 4}, {"seq": 1}]
    assert (await api.data(NODE, {"id": g.early[0]["id"]}, user=late))["node"]["seq"] == 1
    found = await api.data(SEARCH, {"q": g.word, "c": g.cid}, user=late)
    assert [h["seq"] for h in found["here"]["nodes"]] == [5, 4, 3, 2, 1]
    (synced,) = (
        await api.data(SYNC, {"cursors": [{"conversationId": g.cid, "afterSeq": 0, "afterChangeSeq": 0}]}, user=late)
    )["sync"]
    assert [m["seq"] for m in synced["messages"]] == [1, 2, 3, 4, 5]
    assert [c["seq"] for c in synced["changes"]] == [1, 1, 1, 2, 4, 4]
    assert (await api.data(REACT, {"c": g.cid, "s": 1}, user=late))["addReaction"]["changeSeq"] is not None


async def test_a_late_joiner_may_not_act_on_hidden_messages(api):
    who = users()
    owner, _, _, late, _ = who
    g = await group_with_a_late_joiner(api, who, hide=True)
    cid = g.cid
    await api.data(ROLE, {"c": cid, "u": str(late), "r": "ADMIN"}, user=owner)  # so that pins and deletes may be
    for mutation, variables in (
        (REACT, {"c": cid, "s": 1}),
        (EDIT, {"c": cid, "s": 3, "b": "x"}),
        (DELETE, {"c": cid, "s": 2}),
        (PIN, {"c": cid, "s": 3}),
    ):
        assert refusal(await api.execute(mutation, variables, user=late))["code"] == "NOT_FOUND", mutation
    reply = await api.execute(SEND, {"c": cid, "k": str(uuid.uuid4()), "b": "re", "r": g.early[2]["id"]}, user=late)
    assert refusal(reply)["reason"] == "REPLY_TO_NOT_FOUND"
    # nothing written by the refusals
    conv = (await api.data(HISTORY, {"c": cid}, user=owner))["conversation"]
    assert conv["lastSeq"] == 5 and conv["forward"]["nodes"][2]["seq"] == 3
    # visible messages: as for any ADMIN
    assert (await api.data(REACT, {"c": cid, "s": 4}, user=late))["addReaction"]["changeSeq"] is not None
    assert (await send(api, late, cid, "re", g.late[0]["id"]))["seq"] == 6
    # markUnread never reaches below the join: unread counts the visible messages only
    assert (await api.data(UNREAD, {"c": cid, "s": 1}, user=late))["markUnread"] == {
        "lastReadSeq": 3,
        "unreadCount": 3,
    }


async def test_who_may_set_history_visibility_and_the_members_are_told(server, api):
    owner, admin, member, late, other = users()
    cid = await api.create_group(owner, [admin, member])
    await api.data(ROLE, {"c": cid, "u": str(admin), "r": "ADMIN"}, user=owner)
    forbidden = refusal(await api.execute(SET, {"c": cid, "h": True}, user=member))
    assert forbidden["code"] == "FORBIDDEN" and forbidden["reason"] == "NOT_GROUP_ADMIN"
    assert refusal(await api.execute(SET, {"c": cid, "h": True}, user=other))["code"] == "NOT_FOUND"
    assert error_code(await api.error(SET, {"c": cid, "h": True})) == "UNAUTHENTICATED"
    assert refusal(await api.execute(SET, {"c": "999999999999", "h": True}, user=owner))["code"] == "NOT_FOUND"
    assert refusal(await api.execute(SET, {"c": "nope", "h": True}, user=owner))["code"] == "BAD_USER_INPUT"
    direct = await api.data(
        "mutation($u: ID!) { createDirectConversation(userId: $u) { id } }", {"u": str(other)}, user=owner
    )
    dm = direct["createDirectConversation"]["id"]
    assert refusal(await api.execute(SET, {"c": dm, "h": True}, user=owner))["code"] == "FORBIDDEN"
    assert (await api.data(HISTORY, {"c": cid}, user=member))["conversation"]["hideHistory"] is False
    async with await ws_connect(server, member) as ws:
        op = await ws.subscribe(UPDATED, {"c": cid})
        await wait_active_subscriptions(server, 1)
        assert (await api.data(SET, {"c": cid, "h": True}, user=admin))["setHistoryVisibility"]["hideHistory"] is True
        await api.data(SET, {"c": cid, "h": True}, user=owner)  # no change: no event
        await api.data(SET, {"c": cid, "h": False}, user=owner)
        got = [e["conversationUpdated"] for e in await op.collect(2)]
    assert [(e["change"], e["userId"]) for e in got] == [
        ("SETTINGS_CHANGED", str(admin)),
        ("SETTINGS_CHANGED", str(owner)),
    ]
    assert got[1]["conversation"] == {"hideHistory": False}


async def test_a_member_keeps_what_they_were_given_when_the_setting_changes(api):
    owner, admin, member, late, other = users()
    cid = await api.create_group(owner, [member])
    await api.send(member, cid, "one")
    await api.data(SET, {"c": cid, "h": True}, user=owner)
    await api.add_members(owner, cid, [late])
    await api.send(member, cid, "two")
    await api.data(SET, {"c": cid, "h": False}, user=owner)
    await api.add_members(owner, cid, [other])  # joined while it shows everything
    await api.data(SET, {"c": cid, "h": True}, user=owner)

    def seqs(answer: dict) -> list[int]:
        return [n["seq"] for n in answer["conversation"]["forward"]["nodes"]]

    assert seqs(await api.data(HISTORY, {"c": cid}, user=late)) == [2]
    assert seqs(await api.data(HISTORY, {"c": cid}, user=other)) == [1, 2]
    assert seqs(await api.data(HISTORY, {"c": cid}, user=member)) == [1, 2]
    # leaving and being added again: what the group gives at that join
    await api.remove_member(late, cid, late)
    await api.data(SET, {"c": cid, "h": False}, user=owner)
    await api.add_members(owner, cid, [late])
    assert seqs(await api.data(HISTORY, {"c": cid}, user=late)) == [1, 2]


async def test_the_inbox_hides_a_last_message_from_before_the_join_with_prebuilt_pages_on_and_off(
    server, api, migrated_url, http
):
    owner, _, member, late, _ = users()
    hidden = await api.create_group(owner, [member], title="hidden")
    await api.send(member, hidden, "before the join")
    await api.data(SET, {"c": hidden, "h": True}, user=owner)
    await api.add_members(owner, hidden, [late])
    shown = await api.create_group(owner, [member], title="shown")
    await api.send(member, shown, "before the join, shown")
    await api.add_members(owner, shown, [late])
    query = f"# {uuid.uuid4()}\n{INBOX}"
    before = server.app.graphql.planner.stats.prebuilt
    built = [await api.raw(query, user=late) for _ in range(2)]  # the second: by the plan, prebuilt
    assert server.app.graphql.planner.stats.prebuilt == before + 1
    nodes = {node["id"]: node for node in json.loads(built[1].content)["data"]["inbox"]["nodes"]}
    assert nodes[hidden] == {
        "id": hidden,
        "lastSeq": 1,
        "lastReadSeq": 1,
        "unreadCount": 0,
        "hideHistory": True,
        "lastMessage": None,
    }
    assert nodes[shown]["lastMessage"] == {"seq": 1, "body": "before the join, shown"}
    settings = make_settings(migrated_url, run_relay=False, prebuilt_pages=False)
    async with RunningServer(settings) as no_prebuilt:
        plain = await GraphQLClient(http, no_prebuilt.url, no_prebuilt.settings).raw(query, user=late)
        assert no_prebuilt.app.graphql.planner.stats.prebuilt == 0
    assert [json.loads(b.content) for b in built] == [json.loads(plain.content)] * 2


async def test_resume_cursors_and_live_changes_leave_out_hidden_messages(server, api):
    who = users()
    owner, admin, member, late, other = who
    g = await group_with_a_late_joiner(api, who, hide=True)
    cid = g.cid
    async with (
        await ws_connect(server, late) as ws,
        await ws_connect(server, member) as old,
        await ws_connect(server, other) as outsider,
    ):
        denied = await outsider.subscribe(CHANGED, {"c": cid})
        assert (await denied.error()).code == "NOT_FOUND"
        new = await ws.subscribe(MESSAGE_NEW, {"c": cid, "cursors": [{"conversationId": cid, "afterSeq": 0}]})
        assert [(await new.next())["messageNew"]["seq"] for _ in range(2)] == [4, 5]
        changed = await ws.subscribe(CHANGED, {"c": cid, "cursors": [{"conversationId": cid, "afterChangeSeq": 0}]})
        replayed = [(await changed.next())["messageChanged"] for _ in range(2)]
        assert [(c["seq"], c["kind"]) for c in replayed] == [(4, "REACTION"), (4, "PINNED")]
        everything = await old.subscribe(CHANGED, {"c": cid})  # all-conversations too, below
        anywhere = await ws.subscribe(CHANGED, {})
        await wait_active_subscriptions(server, 4)
        await api.data(EDIT, {"c": cid, "s": 1, "b": "hidden edit"}, user=member)  # a change of a hidden message
        await api.data(REACT, {"c": cid, "s": 3}, user=member)  # another
        await api.data(EDIT, {"c": cid, "s": 4, "b": "visible edit"}, user=member)
        # the late joiner's next events are the visible change: the hidden ones never came before it
        live = (await changed.next())["messageChanged"]
        assert (live["seq"], live["kind"], live["message"]["body"]) == (4, "EDITED", "visible edit")
        assert (await anywhere.next())["messageChanged"]["seq"] == 4
        assert [(await everything.next())["messageChanged"]["seq"] for _ in range(3)] == [1, 3, 4]


async def test_the_dispatcher_holds_back_a_message_from_before_a_late_join_read_with_the_members_after_it(server, api):
    """The members are read when an event needs them, so a message sent just before the join may be dispatched
    with a membership that already holds the late joiner: their cutoff (from store.conversations.live_members,
    as the server reads it) keeps that message and any change of an older one from them, not from the others."""
    owner, _, member, late, _ = users()
    cid = await api.create_group(owner, [member])
    await api.send(member, cid, "before")
    await api.data(SET, {"c": cid, "h": True}, user=owner)
    await api.add_members(owner, cid, [late])
    database = server.runtime.deps.database

    async def load(conversation_id: int, subscribed: list[str]) -> tuple[int, list[str], dict[str, int]] | None:
        async with database.connection() as conn:
            row = await conversations.live_members(conn, conversation_id, 200, subscribed)
        assert row is not None
        return row["member_count"], row["user_ids"], dict(zip(row["late_ids"], row["late_from"], strict=True))

    dispatcher = Dispatcher(MembershipCache(load), buffer=10)

    def new(seq: int) -> dict:
        return {"type": "message.new", "conversationId": int(cid), "seq": seq, "senderId": str(member), "body": "x"}

    def edited(seq: int) -> dict:
        return {"type": "message.edited", "conversationId": int(cid), "seq": seq, "changeSeq": seq, "body": "y"}

    async def next_seq(sub: Subscription) -> int:
        return (await asyncio.wait_for(sub.__anext__(), 5))["seq"]

    async with (
        dispatcher.subscribe(str(late), int(cid), "message.new") as late_new,
        dispatcher.subscribe(str(late), None, "message.changed") as late_changed,
        dispatcher.subscribe(str(member), int(cid), "message.new") as member_new,
        dispatcher.subscribe(str(member), None, "message.changed") as member_changed,
    ):
        for event in (new(1), edited(1), new(2), edited(2)):
            await dispatcher.dispatch(event)
        assert [await next_seq(late_new), await next_seq(late_changed)] == [2, 2]
        assert [await next_seq(member_new), await next_seq(member_new)] == [1, 2]
        assert [await next_seq(member_changed), await next_seq(member_changed)] == [1, 2]
