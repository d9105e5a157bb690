"""createDirectConversation, createGroup, addMembers, removeMember."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.conftest import GraphQLClient, error_code
from tests.support.writepath import burst_server, gated, wave  # noqa: F401 (burst_server: a fixture)

CONVERSATION_FIELDS = "id type title lastSeq lastReadSeq unreadCount memberCount members { userId role lastReadSeq }"
CREATE_DIRECT = f"""
mutation Direct($uid: ID!) {{ createDirectConversation(userId: $uid) {{ {CONVERSATION_FIELDS} }} }}
"""
CREATE_GROUP = f"""
mutation Group($title: String!, $ids: [ID!]!) {{
  createGroup(title: $title, memberIds: $ids) {{ {CONVERSATION_FIELDS} }}
}}
"""
ADD_MEMBERS = f"""
mutation Add($cid: ID!, $ids: [ID!]!) {{ addMembers(conversationId: $cid, userIds: $ids) {{ {CONVERSATION_FIELDS} }} }}
"""
REMOVE_MEMBER = """
mutation Remove($cid: ID!, $uid: ID!) { removeMember(conversationId: $cid, userId: $uid) { conversationId userId } }
"""
CONVERSATION = f"query Conv($id: ID!) {{ conversation(id: $id) {{ {CONVERSATION_FIELDS} }} }}"
SEND = """
mutation Send($cid: ID!, $cmid: UUID!, $body: String!) {
  sendMessage(conversationId: $cid, clientMsgId: $cmid, body: $body) { message { seq } }
}
"""
MARK_READ = "mutation Read($cid: ID!, $seq: Long!) { markRead(conversationId: $cid, seq: $seq) { lastReadSeq } }"
MESSAGES = "query History($cid: ID!) { messages(conversationId: $cid) { nodes { seq } } }"
SYNC = "query Sync($cid: ID!) { sync(cursors: [{conversationId: $cid, afterSeq: 0}]) { lastSeq } }"
INBOX = "{ inbox { nodes { id } } }"
MAX_MEMBERS = 1000


async def direct(client: GraphQLClient, user: int, other: Any) -> dict:
    return (await client.data(CREATE_DIRECT, {"uid": str(other)}, user=user))["createDirectConversation"]


async def group(client: GraphQLClient, owner: int, ids: list[Any], title: str = "room") -> dict:
    data = await client.data(CREATE_GROUP, {"title": title, "ids": [str(u) for u in ids]}, user=owner)
    return data["createGroup"]


async def add(client: GraphQLClient, user: int, cid: str, ids: list[Any]) -> dict:
    return (await client.data(ADD_MEMBERS, {"cid": cid, "ids": [str(u) for u in ids]}, user=user))["addMembers"]


async def remove(client: GraphQLClient, user: int, cid: str, target: int) -> dict:
    return (await client.data(REMOVE_MEMBER, {"cid": cid, "uid": str(target)}, user=user))["removeMember"]


async def fails(client: GraphQLClient, query: str, variables: dict, user: int | None) -> str:
    return error_code(await client.error(query, variables, user=user))


async def send(client: GraphQLClient, user: int, cid: str) -> int:
    data = await client.data(SEND, {"cid": cid, "cmid": str(uuid.uuid4()), "body": "m"}, user=user)
    return data["sendMessage"]["message"]["seq"]


async def scalar(engine: AsyncEngine, sql: str, **params: Any) -> Any:
    async with engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar_one()


async def roles(engine: AsyncEngine, cid: str) -> dict[str, str]:
    """user_id -> role of the conversation's members, from the database."""
    async with engine.connect() as conn:
        result = await conn.execute(
            text("SELECT user_id, role FROM conversation_member WHERE conversation_id = :cid"), {"cid": int(cid)}
        )
        return {row.user_id: row.role for row in result}


async def table_counts(engine: AsyncEngine) -> tuple[int, int, int]:
    """(conversations, members, direct pairs)."""
    async with engine.connect() as conn:
        result = await conn.execute(
            text(
                "SELECT (SELECT count(*) FROM conversation), (SELECT count(*) FROM conversation_member), "
                "(SELECT count(*) FROM direct_pair)"
            )
        )
        return tuple(result.one())


def member_roles(conversation: dict) -> dict[str, str]:
    return {m["userId"]: m["role"] for m in conversation["members"]}


# Bursts go to a server of their own (tests/support/writepath.py: a long request timeout, no relay),
# each wave of concurrent calls on a new connection pool, released together through a gate.


# --- createDirectConversation -------------------------------------------------------------


async def test_both_users_creating_their_direct_chat_at_once_get_one_conversation(burst_server, engine):
    async with wave(burst_server) as burst:
        answers = await gated(engine, "direct_pair", [direct(burst, 1 + i % 2, 2 - i % 2) for i in range(20)])

    assert len({a["id"] for a in answers}) == 1
    cid = answers[0]["id"]
    assert await table_counts(engine) == (1, 2, 1)
    async with engine.connect() as conn:
        pair = (await conn.execute(text("SELECT user_low, user_high, conversation_id FROM direct_pair"))).one()
    assert tuple(pair) == ("1", "2", int(cid))
    assert await roles(engine, cid) == {"1": "MEMBER", "2": "MEMBER"}
    assert await scalar(engine, "SELECT type FROM conversation") == "DIRECT"


async def test_create_direct_again_returns_the_same_conversation_from_either_side(client, engine):
    first = await direct(client, 1, 2)
    again = await direct(client, 1, 2)
    other_side = await direct(client, 2, 1)

    assert first["id"] == again["id"] == other_side["id"]
    assert first["type"] == "DIRECT"
    assert first["title"] is None
    assert first["memberCount"] == 2
    assert member_roles(first) == {"1": "MEMBER", "2": "MEMBER"}
    assert await table_counts(engine) == (1, 2, 1)


async def test_direct_conversations_of_different_pairs_are_different(client, engine):
    a = await direct(client, 1, 2)
    b = await direct(client, 1, 3)
    c = await direct(client, 3, 2)
    assert len({a["id"], b["id"], c["id"]}) == 3
    assert await table_counts(engine) == (3, 6, 3)


async def test_direct_conversation_with_yourself_is_bad_user_input(client, engine):
    assert await fails(client, CREATE_DIRECT, {"uid": "1"}, 1) == "BAD_USER_INPUT"
    assert await table_counts(engine) == (0, 0, 0)


@pytest.mark.parametrize(
    "uid",
    ["", "u" * 256, "a\nb", "\x00", "a\x7fb", "\x85"],
    ids=["empty", "256-chars", "newline", "nul", "del", "c1-control"],
)
async def test_direct_conversation_with_malformed_user_id_is_bad_user_input(client, engine, uid):
    assert await fails(client, CREATE_DIRECT, {"uid": uid}, 1) == "BAD_USER_INPUT"
    assert await table_counts(engine) == (0, 0, 0)


# --- createGroup ----------------------------------------------------------------------------


async def test_create_group_makes_caller_owner_and_others_members_deduped_without_caller(client, engine):
    created = await group(client, 1, [3, 2, 3, 1, 2], title="Team")

    assert created["type"] == "GROUP"
    assert created["title"] == "Team"
    assert (created["lastSeq"], created["lastReadSeq"], created["unreadCount"]) == (0, 0, 0)
    assert created["memberCount"] == 3
    assert member_roles(created) == {"1": "OWNER", "2": "MEMBER", "3": "MEMBER"}
    assert await roles(engine, created["id"]) == {"1": "OWNER", "2": "MEMBER", "3": "MEMBER"}
    assert await table_counts(engine) == (1, 3, 0)


async def test_group_of_1000_members_in_total_is_accepted(client, engine):
    created = await group(client, 1, list(range(2, MAX_MEMBERS + 1)))
    assert created["memberCount"] == MAX_MEMBERS
    assert await scalar(engine, "SELECT count(*) FROM conversation_member") == MAX_MEMBERS
    assert await scalar(engine, "SELECT count(*) FROM conversation_member WHERE role = 'OWNER'") == 1


async def test_group_of_1000_with_caller_and_duplicates_in_member_ids_is_accepted(client, engine):
    ids = list(range(1, MAX_MEMBERS + 1)) + list(range(2, 50))  # caller listed, some twice: 1,000 distinct
    created = await group(client, 1, ids)
    assert created["memberCount"] == MAX_MEMBERS
    assert await roles(engine, created["id"]) == {"1": "OWNER", **{str(u): "MEMBER" for u in range(2, MAX_MEMBERS + 1)}}


@pytest.mark.parametrize(
    "ids",
    [list(range(2, MAX_MEMBERS + 2)), list(range(1, MAX_MEMBERS + 2))],
    ids=["1000-others", "caller-listed-plus-1000-others"],
)
async def test_group_of_1001_members_is_limit_exceeded_and_writes_nothing(client, engine, ids):
    assert await fails(client, CREATE_GROUP, {"title": "big", "ids": [str(u) for u in ids]}, 1) == "LIMIT_EXCEEDED"
    assert await table_counts(engine) == (0, 0, 0)


@pytest.mark.parametrize(
    "title",
    ["", "   ", "x" * 201, "a\x00b"],
    ids=["empty", "whitespace-only", "201-chars", "nul"],
)
async def test_invalid_group_title_is_bad_user_input_and_writes_nothing(client, engine, title):
    assert await fails(client, CREATE_GROUP, {"title": title, "ids": ["2"]}, 1) == "BAD_USER_INPUT"
    assert await table_counts(engine) == (0, 0, 0)


async def test_group_members_may_have_the_largest_64_bit_id(client, engine):
    largest = 2**63 - 1
    created = await group(client, 1, [largest])
    assert member_roles(created) == {"1": "OWNER", str(largest): "MEMBER"}
    assert await roles(engine, created["id"]) == {"1": "OWNER", str(largest): "MEMBER"}


async def test_group_title_of_200_characters_is_accepted(client):
    created = await group(client, 1, [2], title="t" * 200)
    assert created["title"] == "t" * 200


@pytest.mark.parametrize(
    "ids",
    [["2", ""], ["2", "u" * 256], ["a\tb"], ["2", "x\x1b[31m"], ["\u2028ok", "\x9f"]],
    ids=["empty", "256-chars", "tab", "escape", "c1-control"],
)
async def test_group_member_ids_with_a_bad_id_is_bad_user_input_and_writes_nothing(client, engine, ids):
    assert await fails(client, CREATE_GROUP, {"title": "room", "ids": ids}, 1) == "BAD_USER_INPUT"
    assert await table_counts(engine) == (0, 0, 0)


async def test_create_group_without_token_is_unauthenticated(client, engine):
    assert await fails(client, CREATE_GROUP, {"title": "room", "ids": ["2"]}, None) == "UNAUTHENTICATED"
    assert await table_counts(engine) == (0, 0, 0)


# --- addMembers -----------------------------------------------------------------------------


async def test_any_member_may_add_and_present_ids_are_ignored(client, engine):
    cid = (await group(client, 1, [2]))["id"]

    updated = await add(client, 2, cid, [1, 2, 3, 4, 3])

    assert updated["memberCount"] == 4
    assert member_roles(updated) == {"1": "OWNER", "2": "MEMBER", "3": "MEMBER", "4": "MEMBER"}
    assert await roles(engine, cid) == {"1": "OWNER", "2": "MEMBER", "3": "MEMBER", "4": "MEMBER"}
    again = await add(client, 3, cid, [1, 4])
    assert again["memberCount"] == 4


async def test_add_members_by_non_member_is_not_found_and_adds_nobody(client, engine):
    cid = (await group(client, 1, [2]))["id"]
    assert await fails(client, ADD_MEMBERS, {"cid": cid, "ids": ["3"]}, 9) == "NOT_FOUND"
    assert await roles(engine, cid) == {"1": "OWNER", "2": "MEMBER"}


async def test_add_members_with_a_bad_id_is_bad_user_input_and_adds_nobody(client, engine):
    cid = (await group(client, 1, [2]))["id"]
    assert await fails(client, ADD_MEMBERS, {"cid": cid, "ids": ["3", "x" * 256]}, 1) == "BAD_USER_INPUT"
    assert await roles(engine, cid) == {"1": "OWNER", "2": "MEMBER"}


async def test_added_members_start_with_nothing_unread(client, engine):
    cid = (await group(client, 1, [2]))["id"]
    for _ in range(5):
        await send(client, 2, cid)

    updated = await add(client, 1, cid, [3])

    newcomer = {m["userId"]: m["lastReadSeq"] for m in updated["members"]}
    assert newcomer == {"1": 0, "2": 5, "3": 5}
    seen_by_newcomer = (await client.data(CONVERSATION, {"id": cid}, user=3))["conversation"]
    assert (seen_by_newcomer["lastSeq"], seen_by_newcomer["lastReadSeq"], seen_by_newcomer["unreadCount"]) == (5, 5, 0)
    await send(client, 2, cid)
    seen_by_newcomer = (await client.data(CONVERSATION, {"id": cid}, user=3))["conversation"]
    assert seen_by_newcomer["unreadCount"] == 1


async def test_adding_past_1000_members_is_limit_exceeded_and_writes_nothing(client, engine):
    cid = (await group(client, 1, list(range(2, 991))))["id"]  # 990 members
    assert (
        await fails(client, ADD_MEMBERS, {"cid": cid, "ids": [str(u) for u in range(5000, 5011)]}, 2)
        == "LIMIT_EXCEEDED"
    )
    assert await scalar(engine, "SELECT count(*) FROM conversation_member") == 990

    # Present ids do not count: 10 new ones (with present ones mixed in) reach exactly 1,000.
    filled = await add(client, 2, cid, [1, 2, 3] + list(range(5000, 5010)))
    assert filled["memberCount"] == MAX_MEMBERS
    assert (await add(client, 2, cid, [4, 5000]))["memberCount"] == MAX_MEMBERS  # nothing new: fine
    assert await fails(client, ADD_MEMBERS, {"cid": cid, "ids": ["7000"]}, 1) == "LIMIT_EXCEEDED"
    assert await scalar(engine, "SELECT count(*) FROM conversation_member") == MAX_MEMBERS
    assert await scalar(engine, "SELECT count(*) FROM conversation_member WHERE user_id = '7000'") == 0


async def test_concurrent_add_members_near_the_limit_never_pass_1000(client, burst_server, engine):
    cid = (await group(client, 1, list(range(2, 991))))["id"]  # 990 members

    async def add_all(batches: list[list[int]]) -> list[str]:
        """Every batch added at once, each by another member; the outcome code of each."""
        async with wave(burst_server) as burst:

            async def add_batch(adder: int, ids: list[int]) -> str:
                body = await burst.execute(ADD_MEMBERS, {"cid": cid, "ids": [str(u) for u in ids]}, user=adder)
                return error_code(body["errors"][0]) if body.get("errors") else "OK"

            return await gated(engine, "conversation_member", [add_batch(1 + i, ids) for i, ids in enumerate(batches)])

    # 20 batches of 4 new ids each: 990 + 4 + 4 = 998, then every other batch would pass 1,000.
    outcomes = await add_all([[10_000 + 4 * i + k for k in range(4)] for i in range(20)])
    assert sorted(outcomes) == ["LIMIT_EXCEEDED"] * 18 + ["OK"] * 2
    assert await scalar(engine, "SELECT count(*) FROM conversation_member") == 998

    # 20 single adds: exactly two fit.
    outcomes = await add_all([[20_000 + i] for i in range(20)])
    assert sorted(outcomes) == ["LIMIT_EXCEEDED"] * 18 + ["OK"] * 2
    assert await scalar(engine, "SELECT count(*) FROM conversation_member") == MAX_MEMBERS
    assert (
        await scalar(engine, "SELECT count(*) FROM conversation_member WHERE conversation_id = :cid", cid=int(cid))
        == MAX_MEMBERS
    )


# --- direct conversations cannot change -----------------------------------------------------


async def test_add_members_to_a_direct_conversation_is_forbidden(client, engine):
    cid = (await direct(client, 1, 2))["id"]
    assert await fails(client, ADD_MEMBERS, {"cid": cid, "ids": ["3"]}, 1) == "FORBIDDEN"
    assert await roles(engine, cid) == {"1": "MEMBER", "2": "MEMBER"}


async def test_changing_members_of_someone_elses_direct_conversation_is_not_found(client, engine):
    cid = (await direct(client, 1, 2))["id"]
    assert await fails(client, ADD_MEMBERS, {"cid": cid, "ids": ["3"]}, 3) == "NOT_FOUND"
    assert await fails(client, REMOVE_MEMBER, {"cid": cid, "uid": "1"}, 3) == "NOT_FOUND"
    assert await roles(engine, cid) == {"1": "MEMBER", "2": "MEMBER"}


@pytest.mark.parametrize("target", [1, 2], ids=["leave", "remove-other"])
async def test_remove_member_from_a_direct_conversation_is_forbidden(client, engine, target):
    cid = (await direct(client, 1, 2))["id"]
    assert await fails(client, REMOVE_MEMBER, {"cid": cid, "uid": str(target)}, 1) == "FORBIDDEN"
    assert await roles(engine, cid) == {"1": "MEMBER", "2": "MEMBER"}


# --- removeMember ---------------------------------------------------------------------------


async def test_a_member_may_leave_a_group(client, engine):
    cid = (await group(client, 1, [2, 3]))["id"]
    assert await remove(client, 2, cid, 2) == {"conversationId": cid, "userId": "2"}
    assert await roles(engine, cid) == {"1": "OWNER", "3": "MEMBER"}


async def test_a_member_removing_another_member_is_forbidden(client, engine):
    cid = (await group(client, 1, [2, 3]))["id"]
    assert await fails(client, REMOVE_MEMBER, {"cid": cid, "uid": "3"}, 2) == "FORBIDDEN"
    assert await fails(client, REMOVE_MEMBER, {"cid": cid, "uid": "1"}, 2) == "FORBIDDEN"
    assert await roles(engine, cid) == {"1": "OWNER", "2": "MEMBER", "3": "MEMBER"}


async def test_the_owner_may_remove_another_member(client, engine):
    cid = (await group(client, 1, [2, 3]))["id"]
    assert await remove(client, 1, cid, 3) == {"conversationId": cid, "userId": "3"}
    assert await roles(engine, cid) == {"1": "OWNER", "2": "MEMBER"}


async def test_removing_a_non_member_is_not_found(client, engine):
    cid = (await group(client, 1, [2]))["id"]
    assert await fails(client, REMOVE_MEMBER, {"cid": cid, "uid": "99"}, 1) == "NOT_FOUND"
    assert await roles(engine, cid) == {"1": "OWNER", "2": "MEMBER"}


async def test_remove_member_by_a_non_member_caller_is_not_found(client, engine):
    cid = (await group(client, 1, [2]))["id"]
    assert await fails(client, REMOVE_MEMBER, {"cid": cid, "uid": "2"}, 9) == "NOT_FOUND"
    assert await fails(client, REMOVE_MEMBER, {"cid": "999999", "uid": "2"}, 1) == "NOT_FOUND"
    assert await roles(engine, cid) == {"1": "OWNER", "2": "MEMBER"}


async def test_when_the_owner_leaves_the_longest_standing_member_becomes_owner(client, engine):
    cid = (await group(client, 1, [5]))["id"]
    await add(client, 1, cid, [2, 3])  # joined later than 5, though with lower ids

    await remove(client, 1, cid, 1)

    assert await roles(engine, cid) == {"5": "OWNER", "2": "MEMBER", "3": "MEMBER"}
    # The new owner has the owner's rights.
    await remove(client, 5, cid, 3)
    assert await roles(engine, cid) == {"5": "OWNER", "2": "MEMBER"}


async def test_a_member_leaving_does_not_change_the_owner(client, engine):
    cid = (await group(client, 1, [2, 3]))["id"]
    await remove(client, 2, cid, 2)
    await remove(client, 1, cid, 3)
    assert await roles(engine, cid) == {"1": "OWNER"}


async def test_removed_member_no_longer_sees_or_writes_the_conversation(client, engine):
    cid = (await group(client, 1, [2, 3]))["id"]
    await send(client, 2, cid)
    await remove(client, 1, cid, 2)

    assert await fails(client, CONVERSATION, {"id": cid}, 2) == "NOT_FOUND"
    assert await fails(client, SEND, {"cid": cid, "cmid": str(uuid.uuid4()), "body": "hi"}, 2) == "NOT_FOUND"
    assert await fails(client, MARK_READ, {"cid": cid, "seq": 1}, 2) == "NOT_FOUND"
    assert await fails(client, MESSAGES, {"cid": cid}, 2) == "NOT_FOUND"
    assert await fails(client, SYNC, {"cid": cid}, 2) == "NOT_FOUND"
    assert (await client.data(INBOX, user=2))["inbox"]["nodes"] == []
    assert await scalar(engine, "SELECT count(*) FROM message") == 1
    # The others carry on.
    assert await send(client, 3, cid) == 2


async def test_a_member_who_left_gets_not_found(client):
    cid = (await group(client, 1, [2]))["id"]
    await remove(client, 2, cid, 2)
    assert await fails(client, CONVERSATION, {"id": cid}, 2) == "NOT_FOUND"
    assert await fails(client, ADD_MEMBERS, {"cid": cid, "ids": ["2"]}, 2) == "NOT_FOUND"
