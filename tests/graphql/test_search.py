"""searchMessages: full-text search over HTTP against the session's chatgql (real PostgreSQL, the GIN index
of migration 0012_search). Found by the current body's words; never a tombstone; only the viewer's
conversations; every hit once across pages; bad input a coded error."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from ..conftest import error_code
from ..support.live import ChatApi

SEARCH = """
query($q: String!, $c: ID, $first: Int, $after: String, $prefix: Boolean! = false) {
  searchMessages(query: $q, conversationId: $c, first: $first, after: $after, prefix: $prefix) {
    edges { cursor conversationId seq node { id conversationId seq body } }
    nodes { seq }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}
"""
EDIT = "mutation($c: ID!, $s: Long!, $b: String!) { editMessage(conversationId: $c, seq: $s, body: $b) { changeSeq } }"
DELETE = "mutation($c: ID!, $s: Long!) { deleteMessage(conversationId: $c, seq: $s) { changeSeq } }"


async def search(api: ChatApi, user: int, query: str, **variables) -> dict:
    return (await api.data(SEARCH, {"q": query, **variables}, user=user))["searchMessages"]


async def found(api: ChatApi, user: int, query: str, **variables) -> list[tuple[str, int]]:
    return [(e["conversationId"], e["seq"]) for e in (await search(api, user, query, **variables))["edges"]]


async def test_a_message_is_found_by_its_current_words_never_once_deleted(api):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "Lunch at the Harbour cafe?")
    await api.send(2, cid, "harbour sounds good")
    await api.send(1, cid, "see you at noon")
    page = await search(api, 2, "HARBOUR", c=cid)
    assert [e["seq"] for e in page["edges"]] == [2, 1]  # newest first, case-insensitive
    assert page["edges"][0]["node"]["body"] == "harbour sounds good"
    assert page["nodes"] == [{"seq": 2}, {"seq": 1}]
    assert await found(api, 2, '"harbour cafe"') == [(cid, 1)]  # a phrase, across the viewer's conversations
    assert await found(api, 2, "harbour -cafe") == [(cid, 2)]
    assert await found(api, 2, "harb") == []  # whole words
    assert await found(api, 2, "harb", prefix=True) == [(cid, 2), (cid, 1)]  # type-ahead: the last word is a prefix
    assert await found(api, 2, "at harb", prefix=True) == [(cid, 1)]
    assert await found(api, 2, "harbour h", prefix=True) == []  # a one-letter last word is matched whole
    # an edit is found by its new body, not by its old one
    await api.data(EDIT, {"c": cid, "s": 3, "b": "see you at the harbour"}, user=1)
    assert await found(api, 2, "noon") == []
    assert await found(api, 2, "harbour") == [(cid, 3), (cid, 2), (cid, 1)]
    # a deleted message is never found (its body is erased in the delete's transaction)
    await api.data(DELETE, {"c": cid, "s": 2}, user=2)
    assert await found(api, 2, "harbour") == [(cid, 3), (cid, 1)]
    assert await found(api, 1, "sounds") == []


async def test_a_search_sees_only_the_viewers_conversations(api):
    mine = await api.create_group(1, [2])
    theirs = await api.create_group(3, [4])
    await api.send(1, mine, "quarterly figures attached")
    await api.send(3, theirs, "quarterly secret plans")
    assert await found(api, 2, "quarterly") == [(mine, 1)]
    assert await found(api, 4, "quarterly") == [(theirs, 1)]
    assert await found(api, 9, "quarterly") == []  # in no conversation at all
    # someone else's conversation by id: NOT_FOUND, as every read answers a non-member
    error = await api.error(SEARCH, {"q": "quarterly", "c": theirs}, user=2)
    assert error_code(error) == "NOT_FOUND" and "secret" not in str(error)
    await api.remove_member(3, theirs, 4)
    assert await found(api, 4, "quarterly") == []  # a removed member no longer finds anything there
    assert error_code(await api.error(SEARCH, {"q": "quarterly", "c": theirs}, user=4)) == "NOT_FOUND"


async def test_paging_visits_every_hit_once_newest_first_with_exact_page_info(api):
    a = await api.create_group(1, [2])
    b = await api.create_group(2, [1])
    sent = []
    for i in range(7):  # interleaved, so pages cross conversations
        cid = a if i % 2 == 0 else b
        sent.append((cid, await api.send(1, cid, f"ping number {i}")))
        await api.send(1, cid, "unrelated chatter")
    expected = list(reversed(sent))
    for scope, wanted in ((None, expected), (a, [h for h in expected if h[0] == a])):
        seen, after, pages = [], None, 0
        while True:
            page = await search(api, 2, "ping", c=scope, first=3, after=after)
            assert page["pageInfo"]["hasPreviousPage"] is (after is not None)
            seen += [(e["conversationId"], e["seq"]) for e in page["edges"]]
            assert page["pageInfo"]["endCursor"] == page["edges"][-1]["cursor"]
            pages += 1
            if not page["pageInfo"]["hasNextPage"]:
                break
            after = page["pageInfo"]["endCursor"]
        assert seen == wanted and pages == -(-len(wanted) // 3)
    # hasPreviousPage is exact: the only hit newer than the cursor deleted, nothing precedes it
    first = await search(api, 2, "ping", first=1)
    await api.data(DELETE, {"c": first["edges"][0]["conversationId"], "s": first["edges"][0]["seq"]}, user=1)
    rest = await search(api, 2, "ping", first=1, after=first["pageInfo"]["endCursor"])
    assert (
        rest["pageInfo"]["hasPreviousPage"] is False
        and (rest["edges"][0]["conversationId"], rest["edges"][0]["seq"]) == expected[1]
    )


@pytest.mark.parametrize(
    "variables, reason",
    [
        ({"q": ""}, None),
        ({"q": "   "}, None),
        ({"q": "x" * 201}, None),
        ({"q": "!!! ... ???"}, "NO_SEARCH_TERMS"),  # websearch_to_tsquery finds no word: not a 500
        ({"q": '"" -'}, "NO_SEARCH_TERMS"),  # an empty phrase, a dangling operator
        ({"q": "ok", "first": 0}, None),
        ({"q": "ok", "first": 201}, None),
        ({"q": "ok", "after": "not-a-cursor"}, None),
        ({"q": "ok", "after": "MjAyNi0wMS0wMVQwMDowMDowMHwxfDE"}, None),  # 2026-01-01T00:00:00|1|1: no zone
        ({"q": "ok", "c": "abc"}, None),
        ({"q": "a\x00b"}, None),
    ],
)
async def test_bad_search_input_is_bad_user_input(api, engine, variables, reason):
    cid = await api.create_group(1, [2])
    await api.send(1, cid, "ok")
    error = await api.error(SEARCH, variables, user=1)
    assert error_code(error) == "BAD_USER_INPUT", error
    if reason is not None:
        assert error["extensions"]["reason"] == reason
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM message"))).scalar() == 1


async def test_a_cursor_of_one_conversations_search_is_refused_in_another(api):
    a = await api.create_group(1, [2])
    b = await api.create_group(1, [2])
    for cid in (a, b, a):
        await api.send(1, cid, "echo")
    cursor = (await search(api, 1, "echo", c=a, first=1))["pageInfo"]["endCursor"]
    assert error_code(await api.error(SEARCH, {"q": "echo", "c": b, "after": cursor}, user=1)) == "BAD_USER_INPUT"
    assert await found(api, 1, "echo", after=cursor) == [(b, 1), (a, 1)]  # valid across all conversations
