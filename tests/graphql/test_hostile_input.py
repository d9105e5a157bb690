"""The doors a public GraphQL endpoint opens, and the limits that close them.

Every refusal is a clear error with a contract code, never a 5xx.
"""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from ..conftest import GraphQLClient, RunningServer, error_code, make_settings


@pytest.fixture(scope="module")
async def strict_server(migrated_url: str):
    """A production-mode server with small limits, rate limits on."""
    settings = make_settings(
        migrated_url,
        env="production",
        jwt_secret="a-production-secret-for-tests-only-0123456789",
        max_query_depth=4,
        max_aliases=3,
        max_fields=40,
        max_tokens=400,
        max_query_chars=3000,
        max_request_bytes=8000,
        max_batch_operations=3,
        request_timeout_seconds=0.5,
        rate_send_per_second=1,
        rate_send_burst=3,
        rate_read_per_second=1,
        rate_read_burst=2,
    )
    async with RunningServer(settings) as server:
        yield server


@pytest.fixture
def strict(strict_server: RunningServer, http: httpx.AsyncClient) -> GraphQLClient:
    return GraphQLClient(http, strict_server.url, strict_server.settings)


async def _group(client: GraphQLClient, owner: int, members: list[int]) -> str:
    data = await client.data(
        'mutation($m: [ID!]!) { createGroup(title: "t", memberIds: $m) { id } }',
        {"m": [str(m) for m in members]},
        user=owner,
    )
    return data["createGroup"]["id"]


async def test_a_query_deeper_than_the_limit_is_limit_exceeded(strict):
    shallow = "{ inbox { nodes { id } } }"
    assert "errors" not in await strict.execute(shallow, user=1)
    deep = "{ inbox { edges { node { lastMessage { seenBy } } } } }"
    error = await strict.error(deep, user=1)
    assert error_code(error) == "LIMIT_EXCEEDED"
    assert "depth" in error["message"]


async def test_depth_counts_through_fragments(strict):
    query = """
        query { inbox { ...E } }
        fragment E on ConversationConnection { edges { node { lastMessage { seenBy } } } }
    """
    assert error_code(await strict.error(query, user=1)) == "LIMIT_EXCEEDED"


async def test_too_many_aliases_is_limit_exceeded(strict):
    query = "{ a: viewer { userId } b: viewer { userId } c: viewer { userId } d: viewer { userId } }"
    error = await strict.error(query, user=1)
    assert error_code(error) == "LIMIT_EXCEEDED"
    assert "aliases" in error["message"]


async def test_fragment_reuse_cannot_multiply_fields_past_the_limit(strict):
    fields = " ".join(["userId totalUnread unreadConversations"] * 1)
    query = (
        "query { viewer { ...V } v2: viewer { ...V } v3: viewer { ...V } }\n"
        "fragment V on Viewer { " + fields + " ...W }\n"
        "fragment W on Viewer { "
        + " ".join(f"u{i}: userId" for i in range(0))
        + " userId userId userId userId userId userId userId userId userId userId userId userId userId userId }"
    )
    error = await strict.error(query, user=1)
    assert error_code(error) == "LIMIT_EXCEEDED"
    assert "fields" in error["message"]


async def test_too_many_tokens_is_refused_before_parsing_finishes(strict):
    query = "{ viewer { " + "x " * 420 + "} }"  # short, but 424 tokens
    error = await strict.error(query, user=1)
    assert error_code(error) == "LIMIT_EXCEEDED"


async def test_an_oversized_document_is_413_with_a_code(strict):
    query = "{ viewer { userId } }" + " " * 3100
    response = await strict.raw(query, user=1)
    assert response.status_code == 413
    assert response.json()["errors"][0]["extensions"]["code"] == "LIMIT_EXCEEDED"


async def test_an_oversized_body_is_413_even_with_a_short_query(strict):
    response = await strict.raw("{ viewer { userId } }", {"pad": "x" * 9000}, user=1)
    assert response.status_code == 413
    assert response.json()["errors"][0]["extensions"]["code"] == "LIMIT_EXCEEDED"


async def test_batches_are_capped(strict, http):
    headers = {"authorization": f"Bearer {strict.token(1)}"}
    ok = await http.post(strict.url, json=[{"query": "{ viewer { userId } }"}] * 3, headers=headers)
    assert ok.status_code == 200
    assert [item["data"]["viewer"]["userId"] for item in ok.json()] == ["1", "1", "1"]
    too_many = await http.post(strict.url, json=[{"query": "{ viewer { userId } }"}] * 4, headers=headers)
    assert too_many.status_code == 400
    assert too_many.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_production_mode_has_no_introspection_and_no_graphiql(strict, http):
    body = await strict.execute("{ __schema { types { name } } }", user=1)
    assert body["data"] is None
    assert body["errors"] and {error_code(e) for e in body["errors"]} == {"BAD_USER_INPUT"}
    page = await http.get(strict.url, headers={"accept": "text/html"})
    assert page.status_code == 404
    assert "graphiql" not in page.text.lower()


async def test_field_suggestions_are_not_given_in_production(strict):
    error = await strict.error("{ viewer { userI } }", user=1)
    assert "Did you mean" not in error["message"]


async def test_development_mode_serves_graphiql(client, http):
    page = await http.get(client.url, headers={"accept": "text/html"})
    assert page.status_code == 200
    assert "graphiql" in page.text.lower()


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]
)
async def test_browser_simple_posts_are_refused_csrf(strict, http, content_type):
    """A cross-site form or fetch without preflight can only send these content types."""
    response = await http.post(
        strict.url,
        content='{"query": "mutation { markRead(conversationId: \\"1\\", seq: 1) { advanced } }"}',
        headers={"content-type": content_type, "authorization": f"Bearer {strict.token(1)}"},
    )
    assert response.status_code == 415
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


@pytest.mark.parametrize(
    "content_type",
    [
        "APPLICATION/JSON",
        "Application/Json; Charset=UTF-8",
        "application/json;charset=utf8",
        'application/json; charset="UTF-8"',
        "application/json; charset=utf-8; boundary=ignored",
    ],
)
async def test_media_types_are_case_insensitive_and_utf8_charsets_are_accepted(strict, http, content_type):
    """Both HTTP paths: the first request of a document goes Strawberry's way, the second the
    accepted documents' (prepared.py)."""
    document = f"{{ viewer {{ userId }} }} # {content_type}"
    for _ in range(2):
        response = await http.post(
            strict.url,
            content=f'{{"query": "{document.replace(chr(34), "")}"}}',
            headers={"content-type": content_type, "authorization": f"Bearer {strict.token(1)}"},
        )
        assert (response.status_code, response.json()) == (200, {"data": {"viewer": {"userId": "1"}}})


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json; charset=utf-7",
        "application/json; charset=latin-1",
        "application/json; charset=utf-16",
        "APPLICATION/JSON; CHARSET=UTF-7",
        "application/jsonx",
        "application/json-patch+json",
        "application/graphql",
        None,
    ],
)
async def test_other_media_types_and_charsets_are_unsupported_media_type(strict, http, content_type):
    headers = {"authorization": f"Bearer {strict.token(1)}"}
    if content_type is not None:
        headers["content-type"] = content_type
    for _ in range(2):  # a document accepted before is refused the same way
        response = await http.post(strict.url, content=b'{"query": "{ viewer { userId } }"}', headers=headers)
        assert response.status_code == 415, (content_type, response.text)
        body = response.json()
        assert body.get("data") is None and body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT", body
        assert "application/json" in body["errors"][0]["message"]
    accepted = await http.post(
        strict.url, json={"query": "{ viewer { userId } }"}, headers={"authorization": headers["authorization"]}
    )
    assert accepted.json() == {"data": {"viewer": {"userId": "1"}}}


async def test_mutations_are_refused_over_get(strict, http):
    response = await http.get(
        strict.url,
        params={"query": 'mutation { markRead(conversationId: "1", seq: 1) { advanced } }'},
        headers={"authorization": f"Bearer {strict.token(1)}"},
    )
    assert response.status_code in (400, 405)
    assert response.status_code < 500


async def test_send_rate_limit_answers_limit_exceeded_with_a_retry_hint(strict, engine):
    cid = await _group(strict, 11, [])
    answers = []
    for _ in range(5):
        answers.append(
            await strict.execute(
                'mutation($c: ID!, $m: UUID!) { sendMessage(conversationId: $c, clientMsgId: $m, body: "x") { message { seq } } }',
                {"c": cid, "m": str(uuid.uuid4())},
                user=11,
            )
        )
    ok = [a for a in answers if "errors" not in a]
    limited = [a["errors"][0] for a in answers if "errors" in a]
    assert len(ok) == 3  # the burst
    assert limited and all(e["extensions"]["code"] == "LIMIT_EXCEEDED" for e in limited)
    assert all(0 < e["extensions"]["retryAfter"] <= 1 for e in limited)
    from sqlalchemy import text

    async with engine.connect() as conn:
        stored = (
            await conn.execute(text("SELECT count(*) FROM message WHERE conversation_id = :c"), {"c": int(cid)})
        ).scalar()
    assert stored == 3  # a limited call writes nothing
    # another user is not limited by user 11's calls
    other = await _group(strict, 12, [])
    assert "errors" not in await strict.execute(
        'mutation($c: ID!, $m: UUID!) { sendMessage(conversationId: $c, clientMsgId: $m, body: "y") { message { seq } } }',
        {"c": other, "m": str(uuid.uuid4())},
        user=12,
    )


async def test_mark_read_rate_limit_refills_over_time(strict):
    cid = await _group(strict, 21, [])
    query = "mutation($c: ID!) { markRead(conversationId: $c, seq: 0) { advanced } }"
    codes = []
    for _ in range(3):
        body = await strict.execute(query, {"c": cid}, user=21)
        codes.append(body["errors"][0]["extensions"]["code"] if "errors" in body else "ok")
    assert codes == ["ok", "ok", "LIMIT_EXCEEDED"]
    await asyncio.sleep(1.1)
    assert "errors" not in await strict.execute(query, {"c": cid}, user=21)


async def test_a_request_over_the_time_limit_is_limit_exceeded_not_a_500(strict_server, strict):
    """A sync over many conversations made slow on purpose: the pg_sleep inside
    runs in the database; the answer must come at the time limit, with a code."""
    # Hold the lock on every conversation row so that the send waits.
    database = strict_server.runtime.deps.database
    cid = await _group(strict, 31, [])

    async with database.transaction() as conn:
        await conn.execute("SELECT 1 FROM conversation WHERE id = $1 FOR UPDATE", int(cid))
        body = await strict.execute(
            'mutation($c: ID!, $m: UUID!) { sendMessage(conversationId: $c, clientMsgId: $m, body: "z") { message { seq } } }',
            {"c": cid, "m": str(uuid.uuid4())},
            user=31,
        )
    assert body["errors"][0]["extensions"]["code"] == "LIMIT_EXCEEDED"
    assert body["errors"][0]["extensions"]["reason"] == "TIMEOUT"


async def test_an_error_beside_a_shared_load_does_not_cancel_the_other_fields(client):
    """Two fields waiting on the same DataLoader key, one of them beside a field whose error
    propagates: graphql-core cancels that one's siblings, and it must not cancel the load the
    other is waiting on (it did: CancelledError, HTTP 500; found by tests/graphql/test_fuzz.py)."""
    conversation = await _group(client, 1, [2])
    await client.data(
        'mutation($c: ID!, $m: UUID!) { sendMessage(conversationId: $c, clientMsgId: $m, body: "hi") { duplicate } }',
        {"c": conversation, "m": str(uuid.uuid4())},
        user=1,
    )
    document = """query($c: ID!) {
      a: conversation(id: $c) { id lastMessage { body seenByCount } }
      b: conversation(id: $c) { messages(after: "not a cursor") { __typename } lastMessage { body } }
    }"""
    for _ in range(3):  # the first time and as an accepted document
        body = await client.execute(document, {"c": conversation}, user=1)  # HTTP 200, not 500
        # conversation is non-null: b's error reaches the root (data null), a's load is not cancelled
        assert body["data"] is None, body
        assert [(error_code(e), e["path"]) for e in body["errors"]] == [("BAD_USER_INPUT", ["b", "messages"])], body
