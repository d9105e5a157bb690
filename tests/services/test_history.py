"""Reading: message history pages, the inbox, the viewer's totals, "seen by", and sync.

Every piece of data is written through the GraphQL API over HTTP.
"""

from __future__ import annotations

import base64
import json
import re
import uuid

import pytest

from ..conftest import error_code

# ---------------------------------------------------------------- helpers

ALIASES = 20  # fields per setup document (the server's default alias limit)

CONNECTION_FIELDS = """
    edges { cursor node { seq body senderId conversationId } }
    nodes { seq }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
"""


async def create_group(client, owner: int, members: list[int], title: str = "group") -> str:
    data = await client.data(
        "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }",
        {"t": title, "m": [str(m) for m in members]},
        user=owner,
    )
    return data["createGroup"]["id"]


async def create_direct(client, user: int, other: int) -> str:
    data = await client.data(
        "mutation($u: ID!) { createDirectConversation(userId: $u) { id } }", {"u": str(other)}, user=user
    )
    return data["createDirectConversation"]["id"]


async def send(client, user: int, cid: str, body: str = "hello") -> int:
    data = await client.data(
        "mutation($c: ID!, $k: UUID!, $b: String!) {"
        " sendMessage(conversationId: $c, clientMsgId: $k, body: $b) { message { seq } } }",
        {"c": cid, "k": str(uuid.uuid4()), "b": body},
        user=user,
    )
    return data["sendMessage"]["message"]["seq"]


async def send_many(client, user: int, cid: str, count: int, prefix: str = "m") -> None:
    """`count` messages in order, bodies f"{prefix}{seq}" (the conversation must start empty).

    Mutation fields run one after the other, so aliases in one document keep the order.
    """
    done = 0
    while done < count:
        chunk = range(done + 1, min(count, done + ALIASES) + 1)
        fields = " ".join(
            f'm{n}: sendMessage(conversationId: $c, clientMsgId: "{uuid.uuid4()}", body: "{prefix}{n}")'
            " { message { seq } }"
            for n in chunk
        )
        data = await client.data(f"mutation($c: ID!) {{ {fields} }}", {"c": cid}, user=user)
        assert [data[f"m{n}"]["message"]["seq"] for n in chunk] == list(chunk)
        done = chunk[-1]


async def mark_read(client, user: int, cid: str, seq: int) -> dict:
    data = await client.data(
        "mutation($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { lastReadSeq unreadCount } }",
        {"c": cid, "s": seq},
        user=user,
    )
    return data["markRead"]


async def messages_page(client, user: int, cid: str, **args) -> dict:
    data = await client.data(
        "query($c: ID!, $first: Int, $after: String, $last: Int, $before: String) {"
        f" messages(conversationId: $c, first: $first, after: $after, last: $last, before: $before) {{"
        f" {CONNECTION_FIELDS} }} }}",
        {"c": cid, **args},
        user=user,
    )
    return data["messages"]


def seqs(connection: dict) -> list[int]:
    return [edge["node"]["seq"] for edge in connection["edges"]]


def assert_consistent(connection: dict) -> None:
    """edges and nodes agree; a cursor is the seq in decimal; start/end cursors are the ends."""
    assert [n["seq"] for n in connection["nodes"]] == seqs(connection)
    for edge in connection["edges"]:
        assert edge["cursor"] == str(edge["node"]["seq"])
        assert edge["node"]["body"] == f"m{edge['node']['seq']}"
    info = connection["pageInfo"]
    if connection["edges"]:
        assert info["startCursor"] == connection["edges"][0]["cursor"]
        assert info["endCursor"] == connection["edges"][-1]["cursor"]
    else:
        assert info["startCursor"] is None and info["endCursor"] is None


def page_info(has_next: bool, has_previous: bool, start: str | None, end: str | None) -> dict:
    return {"hasNextPage": has_next, "hasPreviousPage": has_previous, "startCursor": start, "endCursor": end}


@pytest.fixture
async def hundred(client) -> str:
    """A group of users 1 (owner), 2 and 3 holding messages seq 1..100, bodies m1..m100, sent by 1."""
    cid = await create_group(client, 1, [2, 3])
    await send_many(client, 1, cid, 100)
    return cid


@pytest.fixture
async def five(client) -> str:
    """Like `hundred` with seq 1..5 (for requests that must be refused)."""
    cid = await create_group(client, 1, [2, 3])
    await send_many(client, 1, cid, 5)
    return cid


# ---------------------------------------------------------------- history pages


async def test_messages_without_arguments_returns_the_newest_50_ascending(client, hundred):
    page = await messages_page(client, 2, hundred)
    assert seqs(page) == list(range(51, 101))
    assert_consistent(page)
    assert page["pageInfo"] == page_info(False, True, "51", "100")


async def test_messages_last_5_returns_the_newest_5_ascending(client, hundred):
    page = await messages_page(client, 2, hundred, last=5)
    assert seqs(page) == [96, 97, 98, 99, 100]
    assert_consistent(page)
    assert page["pageInfo"] == page_info(False, True, "96", "100")


async def test_messages_first_3_after_client_built_cursor_40_returns_41_to_43(client, hundred):
    page = await messages_page(client, 2, hundred, first=3, after="40")
    assert seqs(page) == [41, 42, 43]
    assert_consistent(page)
    assert page["pageInfo"] == page_info(True, True, "41", "43")


async def test_messages_last_3_before_10_returns_7_to_9(client, hundred):
    page = await messages_page(client, 2, hundred, last=3, before="10")
    assert seqs(page) == [7, 8, 9]
    assert_consistent(page)
    assert page["pageInfo"] == page_info(True, True, "7", "9")


async def test_messages_after_alone_pages_forward_with_the_default_size_50(client, hundred):
    page = await messages_page(client, 2, hundred, after="10")
    assert seqs(page) == list(range(11, 61))
    assert page["pageInfo"] == page_info(True, True, "11", "60")


@pytest.mark.parametrize(
    ("args", "expected", "info"),
    [
        # the oldest end
        ({"first": 3}, [1, 2, 3], page_info(True, False, "1", "3")),
        ({"first": 3, "after": "0"}, [1, 2, 3], page_info(True, False, "1", "3")),
        ({"last": 3, "before": "4"}, [1, 2, 3], page_info(True, False, "1", "3")),
        ({"last": 5, "before": "3"}, [1, 2], page_info(True, False, "1", "2")),
        # the newest end, reached exactly and overshot
        ({"first": 3, "after": "97"}, [98, 99, 100], page_info(False, True, "98", "100")),
        ({"first": 5, "after": "98"}, [99, 100], page_info(False, True, "99", "100")),
        ({"first": 3, "after": "100"}, [], page_info(False, True, None, None)),
        ({"last": 3, "before": "101"}, [98, 99, 100], page_info(False, True, "98", "100")),
        # the middle
        ({"last": 3, "before": "100"}, [97, 98, 99], page_info(True, True, "97", "99")),
        ({"first": 1, "after": "1"}, [2], page_info(True, True, "2", "2")),
        # everything in one page
        ({"first": 200}, list(range(1, 101)), page_info(False, False, "1", "100")),
        ({"last": 200}, list(range(1, 101)), page_info(False, False, "1", "100")),
        ({"first": 100}, list(range(1, 101)), page_info(False, False, "1", "100")),
    ],
    ids=[
        "first-3",
        "first-3-after-0",
        "last-3-before-4",
        "last-5-before-3",
        "first-3-after-97",
        "first-5-after-98",
        "first-3-after-100",
        "last-3-before-101",
        "last-3-before-100",
        "first-1-after-1",
        "first-200",
        "last-200",
        "first-100",
    ],
)
async def test_messages_page_info_is_exact_at_both_ends_and_in_the_middle(client, hundred, args, expected, info):
    page = await messages_page(client, 2, hundred, **args)
    assert seqs(page) == expected
    assert_consistent(page)
    assert page["pageInfo"] == info


async def test_walking_history_forward_and_backward_by_cursors_visits_every_message_once(client, hundred):
    forward: list[int] = []
    after = None
    while True:
        page = await messages_page(client, 3, hundred, first=30, **({"after": after} if after else {}))
        forward += seqs(page)
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert forward == list(range(1, 101))

    backward: list[int] = []
    page = await messages_page(client, 3, hundred, last=30)
    backward = seqs(page) + backward
    while page["pageInfo"]["hasPreviousPage"]:
        page = await messages_page(client, 3, hundred, last=30, before=page["pageInfo"]["startCursor"])
        backward = seqs(page) + backward
    assert backward == list(range(1, 101))


@pytest.mark.parametrize(
    "args", [{}, {"first": 10}, {"last": 10}, {"first": 10, "after": "0"}, {"last": 10, "before": "5"}]
)
async def test_messages_of_an_empty_conversation_has_no_edges_and_null_cursors(client, args):
    cid = await create_group(client, 1, [2])
    page = await messages_page(client, 1, cid, **args)
    assert page == {"edges": [], "nodes": [], "pageInfo": page_info(False, False, None, None)}


@pytest.mark.parametrize("arg", ["first", "last"])
@pytest.mark.parametrize("size", [0, 201, -1])
async def test_messages_page_size_outside_1_to_200_is_bad_user_input(client, five, arg, size):
    error = await client.error(
        f"query($c: ID!, $n: Int) {{ messages(conversationId: $c, {arg}: $n) {{ nodes {{ seq }} }} }}",
        {"c": five, "n": size},
        user=1,
    )
    assert error_code(error) == "BAD_USER_INPUT"


@pytest.mark.parametrize("arg", ["first", "last"])
async def test_messages_page_sizes_1_and_200_are_accepted(client, hundred, arg):
    one = await messages_page(client, 1, hundred, **{arg: 1})
    assert seqs(one) == ([1] if arg == "first" else [100])
    everything = await messages_page(client, 1, hundred, **{arg: 200})
    assert seqs(everything) == list(range(1, 101))


@pytest.mark.parametrize("arg", ["after", "before"])
@pytest.mark.parametrize("cursor", ["abc", "-1", "", "1.5", " 4", "0x10", "99999999999999999999"])
async def test_messages_malformed_cursor_is_bad_user_input(client, five, arg, cursor):
    size = "first" if arg == "after" else "last"
    error = await client.error(
        f"query($c: ID!, $x: String) {{ messages(conversationId: $c, {size}: 5, {arg}: $x) {{ nodes {{ seq }} }} }}",
        {"c": five, "x": cursor},
        user=1,
    )
    assert error_code(error) == "BAD_USER_INPUT"


@pytest.mark.parametrize(
    "args", [{"first": 3, "last": 3}, {"first": 3, "last": 3, "after": "10"}, {"first": 3, "last": 3, "before": "10"}]
)
async def test_messages_first_and_last_together_is_bad_user_input(client, five, args):
    error = await client.error(
        "query($c: ID!, $first: Int, $after: String, $last: Int, $before: String) {"
        " messages(conversationId: $c, first: $first, after: $after, last: $last, before: $before) { nodes { seq } } }",
        {"c": five, **args},
        user=1,
    )
    assert error_code(error) == "BAD_USER_INPUT"


@pytest.mark.parametrize(
    "args",
    [{}, {"last": 5}, {"first": 3, "after": "40"}, {"last": 3, "before": "10"}, {"first": 200}, {"after": "99"}],
)
async def test_conversation_messages_answers_exactly_like_query_messages(client, hundred, args):
    top = await messages_page(client, 2, hundred, **args)
    data = await client.data(
        "query($c: ID!, $first: Int, $after: String, $last: Int, $before: String) {"
        " conversation(id: $c) { messages(first: $first, after: $after, last: $last, before: $before) {"
        f" {CONNECTION_FIELDS} }} }} }}",
        {"c": hundred, **args},
        user=2,
    )
    assert data["conversation"]["messages"] == top


@pytest.mark.parametrize("args", [{"first": 0}, {"last": 201}, {"after": "abc"}, {"first": 1, "last": 1}])
async def test_conversation_messages_rejects_bad_arguments_like_query_messages(client, five, args):
    error = await client.error(
        "query($c: ID!, $first: Int, $after: String, $last: Int, $before: String) {"
        " conversation(id: $c) { messages(first: $first, after: $after, last: $last, before: $before) {"
        " nodes { seq } } } }",
        {"c": five, **args},
        user=2,
    )
    assert error_code(error) == "BAD_USER_INPUT"


async def test_messages_of_a_conversation_the_viewer_is_not_in_is_not_found(client, five):
    error = await client.error(
        "query($c: ID!) { messages(conversationId: $c) { nodes { seq body } } }", {"c": five}, user=4
    )
    assert error_code(error) == "NOT_FOUND"
    assert "m1" not in json.dumps(error)


def _without_id(value, cid: str):
    """value with the conversation id blanked out of every string in it."""
    if isinstance(value, str):
        return re.sub(rf"(?<![0-9]){cid}(?![0-9])", "<id>", value)
    if isinstance(value, dict):
        return {key: _without_id(item, cid) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_id(item, cid) for item in value]
    return value


async def _not_found_errors(client, query: str, foreign: str, missing: str, user: int) -> tuple[dict, dict]:
    body_foreign = await client.execute(query, {"c": foreign}, user=user)
    body_missing = await client.execute(query, {"c": missing}, user=user)
    assert body_foreign["data"] is None and body_missing["data"] is None
    (error_foreign,) = body_foreign["errors"]
    (error_missing,) = body_missing["errors"]
    return error_foreign, error_missing


@pytest.mark.parametrize(
    "query",
    [
        "query($c: ID!) { conversation(id: $c) { id lastSeq } }",
        "query($c: ID!) { messages(conversationId: $c) { nodes { seq } } }",
        "query($c: ID!) { sync(cursors: [{conversationId: $c, afterSeq: 0}]) { lastSeq } }",
    ],
    ids=["conversation", "messages", "sync"],
)
async def test_a_foreign_and_a_missing_conversation_give_the_same_not_found(client, query):
    foreign = await create_group(client, 1, [2])
    await send(client, 1, foreign, "secret")
    missing = str(int(foreign) + 1000)
    error_foreign, error_missing = await _not_found_errors(client, query, foreign, missing, user=9)
    assert error_code(error_foreign) == "NOT_FOUND"
    # Identical but for the id that was asked about: nothing tells "exists" from "absent".
    assert _without_id(error_foreign, foreign) == _without_id(error_missing, missing)


# ---------------------------------------------------------------- inbox

INBOX = """
query($first: Int, $after: String) {
  inbox(first: $first, after: $after) {
    edges { cursor node { id } }
    nodes { id title lastSeq lastReadSeq unreadCount memberCount createdAt lastMessageAt
            lastMessage { seq body senderId } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}
"""


async def inbox(client, user: int, **args) -> dict:
    return (await client.data(INBOX, args, user=user))["inbox"]


def inbox_ids(connection: dict) -> list[str]:
    return [node["id"] for node in connection["nodes"]]


async def test_inbox_orders_by_newest_activity_last_message_else_creation(client):
    a = await create_group(client, 1, [2], "a")
    b = await create_group(client, 1, [2], "b")
    c = await create_group(client, 1, [2], "c")
    assert inbox_ids(await inbox(client, 1)) == [c, b, a]  # no messages: newest createdAt first

    await send(client, 2, a)
    assert inbox_ids(await inbox(client, 1)) == [a, c, b]  # a new message moves a to the top
    await send(client, 1, b)
    assert inbox_ids(await inbox(client, 1)) == [b, a, c]
    assert inbox_ids(await inbox(client, 2)) == [b, a, c]

    d = await create_group(client, 1, [2], "d")  # created after every message so far
    assert inbox_ids(await inbox(client, 1)) == [d, b, a, c]
    await send(client, 2, c)
    assert inbox_ids(await inbox(client, 1)) == [c, d, b, a]

    page = await inbox(client, 1)
    for node in page["nodes"]:
        activity = node["lastMessageAt"] or node["createdAt"]
        assert activity is not None
    edges_ids = [edge["node"]["id"] for edge in page["edges"]]
    assert edges_ids == inbox_ids(page)


async def test_inbox_lists_only_the_viewers_conversations(client):
    mine = await create_group(client, 1, [2])
    await create_group(client, 3, [4])
    assert inbox_ids(await inbox(client, 1)) == [mine]
    assert inbox_ids(await inbox(client, 2)) == [mine]
    assert inbox_ids(await inbox(client, 9)) == []
    empty = await inbox(client, 9)
    assert empty["pageInfo"] == page_info(False, False, None, None)


async def test_inbox_unread_count_is_last_seq_minus_last_read_seq_with_last_message_and_member_count(client):
    busy = await create_group(client, 1, [2, 3], "busy")
    await send_many(client, 2, busy, 5)
    await mark_read(client, 1, busy, 2)
    quiet = await create_group(client, 1, [2], "quiet")
    direct = await create_direct(client, 1, 3)
    await send(client, 3, direct, "hi there")

    nodes = {node["id"]: node for node in (await inbox(client, 1))["nodes"]}
    assert nodes[busy] | {"createdAt": None, "lastMessageAt": None} == {
        "id": busy,
        "title": "busy",
        "lastSeq": 5,
        "lastReadSeq": 2,
        "unreadCount": 3,
        "memberCount": 3,
        "createdAt": None,
        "lastMessageAt": None,
        "lastMessage": {"seq": 5, "body": "m5", "senderId": "2"},
    }
    assert nodes[quiet]["lastSeq"] == 0
    assert nodes[quiet]["unreadCount"] == 0
    assert nodes[quiet]["lastMessage"] is None
    assert nodes[quiet]["lastMessageAt"] is None
    assert nodes[quiet]["memberCount"] == 2
    assert nodes[direct]["title"] is None
    assert nodes[direct]["memberCount"] == 2
    assert nodes[direct]["unreadCount"] == 1
    assert nodes[direct]["lastMessage"] == {"seq": 1, "body": "hi there", "senderId": "3"}

    # The sender has read what they sent; the other member has not.
    sender = {node["id"]: node for node in (await inbox(client, 2))["nodes"]}
    assert sender[busy]["unreadCount"] == 0
    assert sender[busy]["lastReadSeq"] == 5
    third = {node["id"]: node for node in (await inbox(client, 3))["nodes"]}
    assert third[busy]["unreadCount"] == 5
    assert third[direct]["unreadCount"] == 0


@pytest.mark.parametrize(("total", "size"), [(21, 7), (22, 5), (3, 20), (10, 1)])
async def test_inbox_pages_with_first_and_after_return_every_conversation_exactly_once(client, total, size):
    created = [await create_group(client, 1, [2], f"g{i}") for i in range(total)]
    # Activity in a different order than creation: every third one gets a message.
    for cid in created[::3]:
        await send(client, 2, cid)
    expected = inbox_ids(await inbox(client, 1, first=200))
    assert sorted(expected, key=int) == sorted(created, key=int)

    seen: list[str] = []
    after = None
    pages = 0
    while True:
        page = await inbox(client, 1, first=size, **({"after": after} if after else {}))
        pages += 1
        remaining = total - len(seen)
        assert len(page["nodes"]) == min(size, remaining)
        assert page["pageInfo"]["hasNextPage"] == (remaining > size)
        assert page["pageInfo"]["hasPreviousPage"] == (after is not None)
        assert page["pageInfo"]["endCursor"] == page["edges"][-1]["cursor"]
        assert page["pageInfo"]["startCursor"] == page["edges"][0]["cursor"]
        seen += inbox_ids(page)
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
        assert pages <= total
    assert seen == expected
    assert pages == -(-total // size)


async def test_inbox_default_page_size_is_20(client):
    for i in range(21):
        await create_group(client, 1, [], f"g{i}")
    page = await inbox(client, 1)
    assert len(page["nodes"]) == 20
    assert page["pageInfo"]["hasNextPage"] is True


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


GARBAGE_INBOX_CURSORS = {
    "abc": "abc",
    "empty": "",
    "punctuation": "!!!",
    "percent": "%%%%",
    "non-ascii": "é",
    "a-message-cursor": "40",
    "no-date": _b64("x|1"),
    "date-without-offset": _b64("2024-01-01T00:00:00|1"),
    "id-not-a-number": _b64("2024-01-01T00:00:00+00:00|abc"),
    "id-missing": _b64("2024-01-01T00:00:00+00:00|"),
    "id-beyond-64-bits": _b64("2024-01-01T00:00:00+00:00|99999999999999999999"),
    "id-below-64-bits": _b64("2024-01-01T00:00:00+00:00|-99999999999999999999"),
    "nul": _b64("\x00|1"),
    "date-before-year-1-in-utc": _b64("0001-01-01T00:00:00+14:00|1"),
    "date-after-year-9999-in-utc": _b64("9999-12-31T23:59:59-14:00|1"),
}


@pytest.mark.parametrize("after", GARBAGE_INBOX_CURSORS.values(), ids=GARBAGE_INBOX_CURSORS.keys())
async def test_inbox_garbage_after_cursor_is_bad_user_input(client, after):
    await create_group(client, 1, [2])
    error = await client.error(INBOX, {"first": 5, "after": after}, user=1)
    assert error_code(error) == "BAD_USER_INPUT"


@pytest.mark.parametrize("size", [0, 201, -1])
async def test_inbox_first_outside_1_to_200_is_bad_user_input(client, size):
    error = await client.error(INBOX, {"first": size}, user=1)
    assert error_code(error) == "BAD_USER_INPUT"


# ---------------------------------------------------------------- viewer

VIEWER = "{ viewer { userId totalUnread unreadConversations } }"


async def test_viewer_totals_match_the_sums_over_the_inbox(client):
    a = await create_group(client, 1, [2, 3])
    await send_many(client, 2, a, 7)
    await mark_read(client, 1, a, 3)  # 4 unread
    b = await create_direct(client, 1, 2)
    await send_many(client, 2, b, 2)  # 2 unread
    c = await create_group(client, 1, [3])
    await send_many(client, 3, c, 4)
    await mark_read(client, 1, c, 4)  # all read
    await create_group(client, 1, [2])  # empty
    d = await create_group(client, 3, [1])
    await send(client, 1, d)  # sent by the viewer: read

    nodes = (await inbox(client, 1, first=200))["nodes"]
    assert sum(n["unreadCount"] for n in nodes) == 6
    assert sum(1 for n in nodes if n["unreadCount"] > 0) == 2
    assert (await client.data(VIEWER, user=1))["viewer"] == {"userId": "1", "totalUnread": 6, "unreadConversations": 2}

    for user in (2, 3):
        nodes = (await inbox(client, user, first=200))["nodes"]
        assert (await client.data(VIEWER, user=user))["viewer"] == {
            "userId": str(user),
            "totalUnread": sum(n["unreadCount"] for n in nodes),
            "unreadConversations": sum(1 for n in nodes if n["unreadCount"] > 0),
        }

    await mark_read(client, 1, a, 1000)
    assert (await client.data(VIEWER, user=1))["viewer"] == {"userId": "1", "totalUnread": 2, "unreadConversations": 1}


async def test_viewer_without_conversations_has_nothing_unread(client):
    await create_group(client, 1, [2])
    assert (await client.data(VIEWER, user=5))["viewer"] == {"userId": "5", "totalUnread": 0, "unreadConversations": 0}


# ---------------------------------------------------------------- seen

SEEN = """
query($c: ID!, $n: Int) {
  messages(conversationId: $c, first: 200) {
    nodes { seq senderId seenByCount seen seenBy all: seenBy(first: 1000) few: seenBy(first: $n) }
  }
}
"""


async def seen_state(client, user: int, cid: str, first: int = 2) -> dict[int, dict]:
    data = await client.data(SEEN, {"c": cid, "n": first}, user=user)
    return {node["seq"]: node for node in data["messages"]["nodes"]}


async def test_seen_by_counts_other_members_at_or_past_the_seq_ascending_by_id(client):
    # Ids chosen so that text order (10 < 100 < 9), the order of user ids, differs from numeric order.
    cid = await create_group(client, 1, [100, 9, 10])
    await send_many(client, 1, cid, 3)
    state = await seen_state(client, 1, cid)
    for seq in (1, 2, 3):
        assert (state[seq]["seenByCount"], state[seq]["seenBy"], state[seq]["seen"]) == (0, [], False)

    await mark_read(client, 100, cid, 2)
    state = await seen_state(client, 9, cid)  # any member sees the same answer
    assert [state[s]["seenByCount"] for s in (1, 2, 3)] == [1, 1, 0]
    assert [state[s]["seenBy"] for s in (1, 2, 3)] == [["100"], ["100"], []]

    await mark_read(client, 10, cid, 3)
    await mark_read(client, 9, cid, 1)
    state = await seen_state(client, 1, cid, first=2)
    assert state[1]["seenByCount"] == 3
    assert state[1]["seenBy"] == ["10", "100", "9"]
    assert state[1]["all"] == ["10", "100", "9"]
    assert state[1]["few"] == ["10", "100"]
    assert state[1]["seen"] is True
    assert (state[2]["seenByCount"], state[2]["seenBy"], state[2]["few"], state[2]["seen"]) == (
        2,
        ["10", "100"],
        ["10", "100"],
        False,
    )
    assert (state[3]["seenByCount"], state[3]["seenBy"], state[3]["seen"]) == (1, ["10"], False)

    one = await seen_state(client, 1, cid, first=1)
    assert one[1]["few"] == ["10"]


async def test_seen_by_never_counts_the_sender(client):
    cid = await create_group(client, 1, [2, 3])
    await send(client, 1, cid, "from 1")
    await send(client, 2, cid, "from 2")  # 2's watermark moves to 2: 2 has read message 1
    state = await seen_state(client, 3, cid)
    assert (state[1]["seenByCount"], state[1]["seenBy"], state[1]["seen"]) == (1, ["2"], False)
    # Message 2: user 1's watermark is 1, the sender's own watermark does not count.
    assert (state[2]["seenByCount"], state[2]["seenBy"], state[2]["seen"]) == (0, [], False)

    await mark_read(client, 1, cid, 2)
    state = await seen_state(client, 3, cid)
    assert (state[2]["seenByCount"], state[2]["seenBy"], state[2]["seen"]) == (1, ["1"], False)
    await mark_read(client, 3, cid, 2)
    state = await seen_state(client, 3, cid)
    assert (state[1]["seenByCount"], state[1]["seenBy"], state[1]["seen"]) == (2, ["2", "3"], True)
    assert (state[2]["seenByCount"], state[2]["seenBy"], state[2]["seen"]) == (2, ["1", "3"], True)


async def test_seen_in_a_direct_chat_means_the_other_person_read_it(client):
    cid = await create_direct(client, 1, 2)
    await send(client, 1, cid, "one")
    await send(client, 1, cid, "two")
    state = await seen_state(client, 1, cid)
    assert [(state[s]["seen"], state[s]["seenByCount"], state[s]["seenBy"]) for s in (1, 2)] == [
        (False, 0, []),
        (False, 0, []),
    ]
    await mark_read(client, 2, cid, 1)
    state = await seen_state(client, 2, cid)
    assert [(state[s]["seen"], state[s]["seenByCount"], state[s]["seenBy"]) for s in (1, 2)] == [
        (True, 1, ["2"]),
        (False, 0, []),
    ]


async def test_a_message_in_a_group_where_the_sender_is_alone_is_not_seen(client):
    cid = await create_group(client, 1, [])
    await send(client, 1, cid, "talking to myself")
    await mark_read(client, 1, cid, 1)
    state = await seen_state(client, 1, cid)
    assert (state[1]["seen"], state[1]["seenByCount"], state[1]["seenBy"]) == (False, 0, [])


async def test_last_message_seen_fields_match_the_history_page(client):
    cid = await create_group(client, 1, [2, 3])
    await send_many(client, 1, cid, 2)
    await mark_read(client, 2, cid, 2)
    data = await client.data("{ inbox { nodes { lastMessage { seq seenByCount seenBy seen } } } }", user=1)
    assert data["inbox"]["nodes"][0]["lastMessage"] == {"seq": 2, "seenByCount": 1, "seenBy": ["2"], "seen": False}


# ---------------------------------------------------------------- sync

SYNC = """
query($cursors: [SyncCursor!]!, $limit: Int) {
  sync(cursors: $cursors, limit: $limit) {
    conversationId hasMore lastSeq lastReadSeq messages { conversationId seq body }
  }
}
"""


async def sync(client, user: int, cursors: list[tuple[str, int]], limit: int | None = None) -> list[dict]:
    variables: dict = {"cursors": [{"conversationId": c, "afterSeq": s} for c, s in cursors]}
    if limit is not None:
        variables["limit"] = limit
    return (await client.data(SYNC, variables, user=user))["sync"]


async def sync_error(client, user: int, variables: dict) -> dict:
    return await client.error(SYNC, variables, user=user)


async def test_sync_returns_per_cursor_the_messages_after_it_ascending_at_most_limit(client):
    a = await create_group(client, 1, [2])
    await send_many(client, 2, a, 10)
    await mark_read(client, 1, a, 6)
    b = await create_group(client, 1, [2])
    await send_many(client, 2, b, 3)
    c = await create_group(client, 1, [2])

    result = await sync(client, 1, [(b, 0), (a, 4), (c, 0)], limit=3)
    assert [r["conversationId"] for r in result] == [b, a, c]  # the order of the cursors
    rb, ra, rc = result
    assert [m["seq"] for m in ra["messages"]] == [5, 6, 7]
    assert all(m["conversationId"] == a and m["body"] == f"m{m['seq']}" for m in ra["messages"])
    assert (ra["hasMore"], ra["lastSeq"], ra["lastReadSeq"]) == (True, 10, 6)
    assert [m["seq"] for m in rb["messages"]] == [1, 2, 3]  # exactly limit left: no more
    assert (rb["hasMore"], rb["lastSeq"], rb["lastReadSeq"]) == (False, 3, 0)
    assert (rc["messages"], rc["hasMore"], rc["lastSeq"], rc["lastReadSeq"]) == ([], False, 0, 0)


async def test_sync_catches_up_in_steps_without_gaps(client):
    a = await create_group(client, 1, [2])
    await send_many(client, 2, a, 25)
    held, got = 0, []
    for _ in range(10):
        (r,) = await sync(client, 1, [(a, held)], limit=7)
        got += [m["seq"] for m in r["messages"]]
        held = got[-1] if got else held
        if not r["hasMore"]:
            break
    assert got == list(range(1, 26))


async def test_sync_default_limit_is_100_and_after_the_end_is_empty(client):
    a = await create_group(client, 1, [2])
    await send_many(client, 2, a, 101)
    (r,) = await sync(client, 1, [(a, 0)])
    assert [m["seq"] for m in r["messages"]] == list(range(1, 101))
    assert r["hasMore"] is True
    (r,) = await sync(client, 1, [(a, 101)])
    assert (r["messages"], r["hasMore"], r["lastSeq"]) == ([], False, 101)
    (r,) = await sync(client, 1, [(a, 5000)])
    assert (r["messages"], r["hasMore"]) == ([], False)
    (r,) = await sync(client, 2, [(a, 100)], limit=200)
    assert ([m["seq"] for m in r["messages"]], r["hasMore"], r["lastReadSeq"]) == ([101], False, 101)


async def test_sync_with_no_cursors_is_empty(client):
    assert await sync(client, 1, []) == []


async def test_sync_of_an_unknown_or_foreign_conversation_is_not_found(client):
    mine = await create_group(client, 1, [2])
    foreign = await create_group(client, 3, [4])
    for cursors in ([(foreign, 0)], [(str(int(foreign) + 100), 0)], [(mine, 0), (foreign, 0)]):
        error = await sync_error(client, 1, {"cursors": [{"conversationId": c, "afterSeq": s} for c, s in cursors]})
        assert error_code(error) == "NOT_FOUND"


@pytest.mark.parametrize("limit", [0, 201, -1])
async def test_sync_limit_outside_1_to_200_is_bad_user_input(client, limit):
    a = await create_group(client, 1, [2])
    error = await sync_error(client, 1, {"cursors": [{"conversationId": a, "afterSeq": 0}], "limit": limit})
    assert error_code(error) == "BAD_USER_INPUT"


async def test_sync_negative_after_seq_is_bad_user_input(client):
    a = await create_group(client, 1, [2])
    error = await sync_error(client, 1, {"cursors": [{"conversationId": a, "afterSeq": -1}]})
    assert error_code(error) == "BAD_USER_INPUT"


async def test_sync_duplicate_conversation_ids_is_bad_user_input(client):
    a = await create_group(client, 1, [2])
    b = await create_group(client, 1, [2])
    error = await sync_error(
        client,
        1,
        {
            "cursors": [
                {"conversationId": a, "afterSeq": 0},
                {"conversationId": b, "afterSeq": 0},
                {"conversationId": a, "afterSeq": 3},
            ]
        },
    )
    assert error_code(error) == "BAD_USER_INPUT"
