"""Private read receipts: a user setting, optionally per conversation, that keeps the user out of the
others' seen, seenBy, seenByCount, delivered and deliveredCount; their own unread still works."""

from __future__ import annotations

from tests.support.live import ChatApi, wait_active_subscriptions, ws_connect

SETTINGS = "mutation($p: Boolean!) { updateViewerSettings(privateReceipts: $p) { privateReceipts } }"
OVERRIDE = (
    "mutation($c: ID!, $p: Boolean) { updateMembership(conversationId: $c, privateReceipts: $p) { privateReceipts } }"
)
THEIRS = """
query($c: ID!) { conversation(id: $c) { members { userId lastReadSeq }
  lastMessage { seen seenByCount seenBy delivered deliveredCount } } }
"""
OWN = "query($c: ID!) { conversation(id: $c) { lastReadSeq unreadCount privateReceipts } viewer { totalUnread } }"


async def receipts(api: ChatApi, cid: str, of: int = 2) -> dict:
    data = (await api.data(THEIRS, {"c": cid}, user=1))["conversation"]
    marks = {m["userId"]: m["lastReadSeq"] for m in data["members"]}
    return {"lastReadSeq": marks[str(of)], **data["lastMessage"]}


async def own(api: ChatApi, cid: str, user: int = 2) -> dict:
    data = await api.data(OWN, {"c": cid}, user=user)
    return {**data["conversation"], "totalUnread": data["viewer"]["totalUnread"]}


HIDDEN = {"lastReadSeq": 0, "seen": False, "seenByCount": 0, "seenBy": [], "delivered": False, "deliveredCount": 0}
SHOWN = {"lastReadSeq": 2, "seen": True, "seenByCount": 1, "seenBy": ["2"], "delivered": True, "deliveredCount": 1}


async def test_private_receipts_hide_the_reader_and_their_own_unread_still_works(server, http):
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2])
    assert (await api.data(SETTINGS, {"p": True}, user=2))["updateViewerSettings"] == {"privateReceipts": True}
    await api.send(1, cid)
    await api.send(1, cid)
    client = await ws_connect(server, 1)
    try:
        op = await client.subscribe("subscription { readUpdated { userId lastReadSeq } }", {})
        await wait_active_subscriptions(server, 1)
        read = await api.mark_read(2, cid, 2)
        assert (read["lastReadSeq"], read["unreadCount"]) == (2, 0)
        await api.data(
            "mutation($c: ID!) { markDelivered(conversationId: $c, seq: 2) { advanced } }", {"c": cid}, user=2
        )
        assert await receipts(api, cid) == HIDDEN
        assert await own(api, cid) == {"lastReadSeq": 2, "unreadCount": 0, "privateReceipts": True, "totalUnread": 0}
        await api.send(1, cid)
        assert await own(api, cid) == {"lastReadSeq": 2, "unreadCount": 1, "privateReceipts": True, "totalUnread": 1}
        # user 1 heard nothing of 2's reads: the next readUpdated is the public one after 2 goes public
        await api.data(SETTINGS, {"p": False}, user=2)
        await api.mark_read(2, cid, 3)
        assert (await op.next())["readUpdated"] == {"userId": "2", "lastReadSeq": 3}
    finally:
        await client.close()
    assert (await receipts(api, cid))["seenBy"] == ["2"]


async def test_a_conversation_may_differ_from_the_default_and_new_ones_take_the_default(server, http):
    api = ChatApi.of(server, http)
    public_here = await api.create_group(1, [2])
    await api.data(SETTINGS, {"p": True}, user=2)
    private_here = await api.create_group(1, [2])  # made after: private from the start
    assert (await api.data(OVERRIDE, {"c": public_here, "p": False}, user=2))["updateMembership"] == {
        "privateReceipts": False
    }
    for cid in (public_here, private_here):
        await api.send(1, cid)
        await api.send(1, cid)
        await api.mark_read(2, cid, 2)
    assert await receipts(api, public_here) == SHOWN
    assert await receipts(api, private_here) == HIDDEN
    # the default changes; the conversation with a choice of its own keeps it
    await api.data(SETTINGS, {"p": False}, user=2)
    assert (await own(api, public_here))["privateReceipts"] is False
    assert (await own(api, private_here))["privateReceipts"] is False
    await api.data(SETTINGS, {"p": True}, user=2)
    assert (await own(api, public_here))["privateReceipts"] is False
    assert (await api.data("{ viewer { privateReceipts } }", user=2))["viewer"] == {"privateReceipts": True}


DELETE = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }"
INBOX_ROW = "{ inbox(first: 10) { nodes { id unreadCount } } }"


async def test_deleted_messages_the_private_reader_has_read_never_lower_their_unread(server, http):
    """The issue's case: deletes at or below the own read position (above the public watermark, which private
    receipts keep at 0) are read already; only those above it leave the unread count, which never goes below 0."""
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2, 3])
    for _ in range(5):
        await api.send(1, cid)
    for seq in (1, 4):
        await api.data(DELETE, {"c": cid, "s": seq}, user=1)
    await api.data(OVERRIDE, {"c": cid, "p": True}, user=3)
    answer = await api.mark_read(3, cid, 3)
    assert answer == {"lastReadSeq": 3, "advanced": False, "unreadCount": 1}  # seq 5
    assert await own(api, cid, user=3) == {
        "lastReadSeq": 3,
        "unreadCount": 1,
        "privateReceipts": True,
        "totalUnread": 1,
    }
    await api.data(DELETE, {"c": cid, "s": 2}, user=1)  # read already: nothing changes
    assert await own(api, cid, user=3) == {
        "lastReadSeq": 3,
        "unreadCount": 1,
        "privateReceipts": True,
        "totalUnread": 1,
    }
    await api.data(DELETE, {"c": cid, "s": 5}, user=1)  # the one unread: none left
    assert (await own(api, cid, user=3))["unreadCount"] == (await own(api, cid, user=3))["totalUnread"] == 0
    rows = (await api.data(INBOX_ROW, user=3))["inbox"]["nodes"]
    assert rows == [{"id": cid, "unreadCount": 0}]
    assert (await receipts(api, cid, of=3))["lastReadSeq"] == 0  # still private


async def test_turning_private_receipts_off_keeps_what_was_read_and_the_next_mark_read_publishes(server, http):
    """markRead never lowers the own read position: after reading to 4 privately and turning private receipts
    off, a markRead(2) publishes 2 and leaves the viewer's own position (and unread) where it was."""
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2])
    for _ in range(5):
        await api.send(1, cid)
    await api.data(DELETE, {"c": cid, "s": 3}, user=1)
    await api.data(OVERRIDE, {"c": cid, "p": True}, user=2)
    assert await api.mark_read(2, cid, 4) == {"lastReadSeq": 4, "advanced": False, "unreadCount": 1}
    await api.data(OVERRIDE, {"c": cid, "p": False}, user=2)
    assert await api.mark_read(2, cid, 2) == {"lastReadSeq": 4, "advanced": True, "unreadCount": 1}
    assert await own(api, cid) == {"lastReadSeq": 4, "unreadCount": 1, "privateReceipts": False, "totalUnread": 1}
    assert (await receipts(api, cid))["lastReadSeq"] == 2
    assert await api.mark_read(2, cid, 5) == {"lastReadSeq": 5, "advanced": True, "unreadCount": 0}
    assert (await receipts(api, cid))["lastReadSeq"] == 5
