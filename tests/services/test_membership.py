"""updateMembership: the viewer's own mute, archive and pin, and the inbox and totals that follow.

Against the session server (real PostgreSQL, its relay and bus): the API over HTTP, the live
event over websockets.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from uuid import uuid4

from tests.conftest import error_code
from tests.support.live import ChatApi, wait_active_subscriptions, ws_connect

UPDATE = """
mutation U($c: ID!, $muted: Boolean, $until: DateTime, $archived: Boolean, $keep: Boolean, $pinned: Boolean) {
  updateMembership(conversationId: $c, muted: $muted, mutedUntil: $until, archived: $archived,
                   keepArchived: $keep, pinned: $pinned) {
    id muted mutedUntil archived keptArchived pinned pinnedAt unreadCount
  }
}
"""
INBOX = """
query I($f: InboxFilter, $first: Int, $after: String) {
  inbox(filter: $f, first: $first, after: $after) {
    nodes { id pinned archived muted unreadCount lastMessage { seq } }
    pageInfo { hasNextPage endCursor }
  }
}
"""
TOTALS = "{ viewer { totalUnread unreadConversations } }"
OWN_EVENTS = """
subscription($c: ID) { membershipUpdated(conversationId: $c) {
  conversationId muted archived pinned lastReadSeq conversation { id pinned muted archived unreadCount } } }
"""


async def update(api: ChatApi, user: int, cid: str, **settings: object) -> dict:
    return (await api.data(UPDATE, {"c": cid, **settings}, user=user))["updateMembership"]


async def inbox_ids(api: ChatApi, user: int, only: dict | None = None, first: int = 50) -> list[str]:
    """Every page of the inbox, in order (first per page)."""
    ids: list[str] = []
    after = None
    while True:
        page = (await api.data(INBOX, {"f": only, "first": first, "after": after}, user=user))["inbox"]
        ids += [node["id"] for node in page["nodes"]]
        if not page["pageInfo"]["hasNextPage"]:
            return ids
        after = page["pageInfo"]["endCursor"]


async def totals(api: ChatApi, user: int) -> dict:
    return (await api.data(TOTALS, user=user))["viewer"]


async def test_muted_conversations_stay_out_of_the_totals_but_keep_their_own_unread(server, http):
    api = ChatApi.of(server, http)
    a = await api.create_group(1, [2])
    b = await api.create_group(1, [2])
    for cid in (a, a, b):
        await api.send(1, cid)
    assert await totals(api, 2) == {"totalUnread": 3, "unreadConversations": 2}
    muted = await update(api, 2, a, muted=True)
    assert muted["muted"] is True and muted["mutedUntil"] is None and muted["unreadCount"] == 2
    assert await totals(api, 2) == {"totalUnread": 1, "unreadConversations": 1}
    await api.send(1, a)  # a new message in a muted conversation counts nowhere but its own badge
    assert await totals(api, 2) == {"totalUnread": 1, "unreadConversations": 1}
    assert (await update(api, 2, a, muted=False))["muted"] is False
    assert await totals(api, 2) == {"totalUnread": 4, "unreadConversations": 2}
    assert await totals(api, 1) == {"totalUnread": 0, "unreadConversations": 0}  # the others' settings are theirs


async def test_a_mute_until_a_time_ends_by_itself(server, http, engine):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2])
    await api.send(1, cid)
    until = datetime.now(UTC) + timedelta(hours=1)
    row = await update(api, 2, cid, until=until.isoformat())
    assert row["muted"] is True and datetime.fromisoformat(row["mutedUntil"]) == until
    assert await totals(api, 2) == {"totalUnread": 0, "unreadConversations": 0}
    from sqlalchemy import text  # the hour passes: the stored end moves into the past

    async with engine.begin() as conn:
        await conn.execute(
            text("UPDATE conversation_member SET muted_until = now() - interval '1 s' WHERE user_id = '2'")
        )
    assert await totals(api, 2) == {"totalUnread": 1, "unreadConversations": 1}
    conv = await api.data("query($c: ID!) { conversation(id: $c) { muted mutedUntil } }", {"c": cid}, user=2)
    assert conv["conversation"] == {"muted": False, "mutedUntil": None}


async def test_archived_leaves_the_default_inbox_and_comes_back_with_its_next_message(server, http):
    api = ChatApi.of(server, http)
    a = await api.create_group(1, [2])
    b = await api.create_group(1, [2])
    await api.send(1, a)
    assert (await update(api, 2, a, archived=True))["archived"] is True
    assert await inbox_ids(api, 2) == [b]
    assert await inbox_ids(api, 2, {"archived": True}) == [a]
    assert await inbox_ids(api, 2, {"archived": None}) == [a, b]
    assert await inbox_ids(api, 1) == [a, b]  # user 1's inbox is user 1's
    await api.send(1, a)
    assert await inbox_ids(api, 2) == [a, b]  # back, with its new message
    assert await inbox_ids(api, 2, {"archived": True}) == []


async def test_kept_archived_stays_archived_through_new_messages(server, http):
    api = ChatApi.of(server, http)
    a = await api.create_group(1, [2])
    row = await update(api, 2, a, archived=True, keep=True)
    assert row["archived"] is True and row["keptArchived"] is True
    await api.send(1, a)
    assert await inbox_ids(api, 2) == []
    assert await inbox_ids(api, 2, {"archived": True}) == [a]
    row = await update(api, 2, a, archived=False)
    assert row["archived"] is False and row["keptArchived"] is False
    assert await inbox_ids(api, 2) == [a]


async def test_pinned_come_first_in_pin_order_and_the_pages_visit_every_conversation_once(server, http):
    api = ChatApi.of(server, http)
    cids = [await api.create_group(1, [2]) for _ in range(7)]
    for cid in cids:
        await api.send(1, cid)
    # newest activity first: cids reversed; pin 2, then 5, then 0
    for i in (2, 5, 0):
        assert (await update(api, 2, cids[i], pinned=True))["pinned"] is True
    expected = [cids[2], cids[5], cids[0]] + [c for c in reversed(cids) if c not in (cids[2], cids[5], cids[0])]
    for first in (1, 2, 3, 50):
        assert await inbox_ids(api, 2, first=first) == expected
    assert await inbox_ids(api, 2, {"pinned": True}) == expected[:3]
    assert await inbox_ids(api, 2, {"pinned": False}) == expected[3:]
    # pinning again keeps its place; new activity does not reorder the pinned ones
    before = (await update(api, 2, cids[2], pinned=True))["pinnedAt"]
    assert (await update(api, 2, cids[2], pinned=True))["pinnedAt"] == before
    await api.send(1, cids[0])
    assert (await inbox_ids(api, 2))[:3] == expected[:3]
    await update(api, 2, cids[5], pinned=False)
    assert (await inbox_ids(api, 2))[:2] == [cids[2], cids[0]]


async def test_inbox_filters_unread_only_and_muted(server, http):
    api = ChatApi.of(server, http)
    read = await api.create_group(1, [2])
    unread = await api.create_group(1, [2])
    muted = await api.create_group(1, [2])
    for cid in (read, unread, muted):
        await api.send(1, cid)
    await api.mark_read(2, read, 1)
    await update(api, 2, muted, muted=True)
    assert await inbox_ids(api, 2, {"unreadOnly": True}) == [muted, unread]
    assert await inbox_ids(api, 2, {"unreadOnly": True, "muted": False}) == [unread]
    assert await inbox_ids(api, 2, {"muted": True}) == [muted]
    assert await inbox_ids(api, 2, {}) == [muted, unread, read]


async def test_bad_settings_are_coded_errors_and_write_nothing(server, http, engine):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2])
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    future = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    cases = [
        ({"c": cid, "until": past}, "BAD_USER_INPUT"),
        ({"c": cid, "muted": False, "until": future}, "BAD_USER_INPUT"),
        ({"c": cid, "archived": False, "keep": True}, "BAD_USER_INPUT"),
        ({"c": "999999", "pinned": True}, "NOT_FOUND"),
        ({"c": "x", "pinned": True}, "BAD_USER_INPUT"),
    ]
    for variables, code in cases:
        assert error_code(await api.error(UPDATE, variables, user=2)) == code, variables
    assert error_code(await api.error(UPDATE, {"c": cid, "pinned": True}, user=3)) == "NOT_FOUND"  # not a member
    from sqlalchemy import text

    async with engine.connect() as conn:
        changed = await conn.scalar(
            text(
                "SELECT count(*) FROM conversation_member WHERE muted OR pinned_at IS NOT NULL"
                " OR archived_seq IS NOT NULL OR keep_archived"
            )
        )
    assert changed == 0
    # nothing asked: nothing changes, the conversation is answered
    assert (await update(api, 2, cid))["pinned"] is False


async def test_every_device_of_the_viewer_is_told_and_nobody_else(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2])
    await api.send(1, cid)
    phone, laptop, other = await asyncio.gather(ws_connect(server, 2), ws_connect(server, 2), ws_connect(server, 1))
    try:
        ops = [
            await phone.subscribe(OWN_EVENTS, {"c": cid}),
            await laptop.subscribe(OWN_EVENTS, {}),
            await other.subscribe(OWN_EVENTS, {}),
        ]
        await wait_active_subscriptions(server, 3)
        await update(api, 2, cid, pinned=True, muted=True)
        for op in ops[:2]:
            event = (await op.next())["membershipUpdated"]
            assert event == {
                "conversationId": cid,
                "muted": True,
                "archived": False,
                "pinned": True,
                "lastReadSeq": 0,
                "conversation": {"id": cid, "pinned": True, "muted": True, "archived": False, "unreadCount": 1},
            }
        await update(api, 1, cid, archived=True)  # user 1's own change reaches user 1 only
        assert (await ops[2].next())["membershipUpdated"]["archived"] is True
        await update(api, 2, cid, muted=False)
        for op in ops[:2]:  # the next event of 2's devices is 2's next change, not 1's
            assert (await op.next())["membershipUpdated"]["muted"] is False
    finally:
        await asyncio.gather(phone.close(), laptop.close(), other.close())


LEAF_FIELDS = """
query($t: String!) { __type(name: $t) { fields { name args { type { kind } }
  type { kind ofType { kind ofType { kind ofType { kind } } } } } } }
"""


async def leaf_fields(api: ChatApi, type_name: str) -> list[str]:
    """The type's fields a selection can name alone: scalar or enum values, no required argument."""

    def leaf(t: dict | None) -> bool:
        while t is not None and t["kind"] in ("NON_NULL", "LIST"):
            t = t["ofType"]
        return t is not None and t["kind"] in ("SCALAR", "ENUM")

    fields = (await api.data(LEAF_FIELDS, {"t": type_name}, user=1))["__type"]["fields"]
    return [f["name"] for f in fields if leaf(f["type"]) and all(a["type"]["kind"] != "NON_NULL" for a in f["args"])]


async def test_an_inbox_page_answers_each_field_alone_as_it_does_among_all(server, http):
    """An inbox page reads the membership's settings and the last message's edits, deletes and replies
    only when a selected field needs them (Query.inbox, for speed): every field selected alone answers
    what it answers in a selection of all of them, for settings and a last message that are not the
    defaults."""
    api = ChatApi.of(server, http)
    plain = await api.create_group(1, [2])
    kept = await api.create_group(1, [2])
    await api.send(1, plain)
    first = await api.send(1, kept)
    message_id = await api.data("query($c: ID!) { conversation(id: $c) { lastMessage { id } } }", {"c": kept}, user=1)
    reply = """mutation($c: ID!, $m: UUID!, $r: ID) { sendMessage(conversationId: $c, clientMsgId: $m, body: "re",
               replyTo: $r) { message { seq } } }"""
    quoted = message_id["conversation"]["lastMessage"]["id"]
    seq = (await api.data(reply, {"c": kept, "m": str(uuid4()), "r": quoted}, user=2))["sendMessage"]["message"]["seq"]
    edit = 'mutation($c: ID!, $s: Long!) { editMessage(conversationId: $c, seq: $s, body: "edited") { changeSeq } }'
    await api.data(edit, {"c": kept, "s": seq}, user=2)
    assert seq == first + 1
    until = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    await update(api, 1, kept, until=until, archived=True, keep=True, pinned=True)
    privately = "mutation($c: ID!) { updateMembership(conversationId: $c, privateReceipts: true) { id } }"
    await api.data(privately, {"c": kept}, user=1)
    conversation_fields = await leaf_fields(api, "Conversation")
    message_fields = await leaf_fields(api, "Message")
    assert {"muted", "archived", "pinnedAt", "lastChangeSeq", "privateReceipts"} <= set(conversation_fields)
    assert {"editedAt", "replyCount", "deletedAt"} <= set(message_fields)

    async def page(nodes: str) -> list[dict]:
        query = f"{{ inbox(first: 10, filter: {{archived: null}}) {{ nodes {{ id {nodes} }} }} }}"
        return (await api.data(query, user=1))["inbox"]["nodes"]

    every = await page(" ".join(conversation_fields) + " lastMessage { " + " ".join(message_fields) + " }")
    assert [node["id"] for node in every] == [kept, plain]
    assert every[0]["muted"] and every[0]["keptArchived"] and every[0]["privateReceipts"], every[0]
    assert every[0]["lastMessage"]["editedAt"] is not None and every[0]["lastChangeSeq"] > 0, every[0]
    for name in conversation_fields:
        assert await page(name) == [{"id": n["id"], name: n[name]} for n in every], name
    for name in message_fields:
        assert await page(f"lastMessage {{ {name} }}") == [
            {"id": n["id"], "lastMessage": {name: n["lastMessage"][name]}} for n in every
        ], name
