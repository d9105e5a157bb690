"""Too far behind: sync and messages(after:) for a client more than
CHATGQL_MAX_CATCH_UP messages behind answer the newest page with a flag
(ConversationSync.tooLong, MessageConnection.gapTooLong) instead of the page
after its cursor; a resumable messageNew(cursors:) that far behind ends with
the resync error before reading any message. No statement reads more than a
page, whatever the gap (checked on the plans of what the server ran).

One relay-less server with CHATGQL_MAX_CATCH_UP=5 for the whole module.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import asyncpg
import pytest

from chatgql import db

from .conftest import GraphQLClient, RunningServer, make_settings
from .events.helpers import ws_connect
from .test_history import create_group, send_many
from .test_partitioning import NAMES_MESSAGE
from .test_query_count import logging_statements
from .test_resume import RESUME, seqs_of

BOUND = 5
SYNC = """
query($k: [SyncCursor!]!, $l: Int) {
  sync(cursors: $k, limit: $l) { conversationId messages { seq body } hasMore lastSeq tooLong }
}
"""
PAGE = """
query($c: ID!, $first: Int, $after: String, $last: Int, $before: String) {
  messages(conversationId: $c, first: $first, after: $after, last: $last, before: $before) {
    nodes { seq } gapTooLong pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}
"""


@pytest.fixture(scope="module")
async def behind(migrated_url: str) -> AsyncIterator[RunningServer]:
    async with RunningServer(make_settings(migrated_url, run_relay=False, max_catch_up=BOUND)) as running:
        yield running


@pytest.fixture
async def api(behind: RunningServer, http) -> GraphQLClient:
    return GraphQLClient(http, behind.url, behind.settings)


async def twelve(api: GraphQLClient) -> str:
    """A group of users 1 and 2 with messages m1..m12 from user 1."""
    cid = await create_group(api, 1, [2])
    await send_many(api, 1, cid, 12)
    return cid


async def test_sync_at_the_bound_fills_the_gap_and_one_past_it_answers_the_newest_page_with_too_long(api):
    cid, other = await twelve(api), await create_group(api, 1, [2])
    await send_many(api, 1, other, 6)

    async def sync(after: int, limit: int = 3, conversation: str = cid) -> dict:
        data = await api.data(SYNC, {"k": [{"conversationId": conversation, "afterSeq": after}], "l": limit}, user=2)
        (result,) = data["sync"]
        return result

    at_bound = await sync(12 - BOUND)
    assert [m["seq"] for m in at_bound["messages"]] == [8, 9, 10]
    assert (at_bound["hasMore"], at_bound["tooLong"]) == (True, False)
    past = await sync(12 - BOUND - 1)
    assert [(m["seq"], m["body"]) for m in past["messages"]] == [(10, "m10"), (11, "m11"), (12, "m12")]
    assert (past["hasMore"], past["tooLong"], past["lastSeq"]) == (False, True, 12)
    fresh = await sync(0, limit=100)  # a new device, 12 behind: the newest page is the whole conversation
    assert ([m["seq"] for m in fresh["messages"]], fresh["tooLong"], fresh["hasMore"]) == (
        list(range(1, 13)),
        True,
        False,
    )
    assert (await sync(12))["messages"] == [] and not (await sync(12))["tooLong"]
    assert not (await sync(7, limit=1))["tooLong"]  # the bound counts messages behind, not the page size

    # Per conversation in one sync: one flagged, one not.
    data = await api.data(
        SYNC, {"k": [{"conversationId": cid, "afterSeq": 2}, {"conversationId": other, "afterSeq": 1}], "l": 2}, user=2
    )
    by_id = {r["conversationId"]: r for r in data["sync"]}
    assert ([m["seq"] for m in by_id[cid]["messages"]], by_id[cid]["tooLong"]) == ([11, 12], True)
    assert ([m["seq"] for m in by_id[other]["messages"]], by_id[other]["tooLong"]) == ([2, 3], False)


async def test_messages_after_a_cursor_too_far_behind_answers_the_newest_page_with_gap_too_long(api):
    cid = await twelve(api)

    async def page(**arguments) -> dict:
        return (await api.data(PAGE, {"c": cid, **arguments}, user=2))["messages"]

    def seqs(connection: dict) -> list[int]:
        return [n["seq"] for n in connection["nodes"]]

    at_bound = await page(first=3, after=str(12 - BOUND))
    assert (seqs(at_bound), at_bound["gapTooLong"], at_bound["pageInfo"]["hasNextPage"]) == ([8, 9, 10], False, True)
    past = await page(first=3, after=str(12 - BOUND - 1))
    assert (seqs(past), past["gapTooLong"]) == ([10, 11, 12], True)
    assert past["pageInfo"] == {"hasNextPage": False, "hasPreviousPage": True, "startCursor": "10", "endCursor": "12"}
    assert (seqs(await page(after="0")), (await page(after="0"))["gapTooLong"]) == (list(range(1, 13)), True)
    # Bounded above by `before`: the gap counts up to before - 1, and the page is the newest below it.
    assert (seqs(await page(first=3, after="0", before="6")), (await page(after="0", before="6"))["gapTooLong"]) == (
        [1, 2, 3],
        False,
    )
    below = await page(first=3, after="0", before="8")
    assert (seqs(below), below["gapTooLong"], below["pageInfo"]["hasNextPage"]) == ([5, 6, 7], True, True)
    # Not catching up: the oldest page (no after), a backward page, the newest page.
    for arguments in ({"first": 3}, {"last": 3, "before": "12"}, {"last": 3}, {}):
        assert (await page(**arguments))["gapTooLong"] is False, arguments
    assert seqs(await page(first=3)) == [1, 2, 3]
    # Conversation.messages is the same field.
    nested = await api.data(
        'query($c: ID!) { conversation(id: $c) { messages(first: 2, after: "1") { nodes { seq } gapTooLong } } }',
        {"c": cid},
        user=2,
    )
    assert nested["conversation"]["messages"] == {"nodes": [{"seq": 11}, {"seq": 12}], "gapTooLong": True}


async def test_no_statement_reads_more_than_a_page_however_far_behind(behind, api, migrated_url):
    cid = await create_group(api, 1, [2])
    await send_many(api, 1, cid, 60)
    with logging_statements(behind) as recorded:
        sync = await api.data(SYNC, {"k": [{"conversationId": cid, "afterSeq": 0}], "l": 4}, user=2)
        page = await api.data(PAGE, {"c": cid, "first": 4, "after": "3"}, user=2)
    assert sync["sync"][0]["tooLong"] and page["messages"]["gapTooLong"]
    on_message = [(sql, args) for sql, args in recorded if NAMES_MESSAGE.search(sql)]
    assert len(on_message) == 2, on_message
    conn = await asyncpg.connect(db.dsn(migrated_url))
    try:
        for sql, args in on_message:
            (plan,) = json.loads(await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args))
            read = _rows_read(plan["Plan"])
            assert 0 < read <= 4 + 1 <= BOUND, (sql, read)  # the page and the row that tells hasMore
    finally:
        await conn.close()


def _rows_read(node: dict) -> float:
    """Rows the scans of message (or its partitions) returned, over all their loops."""
    own = 0.0
    if node.get("Relation Name", "").startswith("message") and "Scan" in node["Node Type"]:
        own = node["Actual Rows"] * node["Actual Loops"] + node.get("Rows Removed by Filter", 0)
    return own + sum(_rows_read(child) for child in node.get("Plans", []))


async def test_a_resumed_subscription_more_than_the_bound_behind_in_one_conversation_ends_with_resync(behind, api):
    cid = await twelve(api)
    assert behind.settings.subscriber_buffer > 12  # only the per-conversation bound can refuse these
    async with await ws_connect(behind, 2) as ws:
        fits = await ws.subscribe(RESUME, {"c": cid, "cursors": [{"conversationId": cid, "afterSeq": 12 - BOUND}]})
        assert seqs_of(await fits.collect(BOUND)) == [8, 9, 10, 11, 12]
        too_far = await ws.subscribe(
            RESUME, {"c": cid, "cursors": [{"conversationId": cid, "afterSeq": 12 - BOUND - 1}]}
        )
        error = await too_far.error()
    assert error.skipped == []  # nothing replayed before the error
    assert error.code == "LIMIT_EXCEEDED"
    assert (error.extensions["resync"], error.extensions["reason"]) == (True, "REPLAY_TOO_LONG")
    # What the client does next: sync, which answers with the newest page and tooLong.
    data = await api.data(SYNC, {"k": [{"conversationId": cid, "afterSeq": 12 - BOUND - 1}], "l": 3}, user=2)
    assert data["sync"][0]["tooLong"] is True
