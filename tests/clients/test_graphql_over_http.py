"""GraphQL over HTTP: the graphql-http audit suite, and the status codes the spec gives
application/graphql-response+json (4xx, no `data`, for requests that never execute)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from ..conftest import REPO, GraphQLClient, RunningServer

AUDIT = REPO / "tests" / "clients" / "http_audit"
RESPONSE_JSON = "application/graphql-response+json"


def _node_modules() -> Path:
    """tests/clients/http_audit/node_modules, installed from the committed lockfile when missing."""
    modules = AUDIT / "node_modules"
    if not (modules / "graphql-http").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=AUDIT, check=True, timeout=300)
    return modules


async def _audit(url: str, token: str | None) -> list[dict]:
    _node_modules()
    args = ["node", str(AUDIT / "audit.mjs"), url] + ([token] if token else [])
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    return json.loads(out)["results"]


@pytest.mark.parametrize("authenticated", [False, True], ids=["anonymous", "with-token"])
async def test_graphql_http_audit_has_no_failures_and_no_warnings(
    server: RunningServer, client: GraphQLClient, authenticated: bool
):
    assert shutil.which("node"), "the audit needs Node.js (20 or later) on PATH"
    results = await _audit(server.url, client.token(1) if authenticated else None)
    assert len(results) > 50  # the suite ran
    not_ok = [result for result in results if result["status"] != "ok"]
    assert not_ok == [], json.dumps(not_ok, indent=1)


QUERY = "query Q($id: ID!) { conversation(id: $id) { id } }"


async def _post(client: GraphQLClient, body: object, accept: str | None, user: int | None = 1):
    headers = {"content-type": "application/json"}
    if accept is not None:
        headers["accept"] = accept
    if user is not None:
        headers["authorization"] = f"Bearer {client.token(user)}"
    return await client.http.post(client.url, json=body, headers=headers)


@pytest.mark.parametrize(
    "body",
    [
        {"query": "{ viewer { id "},  # does not parse
        {"query": "{ viewer { nope } }"},  # does not validate
        {"query": QUERY, "variables": {"id": {"not": "an id"}}},  # variables do not coerce
        {"query": QUERY, "variables": {}},  # a required variable missing
    ],
    ids=["parse", "validation", "coercion", "missing-variable"],
)
async def test_request_errors_are_400_without_data_for_graphql_response_json_and_200_for_json(
    client: GraphQLClient, body: dict
):
    for _ in range(2):  # the second time, a document accepted before takes the direct path
        spec = await _post(client, body, RESPONSE_JSON)
        assert spec.status_code == 400, spec.text
        assert spec.headers["content-type"] == RESPONSE_JSON
        assert "data" not in spec.json() and spec.json()["errors"]
        legacy = await _post(client, body, "application/json")
        assert legacy.status_code == 200, legacy.text
        assert legacy.headers["content-type"] == "application/json"
        assert legacy.json()["data"] is None and legacy.json()["errors"]


async def test_no_such_operation_is_400_for_both_media_types(client: GraphQLClient):
    body = {"query": "query A { __typename } query B { __typename }", "operationName": "C"}
    spec = await _post(client, body, RESPONSE_JSON)
    assert spec.status_code == 400 and "data" not in spec.json(), spec.text
    legacy = await _post(client, body, "application/json")  # as before the spec's media type
    assert legacy.status_code == 400 and legacy.json()["data"] is None


async def test_an_accepted_document_answers_like_a_new_one(server: RunningServer, client: GraphQLClient):
    """The direct path for accepted documents (schema.py _run_accepted) and Strawberry's
    give the same status, media type and body."""
    query = "query Q($id: ID!) { conversation(id: $id) { id } } # accepted-test"
    bad = {"query": query, "variables": {"id": []}}
    first = await _post(client, bad, RESPONSE_JSON)  # parsed and validated: now accepted
    assert query in server.app.graphql.accepted
    second = await _post(client, bad, RESPONSE_JSON)
    assert (first.status_code, first.headers["content-type"], first.json()) == (
        second.status_code,
        second.headers["content-type"],
        second.json(),
    )
    assert first.status_code == 400


async def test_field_errors_keep_200_and_data_under_graphql_response_json(client: GraphQLClient):
    # Executed: a resolver's error (no such conversation; not signed in) is data null, 200.
    for user in (1, None):
        for _ in range(2):
            response = await _post(client, {"query": QUERY, "variables": {"id": "999999"}}, RESPONSE_JSON, user=user)
            assert response.status_code == 200, response.text
            assert response.headers["content-type"] == RESPONSE_JSON
            body = response.json()
            assert "data" in body and body["errors"][0]["path"] == ["conversation"]


async def test_accept_negotiation(client: GraphQLClient):
    body = {"query": "{ __typename }"}
    cases = {
        None: "application/json",
        "*/*": "application/json",
        "application/json": "application/json",
        RESPONSE_JSON: RESPONSE_JSON,
        f"{RESPONSE_JSON}, application/json;q=0.9": RESPONSE_JSON,
        f"application/json, {RESPONSE_JSON};q=0.5": "application/json",
        f"{RESPONSE_JSON};q=0": "application/json",
    }
    for accept, expected in cases.items():
        response = await _post(client, body, accept)
        assert response.status_code == 200
        assert response.headers["content-type"] == expected, accept
        assert response.json() == {"data": {"__typename": "Query"}}


async def test_get_request_errors_follow_the_same_rules(client: GraphQLClient):
    params = {"query": "{ viewer { nope } }"}
    spec = await client.http.get(client.url, params=params, headers={"accept": RESPONSE_JSON})
    assert spec.status_code == 400 and "data" not in spec.json()
    legacy = await client.http.get(client.url, params=params, headers={"accept": "application/json"})
    assert legacy.status_code == 200 and legacy.json()["data"] is None


async def test_batches_are_400_only_when_no_operation_executed(client: GraphQLClient):
    good, bad = {"query": "{ __typename }"}, {"query": "{ nope }"}
    mixed = await _post(client, [good, bad], RESPONSE_JSON)
    assert mixed.status_code == 200
    assert mixed.json() == [{"data": {"__typename": "Query"}}, {"errors": mixed.json()[1]["errors"]}]
    failed = await _post(client, [bad, bad], RESPONSE_JSON)
    assert failed.status_code == 400 and all("data" not in answer for answer in failed.json())
    legacy = await _post(client, [bad, bad], "application/json")
    assert legacy.status_code == 200 and all(answer["data"] is None for answer in legacy.json())


async def test_refusals_before_graphql_have_no_data_under_graphql_response_json(client: GraphQLClient):
    headers = {"content-type": "application/json", "accept": RESPONSE_JSON}
    response = await client.http.post(client.url, content=b"{not json", headers=headers)
    assert response.status_code == 400
    assert response.headers["content-type"] == RESPONSE_JSON
    assert "data" not in response.json() and response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    legacy = await client.http.post(client.url, content=b"{not json", headers={"content-type": "application/json"})
    assert legacy.status_code == 400 and legacy.json()["data"] is None
