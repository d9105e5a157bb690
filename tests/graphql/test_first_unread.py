"""Conversation.firstUnreadSeq: the first message after the viewer's own read position that is not
deleted (where a client draws its 'new messages' line), against the session's server on real PostgreSQL.
The read-state model (test_read_state_machine.py) holds it through random operations; these are the
cases by name."""

from __future__ import annotations

from ..conftest import error_code
from ..support.live import ChatApi

FIRST = "query($c: ID!) { conversation(id: $c) { lastReadSeq unreadCount firstUnreadSeq } }"
INBOX = "{ inbox(first: 10) { nodes { id unreadCount firstUnreadSeq } } }"
DELETE = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }"
UNREAD = "mutation($c: ID!, $s: Long!) { markUnread(conversationId: $c, fromSeq: $s) { firstUnreadSeq } }"
PRIVATE = "mutation($c: ID!) { updateMembership(conversationId: $c, privateReceipts: true) { privateReceipts } }"


async def first(api: ChatApi, user: int, cid: str) -> dict:
    return (await api.data(FIRST, {"c": cid}, user=user))["conversation"]


async def delete(api: ChatApi, user: int, cid: str, seq: int) -> None:
    await api.data(DELETE, {"c": cid, "s": seq}, user=user)


async def test_it_is_the_next_seq_after_the_read_position_and_null_when_all_is_read(api):
    cid = await api.create_group(1, [2])
    assert (await first(api, 2, cid))["firstUnreadSeq"] is None  # no message yet
    for i in range(4):
        await api.send(1, cid, f"m{i}")
    assert await first(api, 2, cid) == {"lastReadSeq": 0, "unreadCount": 4, "firstUnreadSeq": 1}
    await api.mark_read(2, cid, 2)
    assert (await first(api, 2, cid))["firstUnreadSeq"] == 3
    await api.mark_read(2, cid, 4)
    assert (await first(api, 2, cid))["firstUnreadSeq"] is None
    assert (await first(api, 1, cid))["firstUnreadSeq"] is None  # the sender read their own


async def test_deleted_messages_are_skipped_and_all_deleted_is_null(api):
    cid = await api.create_group(1, [2])
    for i in range(5):
        await api.send(1, cid, f"m{i}")
    await api.mark_read(2, cid, 1)
    await delete(api, 1, cid, 2)
    await delete(api, 1, cid, 3)
    assert await first(api, 2, cid) == {"lastReadSeq": 1, "unreadCount": 2, "firstUnreadSeq": 4}
    await delete(api, 1, cid, 4)
    await delete(api, 1, cid, 5)
    assert await first(api, 2, cid) == {"lastReadSeq": 1, "unreadCount": 0, "firstUnreadSeq": None}


async def test_it_follows_mark_unread_over_deleted_messages(api):
    cid = await api.create_group(1, [2])
    for i in range(5):
        await api.send(1, cid, f"m{i}")
    await api.mark_read(2, cid, 5)
    await delete(api, 1, cid, 2)
    answer = (await api.data(UNREAD, {"c": cid, "s": 2}, user=2))["markUnread"]
    assert answer == {"firstUnreadSeq": 3}  # 2 is a tombstone
    assert await first(api, 2, cid) == {"lastReadSeq": 1, "unreadCount": 3, "firstUnreadSeq": 3}
    await api.data(UNREAD, {"c": cid, "s": 1}, user=2)
    assert (await first(api, 2, cid))["firstUnreadSeq"] == 1


async def test_a_private_reader_s_own_position_counts(api):
    cid = await api.create_group(1, [2])
    for i in range(5):
        await api.send(1, cid, f"m{i}")
    await api.data(PRIVATE, {"c": cid}, user=2)
    await api.mark_read(2, cid, 2)  # own position 2, the watermark others see stays at 0
    await delete(api, 1, cid, 3)
    assert await first(api, 2, cid) == {"lastReadSeq": 2, "unreadCount": 2, "firstUnreadSeq": 4}


async def test_the_inbox_answers_it_per_conversation(api):
    plain, deleted, read = [await api.create_group(7_300_001, [7_300_002]) for _ in range(3)]
    for cid in (plain, deleted, read):
        for i in range(3):
            await api.send(7_300_002, cid, f"m{i}")
    await delete(api, 7_300_002, deleted, 1)
    await api.mark_read(7_300_001, read, 3)
    nodes = {n["id"]: n for n in (await api.data(INBOX, user=7_300_001))["inbox"]["nodes"]}
    assert nodes[plain] == {"id": plain, "unreadCount": 3, "firstUnreadSeq": 1}
    assert nodes[deleted] == {"id": deleted, "unreadCount": 2, "firstUnreadSeq": 2}
    assert nodes[read] == {"id": read, "unreadCount": 0, "firstUnreadSeq": None}


async def test_a_non_member_and_an_anonymous_caller_read_nothing(api):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "m")
    assert error_code(await api.error(FIRST, {"c": cid}, user=3)) == "NOT_FOUND"
    assert error_code(await api.error(FIRST, {"c": cid}, user=None)) == "UNAUTHENTICATED"
