"""A long history pages like any Relay connection: messages(first:, after:) and
messages(last:, before:) answer the page adjacent to the cursor, whatever the
distance, with exact pageInfo. 5,000 messages (five times CHATGQL_MAX_CATCH_UP's
default) read forward and backward are each seen once, in order; gapTooLong only
advises (far behind), it never changes the page.
"""

from __future__ import annotations

from ..services.test_history import create_group
from ..support.history import seed_history

TOTAL = 5000
PAGE = 200  # the largest page
BOUND = 1000  # CHATGQL_MAX_CATCH_UP's default, which the session server runs with
QUERY = """
query($c: ID!, $first: Int, $after: String, $last: Int, $before: String) {
  messages(conversationId: $c, first: $first, after: $after, last: $last, before: $before) {
    edges { cursor node { seq body } }
    gapTooLong
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}
"""


def seqs(connection: dict) -> list[int]:
    for edge in connection["edges"]:
        assert (edge["cursor"], edge["node"]["body"]) == (str(edge["node"]["seq"]), f"m{edge['node']['seq']}")
    return [edge["node"]["seq"] for edge in connection["edges"]]


def ends(connection: dict) -> tuple[str, str]:
    cursors = [edge["cursor"] for edge in connection["edges"]]
    return cursors[0], cursors[-1]


async def test_5000_messages_paged_forward_and_backward_are_each_seen_once_in_order(server, client, migrated_url):
    assert server.settings.max_catch_up == BOUND
    cid = await create_group(client, 1, [2])
    await seed_history(migrated_url, int(cid), "1", TOTAL)

    async def page(**arguments) -> dict:
        return (await client.data(QUERY, {"c": cid, **arguments}, user=2))["messages"]

    # Forward, as Relay's loadNext / Apollo's fetchMore do: after = the previous endCursor.
    forward: list[int] = []
    arguments: dict = {"first": PAGE}
    while True:
        connection = await page(**arguments)
        got = seqs(connection)
        held = int(arguments.get("after", 0))
        assert got == list(range(held + 1, min(held + PAGE, TOTAL) + 1)), (arguments, got[:3])
        assert connection["pageInfo"] == {
            "hasNextPage": got[-1] < TOTAL,
            "hasPreviousPage": held > 0,
            "startCursor": ends(connection)[0],
            "endCursor": ends(connection)[1],
        }
        assert connection["gapTooLong"] is ("after" in arguments and TOTAL - held > BOUND), arguments
        forward += got
        if not connection["pageInfo"]["hasNextPage"]:
            break
        arguments = {"first": PAGE, "after": connection["pageInfo"]["endCursor"]}
    assert forward == list(range(1, TOTAL + 1))

    # Backward, as a chat scrolls up: before = the previous startCursor.
    backward: list[int] = []
    arguments = {"last": PAGE}
    while True:
        connection = await page(**arguments)
        got = seqs(connection)
        bound = int(arguments.get("before", TOTAL + 1))
        assert got == list(range(max(1, bound - PAGE), bound)), (arguments, got[:3])
        assert connection["pageInfo"] == {
            "hasNextPage": bound <= TOTAL,
            "hasPreviousPage": got[0] > 1,
            "startCursor": ends(connection)[0],
            "endCursor": ends(connection)[1],
        }
        assert connection["gapTooLong"] is False
        backward = got + backward
        if not connection["pageInfo"]["hasPreviousPage"]:
            break
        arguments = {"last": PAGE, "before": connection["pageInfo"]["startCursor"]}
    assert backward == list(range(1, TOTAL + 1))


async def test_a_cursor_far_behind_gets_the_page_right_after_it_with_gap_too_long_as_advice(
    server, client, migrated_url
):
    cid = await create_group(client, 1, [2])
    await seed_history(migrated_url, int(cid), "1", 1531)
    # What a client saw jump to 1,432..1,531: the page after "100" is 101..200.
    for query, path in (
        (QUERY, ("messages",)),
        (
            "query($c: ID!, $first: Int, $after: String) { conversation(id: $c) { messages(first: $first, after: $after) {"
            " edges { cursor node { seq body } } gapTooLong pageInfo { hasNextPage hasPreviousPage startCursor endCursor }"
            " } } }",
            ("conversation", "messages"),
        ),
    ):
        connection = await client.data(query, {"c": cid, "first": 100, "after": "100"}, user=2)
        for key in path:
            connection = connection[key]
        assert seqs(connection) == list(range(101, 201))
        assert connection["gapTooLong"] is True  # 1,431 behind: more than the bound, so "consider jumping"
        assert connection["pageInfo"] == {
            "hasNextPage": True,
            "hasPreviousPage": True,
            "startCursor": "101",
            "endCursor": "200",
        }
    near = await client.data(QUERY, {"c": cid, "first": 100, "after": "1431"}, user=2)
    assert (seqs(near["messages"]), near["messages"]["gapTooLong"]) == (list(range(1432, 1532)), False)
    assert near["messages"]["pageInfo"]["hasNextPage"] is False
    # Far back from the newest end: the page right before the cursor too.
    back = await client.data(QUERY, {"c": cid, "last": 50, "before": "51"}, user=2)
    assert seqs(back["messages"]) == list(range(1, 51))
    assert back["messages"]["pageInfo"] == {
        "hasNextPage": True,
        "hasPreviousPage": False,
        "startCursor": "1",
        "endCursor": "50",
    }
