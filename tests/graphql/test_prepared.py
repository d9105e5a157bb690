"""Documents the server has accepted before run straight through graphql-core
(chatgql.engine.prepared). A repeated request must get the answer the first one
got: same status, same JSON, same contract codes. Each test sends a document the
server has never seen (a unique comment makes it new), so the first request takes
Strawberry's whole pipeline and the repeats take the direct path.
"""

from __future__ import annotations

import uuid

import pytest

from ..conftest import GraphQLClient, error_code

CREATE_GROUP = "mutation($t: String!, $ids: [ID!]!) { createGroup(title: $t, memberIds: $ids) { id } }"


def fresh(document: str) -> str:
    return f"# {uuid.uuid4()}\n{document}"


def accepted(server):
    return server.app.graphql.accepted


async def post(client: GraphQLClient, body: object, *, user: int | None = 1, headers: dict | None = None):
    all_headers = {"content-type": "application/json"}
    if user is not None:
        all_headers["authorization"] = f"Bearer {client.token(user)}"
    all_headers.update(headers or {})
    return await client.http.post(client.url, json=body, headers=all_headers)


async def twice(server, client: GraphQLClient, body: dict, **kwargs) -> tuple[dict, dict]:
    """The same request twice; asserts both answers are identical and returns (first, second)."""
    first = await post(client, body, **kwargs)
    second = await post(client, body, **kwargs)
    assert (first.status_code, first.headers["content-type"]) == (second.status_code, second.headers["content-type"])
    assert first.json() == second.json()
    return first.json(), second.json()


async def group(client: GraphQLClient, owner: int, *members: int) -> str:
    data = await client.data(CREATE_GROUP, {"t": "room", "ids": [str(m) for m in members]}, user=owner)
    return data["createGroup"]["id"]


async def test_a_valid_document_is_accepted_once_and_repeats_answer_alike(server, client):
    cid = await group(client, 1, 2)
    query = fresh("query($c: ID!) { conversation(id: $c) { id type title memberCount } viewer { userId } }")
    assert query not in accepted(server)
    first, second = await twice(server, client, {"query": query, "variables": {"c": cid}})
    assert query in accepted(server)
    assert first["data"]["conversation"] == {"id": cid, "type": "GROUP", "title": "room", "memberCount": 2}
    # new variables on the accepted document
    other = await group(client, 1, 3, 4)
    third = (await post(client, {"query": query, "variables": {"c": other}})).json()
    assert third["data"]["conversation"]["memberCount"] == 3


async def test_mutations_on_the_direct_path_store_and_dedupe_like_the_first(server, client, engine):
    cid = await group(client, 1, 2)
    send = fresh(
        "mutation($c: ID!, $m: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $m,"
        " body: $b) { duplicate message { seq body senderId } } }"
    )
    variables = {"c": cid, "m": str(uuid.uuid4()), "b": "once"}
    first = (await post(client, {"query": send, "variables": variables})).json()
    assert send in accepted(server)
    again = (await post(client, {"query": send, "variables": variables})).json()
    assert first["data"]["sendMessage"] == {"duplicate": False, "message": {"seq": 1, "body": "once", "senderId": "1"}}
    assert again["data"]["sendMessage"] == {"duplicate": True, "message": first["data"]["sendMessage"]["message"]}
    nxt = (await post(client, {"query": send, "variables": {**variables, "m": str(uuid.uuid4())}})).json()
    assert nxt["data"]["sendMessage"]["message"]["seq"] == 2


@pytest.mark.parametrize(
    ("document", "variables", "user", "code"),
    [
        # resolver errors: the contract's codes
        ("query($c: ID!) { conversation(id: $c) { id } }", {"c": "999999999"}, 1, "NOT_FOUND"),
        ("query($c: ID!) { conversation(id: $c) { id } }", {"c": "not-an-id"}, 1, "BAD_USER_INPUT"),
        ("query { viewer { userId } }", {}, None, "UNAUTHENTICATED"),
        # variable coercion fails before execution, on an accepted document
        ("query($c: ID!) { conversation(id: $c) { id } }", {}, 1, "BAD_USER_INPUT"),
        ("query($n: Int) { inbox(first: $n) { nodes { id } } }", {"n": "ten"}, 1, "BAD_USER_INPUT"),
        (
            "mutation($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { advanced } }",
            {"c": "1", "s": -1},
            1,
            "BAD_USER_INPUT",
        ),
    ],
)
async def test_errors_on_an_accepted_document_are_the_same_as_the_first_time(
    server, client, document, variables, user, code
):
    query = fresh(document)
    first, second = await twice(server, client, {"query": query, "variables": variables}, user=user)
    assert query in accepted(server)
    assert [error_code(e) for e in first["errors"]] == [code]


async def test_documents_that_fail_validation_are_never_accepted(server, client):
    for document in ("query { viewer { nope } }", "query { viewer { userId } ", "query($x: Int) { viewer { userId } }"):
        query = fresh(document)
        first, _ = await twice(server, client, {"query": query})
        assert error_code(first["errors"][0]) in {"BAD_USER_INPUT", "LIMIT_EXCEEDED"}
        assert query not in accepted(server)


async def test_operation_selection_on_an_accepted_document_matches_the_ordinary_path(server, client):
    query = fresh(
        "query A { viewer { userId } } query B { viewer { totalUnread } } subscription S { messageNew { seq } }"
    )
    a, _ = await twice(server, client, {"query": query, "operationName": "A"})
    assert a == {"data": {"viewer": {"userId": "1"}}}
    assert query in accepted(server)
    b, _ = await twice(server, client, {"query": query, "operationName": "B"})
    assert "totalUnread" in b["data"]["viewer"]
    # no operationName with several operations, an unknown one, a subscription over HTTP: refused alike
    for body in ({"query": query}, {"query": query, "operationName": "Z"}, {"query": query, "operationName": "S"}):
        first = await post(client, body)
        second = await post(client, body)
        assert first.status_code == second.status_code
        assert first.json() == second.json()
        assert first.status_code == 400 or "errors" in first.json()


async def test_requests_the_direct_path_does_not_take_still_answer_as_before(server, client):
    query = fresh("query { viewer { userId } }")
    await post(client, {"query": query})
    assert query in accepted(server)
    # a batch of the accepted document
    batch = await post(client, [{"query": query}, {"query": query}])
    assert batch.status_code == 200 and batch.json() == [{"data": {"viewer": {"userId": "1"}}}] * 2
    # variables or operationName of the wrong type: the ordinary path's 400
    for body in ({"query": query, "variables": [1]}, {"query": query, "operationName": 7}):
        response = await post(client, body)
        assert response.status_code == 400, response.text
        assert error_code(response.json()["errors"][0]) == "BAD_USER_INPUT"
    # not JSON by content type (a form post): refused, accepted document or not
    form = await client.http.post(
        client.url,
        content=f'{{"query": "{query.splitlines()[1]}"}}',
        headers={"content-type": "text/plain", "authorization": f"Bearer {client.token(1)}"},
    )
    assert form.status_code == 415 and error_code(form.json()["errors"][0]) == "BAD_USER_INPUT"
    # JSON orjson refuses but the standard library takes (NaN): the ordinary path answers
    nan = await client.http.post(
        client.url,
        content='{"query": ' + _json_str(query) + ', "variables": {"x": NaN}}',
        headers={"content-type": "application/json", "authorization": f"Bearer {client.token(1)}"},
    )
    assert nan.status_code == 200 and nan.json() == {"data": {"viewer": {"userId": "1"}}}


async def test_non_ascii_and_lone_surrogates_come_back_intact(server, client):
    cid = await group(client, 1, 2)
    send = fresh(
        "mutation($c: ID!, $m: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $m,"
        " body: $b) { message { body } } }"
    )
    for body in ("héllo ✓ 日本", "emoji 👋🏽"):
        for _ in range(2):  # first: ordinary path, then the direct one
            data = (
                await post(client, {"query": send, "variables": {"c": cid, "m": str(uuid.uuid4()), "b": body}})
            ).json()
            assert data["data"]["sendMessage"]["message"]["body"] == body
    # a lone surrogate in a variable is refused (invalid Unicode) on both paths, with a clean JSON error
    raw = (
        '{"query": '
        + _json_str(send)
        + ', "variables": {"c": "'
        + cid
        + '", "m": "'
        + str(uuid.uuid4())
        + '", "b": "bad \\ud800"}}'
    )
    for _ in range(2):
        response = await client.http.post(
            client.url,
            content=raw,
            headers={"content-type": "application/json", "authorization": f"Bearer {client.token(1)}"},
        )
        assert response.status_code == 200
        assert error_code(response.json()["errors"][0]) == "BAD_USER_INPUT"


def _json_str(text: str) -> str:
    import json

    return json.dumps(text)
