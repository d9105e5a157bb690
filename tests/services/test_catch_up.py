"""Too far behind: sync for a client more than CHATGQL_MAX_CATCH_UP messages
behind answers the newest page with ConversationSync.tooLong instead of the
page after its cursor; a resumable messageNew(cursors:) that far behind ends
with the resync error before reading any message. messages(after:) only
advises (MessageConnection.gapTooLong): its page is the one right after the
cursor, whatever the distance. No statement reads more than a page, whatever
the gap (checked on the plans of what the server ran).

One relay-less server with CHATGQL_MAX_CATCH_UP=5 for the whole module.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import asyncpg
import pytest

from chatgql import db

from ..conftest import GraphQLClient, RunningServer, make_settings
from ..graphql.test_query_count import logging_statements
from ..graphql.test_resume import RESUME, seqs_of
from ..store.test_partitioning import NAMES_MESSAGE
from ..support.live import ws_connect
from .test_history import create_group, send_many

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


async def test_messages_after_a_cursor_too_far_behind_answers_the_page_right_after_it_and_only_flags_the_gap(api):
    cid = await twelve(api)

    async def page(**arguments) -> dict:
        return (await api.data(PAGE, {"c": cid, **arguments}, user=2))["messages"]

    def seqs(connection: dict) -> list[int]:
        return [n["seq"] for n in connection["nodes"]]

    at_bound = await page(first=3, after=str(12 - BOUND))
    assert (seqs(at_bound), at_bound["gapTooLong"], at_bound["pageInfo"]["hasNextPage"]) == ([8, 9, 10], False, True)
    past = await page(first=3, after=str(12 - BOUND - 1))
    assert (seqs(past), past["gapTooLong"]) == ([7, 8, 9], True)
    assert past["pageInfo"] == {"hasNextPage": True, "hasPreviousPage": True, "startCursor": "7", "endCursor": "9"}
    whole = await page(after="0")
    assert (seqs(whole), whole["gapTooLong"]) == (list(range(1, 13)), True)
    assert whole["pageInfo"] == {"hasNextPage": False, "hasPreviousPage": False, "startCursor": "1", "endCursor": "12"}
    # Bounded above by `before`: the gap counts up to before - 1; the page is still the one after `after`.
    assert (seqs(await page(first=3, after="0", before="6")), (await page(after="0", before="6"))["gapTooLong"]) == (
        [1, 2, 3],
        False,
    )
    below = await page(first=3, after="0", before="8")
    assert (seqs(below), below["gapTooLong"], below["pageInfo"]["hasNextPage"]) == ([1, 2, 3], True, True)
    # Not catching up: the oldest page (no after), backward pages however far back, the newest page.
    for arguments in ({"first": 3}, {"last": 3, "before": "12"}, {"last": 3, "before": "2"}, {"last": 3}, {}):
        assert (await page(**arguments))["gapTooLong"] is False, arguments
    far_back = await page(last=3, before="2")
    assert (seqs(far_back), far_back["pageInfo"]) == (
        [1],
        {"hasNextPage": True, "hasPreviousPage": False, "startCursor": "1", "endCursor": "1"},
    )
    assert seqs(await page(first=3)) == [1, 2, 3]
    # Conversation.messages is the same field.
    nested = await api.data(
        'query($c: ID!) { conversation(id: $c) { messages(first: 2, after: "1") { nodes { seq } gapTooLong } } }',
        {"c": cid},
        user=2,
    )
    assert nested["conversation"]["messages"] == {"nodes": [{"seq": 2}, {"seq": 3}], "gapTooLong": True}


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


@pytest.fixture(scope="module")
async def budgeted(migrated_url: str) -> AsyncIterator[RunningServer]:
    settings = make_settings(migrated_url, run_relay=False, max_sync_messages=10, max_operation_cost=2_000_000)
    async with RunningServer(settings) as running:
        yield running


async def test_a_sync_across_many_conversations_shares_one_message_budget_and_is_not_refused(budgeted, http):
    """Four conversations of six messages, limit 100, a budget of 10: each page is 10 // 4 = 2
    messages with hasMore; synced again from where each page ended, everything arrives once, in
    order. The price follows the same budget, so the cost bound does not refuse the sync."""
    api = GraphQLClient(http, budgeted.url, budgeted.settings)
    conversations = [await create_group(api, 1, [2]) for _ in range(4)]
    for cid in conversations:
        await send_many(api, 1, cid, 6)
    held: dict[str, list[int]] = {cid: [] for cid in conversations}
    cursors = {cid: 0 for cid in conversations}
    rounds = 0
    while cursors:
        rounds += 1
        k = [{"conversationId": cid, "afterSeq": after} for cid, after in cursors.items()]
        data = await api.data(SYNC, {"k": k, "l": 100}, user=2)
        assert sum(len(r["messages"]) for r in data["sync"]) <= max(10, len(k))
        for result in data["sync"]:
            cid = result["conversationId"]
            held[cid] += [m["seq"] for m in result["messages"]]
            assert len(result["messages"]) == min(100, max(1, 10 // len(k)), 6 - cursors[cid])
            if result["hasMore"]:
                cursors[cid] = held[cid][-1]
            else:
                del cursors[cid]
    assert held == {cid: list(range(1, 7)) for cid in conversations}
    assert rounds == 3  # pages of 2, 2, 2 (four cursors, then fewer, at most 6 each)
