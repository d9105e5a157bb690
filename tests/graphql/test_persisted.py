"""Persisted documents (engine/persisted.py): the three forms clients send a document by id in,
over HTTP POST and GET and both websocket protocols, loaded by `chatgql documents load`; the
allowlist refuses every document not loaded, by text or by id, with its code."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from chatgql.db import Database
from chatgql.edge.auth import issue_token
from chatgql.services.documents import do_load_documents, read_manifest

from ..conftest import REPO, RunningServer, make_settings
from ..support.live import PROTOCOLS, TRANSPORT_WS, Operation, WsClient, bearer

VIEWER = "query Viewer { viewer { userId } }"
CREATE_GROUP = (
    "mutation CreateGroup($title: String!, $members: [ID!]!) { createGroup(title: $title, memberIds: $members) { id } }"
)
SEND = (
    "mutation Send($c: ID!, $k: UUID!, $b: String!)"
    " { sendMessage(conversationId: $c, clientMsgId: $k, body: $b) { message { seq body } } }"
)
NEW = "subscription New($c: ID) { messageNew(conversationId: $c) { seq message { body } } }"
UNLISTED = "query Unlisted { viewer { totalUnread } }"
RELAY_IDS = {VIEWER: "relay-Viewer-1"}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def apollo_manifest(*texts: str) -> dict:
    return {
        "format": "apollo-persisted-query-manifest",
        "version": 1,
        "operations": [
            {"id": sha256(t), "name": t.split()[1].split("(")[0], "type": t.split()[0], "body": t} for t in texts
        ],
    }


def load(path: Path, url: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in __import__("os").environ.items() if not k.upper().startswith("CHATGQL_")}
    env["CHATGQL_DATABASE_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "chatgql.server.cli", "documents", "load", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


MANIFESTS = {
    "apollo.json": apollo_manifest(CREATE_GROUP, SEND),
    "codegen.json": {f"sha256:{sha256(NEW)}": NEW, sha256(VIEWER): VIEWER},
    "relay.json": {RELAY_IDS[VIEWER]: VIEWER},
}


async def load_all(url: str) -> None:
    """The three formats (Apollo's manifest, GraphQL Code Generator's {sha256: text}, Relay's
    {id: text}), read and stored as `chatgql documents load` does (its own test runs it)."""
    database = await Database(url, max_size=1).open()
    try:
        for manifest in MANIFESTS.values():
            await do_load_documents(database, read_manifest(manifest))
    finally:
        await database.close()


@pytest.fixture
async def allowlist(migrated_url: str) -> AsyncIterator[RunningServer]:
    await load_all(migrated_url)
    async with RunningServer(make_settings(migrated_url, documents_allowlist=True)) as server:
        yield server


async def post(server: RunningServer, http: httpx.AsyncClient, body: object, user: str = "1", **headers: str):
    token = issue_token(server.settings, user)
    headers = {"authorization": f"Bearer {token}", **headers}
    return await http.post(server.url, json=body, headers=headers)


def code(response: httpx.Response) -> str:
    body = response.json()
    assert body.get("errors") and len(body["errors"]) == 1, body
    assert body.get("data") is None, body
    return body["errors"][0]["extensions"]["code"]


async def test_each_format_runs_a_loaded_document_in_allowlist_mode(allowlist, http) -> None:
    by_codegen = await post(allowlist, http, {"documentId": sha256(VIEWER)})
    assert by_codegen.json() == {"data": {"viewer": {"userId": "1"}}}
    by_prefix = await post(allowlist, http, {"documentId": f"sha256:{sha256(VIEWER)}"})
    assert by_prefix.json() == {"data": {"viewer": {"userId": "1"}}}
    by_relay = await post(allowlist, http, {"doc_id": RELAY_IDS[VIEWER]})
    assert by_relay.json() == {"data": {"viewer": {"userId": "1"}}}
    variables = {"title": "t", "members": ["2"]}
    apollo = {"extensions": {"persistedQuery": {"version": 1, "sha256Hash": sha256(CREATE_GROUP)}}}
    created = await post(allowlist, http, {**apollo, "variables": variables, "operationName": "CreateGroup"})
    assert created.json()["data"]["createGroup"]["id"], created.json()
    token = issue_token(allowlist.settings, "1")
    by_get = await http.get(
        allowlist.url, params={"documentId": sha256(VIEWER)}, headers={"authorization": f"Bearer {token}"}
    )
    assert by_get.json() == {"data": {"viewer": {"userId": "1"}}}
    apollo_get = {"extensions": json.dumps({"persistedQuery": {"version": 1, "sha256Hash": sha256(VIEWER)}})}
    by_get = await http.get(allowlist.url, params=apollo_get, headers={"authorization": f"Bearer {token}"})
    assert by_get.json() == {"data": {"viewer": {"userId": "1"}}}
    # a listed text, sent as it is
    by_text = await post(allowlist, http, {"query": VIEWER})
    assert by_text.json() == {"data": {"viewer": {"userId": "1"}}}
    # the text with its own id: the same document
    with_text = await post(allowlist, http, {"documentId": sha256(VIEWER), "query": VIEWER})
    assert with_text.json() == {"data": {"viewer": {"userId": "1"}}}
    batch = await post(allowlist, http, [{"documentId": sha256(VIEWER)}, {"doc_id": RELAY_IDS[VIEWER]}])
    assert batch.json() == [{"data": {"viewer": {"userId": "1"}}}] * 2


async def test_allowlist_mode_refuses_texts_unknown_ids_and_mismatches_over_http(allowlist, http) -> None:
    assert code(await post(allowlist, http, {"query": UNLISTED})) == "PERSISTED_QUERY_NOT_IN_LIST"
    assert code(await post(allowlist, http, {"query": VIEWER + " "})) == "PERSISTED_QUERY_NOT_IN_LIST"
    assert code(await post(allowlist, http, {"documentId": sha256(UNLISTED)})) == "PERSISTED_QUERY_NOT_FOUND"
    assert code(await post(allowlist, http, {"doc_id": "relay-Unknown-1"})) == "PERSISTED_QUERY_NOT_FOUND"
    # Apollo's registration (hash and text) is refused, and registers nothing
    register = {"query": UNLISTED, "extensions": {"persistedQuery": {"version": 1, "sha256Hash": sha256(UNLISTED)}}}
    assert code(await post(allowlist, http, register)) == "PERSISTED_QUERY_NOT_FOUND"
    assert code(await post(allowlist, http, {"documentId": sha256(UNLISTED)})) == "PERSISTED_QUERY_NOT_FOUND"
    # a text that is not the one its id names
    assert code(await post(allowlist, http, {"documentId": sha256(VIEWER), "query": UNLISTED})) == "BAD_USER_INPUT"
    assert code(await post(allowlist, http, {"doc_id": RELAY_IDS[VIEWER], "query": UNLISTED})) == "BAD_USER_INPUT"
    two_ids = {"documentId": sha256(VIEWER), "doc_id": RELAY_IDS[VIEWER]}
    assert code(await post(allowlist, http, two_ids)) == "BAD_USER_INPUT"
    assert code(await post(allowlist, http, {"documentId": 7})) == "BAD_USER_INPUT"
    for hostile in ("x" * 201, "a\u0000b", "", "a b", "é"):
        assert code(await post(allowlist, http, {"documentId": hostile})) == "BAD_USER_INPUT", hostile
    surrogate = await http.post(
        allowlist.url,
        content=b'{"query": "query { viewer { userId } } # \\ud800"}',
        headers={"content-type": "application/json", "authorization": f"Bearer {issue_token(allowlist.settings, '1')}"},
    )
    assert code(surrogate) == "BAD_USER_INPUT"  # a lone surrogate: not JSON the allowlist reads, not let through
    # a batch with one text in it runs nothing
    batch = await post(allowlist, http, [{"documentId": sha256(VIEWER)}, {"query": UNLISTED}])
    assert code(batch) == "PERSISTED_QUERY_NOT_IN_LIST"
    # JSON the server's reader takes but this one does not is refused, not let through
    sneaky = await http.post(
        allowlist.url,
        content=b'{"query": "' + UNLISTED.encode() + b'", "variables": {"x": NaN}}',
        headers={"content-type": "application/json", "authorization": f"Bearer {issue_token(allowlist.settings, '1')}"},
    )
    assert code(sneaky) == "BAD_USER_INPUT"
    token = issue_token(allowlist.settings, "1")
    by_get = await http.get(allowlist.url, params={"query": UNLISTED}, headers={"authorization": f"Bearer {token}"})
    assert code(by_get) == "PERSISTED_QUERY_NOT_IN_LIST"
    # the GraphQL-over-HTTP media type: a request error, 400
    strict = await post(allowlist, http, {"query": UNLISTED}, accept="application/graphql-response+json")
    assert strict.status_code == 400
    assert strict.json() == {
        "errors": [
            {
                "message": "this server runs only the documents in its list",
                "extensions": {"code": "PERSISTED_QUERY_NOT_IN_LIST"},
            }
        ]
    }


async def _subscribe(client: WsClient, payload: dict) -> Operation:
    op_id = str(next(client._ids))
    start = "subscribe" if client.protocol == TRANSPORT_WS else "start"
    await client.ws.send(json.dumps({"id": op_id, "type": start, "payload": payload}))
    return Operation(client, op_id)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_allowlist_mode_over_websockets(allowlist, http, protocol: str) -> None:
    created = await post(
        allowlist, http, {"documentId": sha256(CREATE_GROUP), "variables": {"title": "t", "members": ["2"]}}
    )
    conversation = created.json()["data"]["createGroup"]["id"]
    async with await WsClient.connect(allowlist.ws_url, bearer(allowlist.settings, 2), protocol=protocol) as client:
        unlisted = NEW.replace("body", "seq")
        refused = await _subscribe(client, {"query": unlisted, "variables": {"c": conversation}})
        assert (await refused.error()).code == "PERSISTED_QUERY_NOT_IN_LIST"
        unknown = await _subscribe(client, {"documentId": sha256(NEW.replace("body", "seq"))})
        assert (await unknown.error()).code == "PERSISTED_QUERY_NOT_FOUND"
        mismatch = await _subscribe(client, {"documentId": sha256(NEW), "query": UNLISTED})
        assert (await mismatch.error()).code == "BAD_USER_INPUT"
        forms = [
            {"query": NEW},  # a listed text
            {"documentId": sha256(NEW)},
            {"extensions": {"persistedQuery": {"version": 1, "sha256Hash": sha256(NEW)}}},
        ]
        operations = [await _subscribe(client, {**form, "variables": {"c": conversation}}) for form in forms]
        # each runs (live delivery itself is tests/events'; here the session's server may share the
        # database, and its relay the live events of some conversations)
        await wait_subscribed(allowlist, len(forms))
        for operation in operations:
            await operation.stop()
        await wait_subscribed(allowlist, 0)
    variables = {"c": conversation, "k": str(uuid.uuid4()), "b": "hello"}
    sent = await post(allowlist, http, {"documentId": sha256(SEND), "variables": variables})
    assert sent.json()["data"]["sendMessage"]["message"]["body"] == "hello", sent.json()


async def wait_subscribed(server: RunningServer, count: int) -> None:
    from ..support.live import wait_active_subscriptions

    await wait_active_subscriptions(server, count, timeout=30)


async def test_without_the_allowlist_texts_run_and_apollo_registers_in_memory(server, http) -> None:
    assert (await post(server, http, {"query": VIEWER})).json() == {"data": {"viewer": {"userId": "1"}}}
    hash_only = {"extensions": {"persistedQuery": {"version": 1, "sha256Hash": sha256(UNLISTED)}}}
    missed = await post(server, http, hash_only)
    assert code(missed) == "PERSISTED_QUERY_NOT_FOUND"
    assert missed.json()["errors"][0]["message"] == "PersistedQueryNotFound"  # what Apollo Client looks for
    registered = await post(server, http, {**hash_only, "query": UNLISTED})
    assert registered.json() == {"data": {"viewer": {"totalUnread": 0}}}
    assert (await post(server, http, hash_only)).json() == {"data": {"viewer": {"totalUnread": 0}}}
    # a text whose hash is not the one sent registers nothing
    wrong = {"query": VIEWER, "extensions": {"persistedQuery": {"version": 1, "sha256Hash": sha256("other")}}}
    assert code(await post(server, http, wrong)) == "BAD_USER_INPUT"
    assert code(await post(server, http, {"documentId": sha256("other")})) == "PERSISTED_QUERY_NOT_FOUND"
    # a non-sha256 id with a text cannot be checked: not registered
    assert code(await post(server, http, {"doc_id": "mine", "query": VIEWER})) == "PERSISTED_QUERY_NOT_FOUND"


async def test_documents_load_is_idempotent_and_refuses_conflicts_and_invalid_documents(migrated_url, tmp_path) -> None:
    manifest = tmp_path / "apollo.json"
    manifest.write_text(json.dumps(apollo_manifest(VIEWER, SEND)))
    first = await asyncio.to_thread(load, manifest, migrated_url)
    assert first.returncode == 0 and "2 documents added, 0 already loaded" in first.stdout, first
    again = await asyncio.to_thread(load, manifest, migrated_url)
    assert again.returncode == 0 and "0 documents added, 2 already loaded" in again.stdout, again
    relay = tmp_path / "relay.json"
    relay.write_text(json.dumps({"q1": VIEWER}))
    assert (await asyncio.to_thread(load, relay, migrated_url)).returncode == 0
    relay.write_text(json.dumps({"q1": UNLISTED, "q2": VIEWER}))
    conflict = await asyncio.to_thread(load, relay, migrated_url)
    assert conflict.returncode == 2 and "already stored with another text" in conflict.stderr, conflict
    wrong_hash = tmp_path / "wrong.json"
    wrong_hash.write_text(json.dumps({sha256(VIEWER): UNLISTED}))
    refused = await asyncio.to_thread(load, wrong_hash, migrated_url)
    assert refused.returncode == 2 and "sha256" in refused.stderr, refused
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps({"bad": "query { nosuchfield }"}))
    refused = await asyncio.to_thread(load, invalid, migrated_url)
    assert refused.returncode == 2 and "nosuchfield" in refused.stderr, refused
    for name, manifest in MANIFESTS.items():  # each format, loaded twice
        (tmp_path / name).write_text(json.dumps(manifest))
        for _ in range(2):
            done = await asyncio.to_thread(load, tmp_path / name, migrated_url)
            assert done.returncode == 0, done.stderr
    # nothing of a refused manifest was written: q2 is not there
    settings = make_settings(migrated_url, documents_allowlist=True)
    async with RunningServer(settings) as server, httpx.AsyncClient() as http:
        assert code(await post(server, http, {"doc_id": "q2"})) == "PERSISTED_QUERY_NOT_FOUND"
        assert (await post(server, http, {"doc_id": "q1"})).json() == {"data": {"viewer": {"userId": "1"}}}
        new_by_id = await post(server, http, {"documentId": sha256(NEW)})  # a subscription: not over HTTP
        assert code(new_by_id) == "BAD_USER_INPUT"
        created = {"documentId": sha256(CREATE_GROUP), "variables": {"title": "t", "members": []}}
        assert (await post(server, http, created)).json()["data"]["createGroup"]["id"]


@pytest.mark.node  # the manifest is written by scripts/webchat-manifest.mjs
async def test_the_web_chat_documents_run_on_an_allowlist_server(migrated_url) -> None:
    """scripts/webchat-manifest.mjs lists the texts the web chat sends (urql's printing of
    webchat/src/operations.js); loaded, each of them runs on an allowlist server as the web chat
    sends it, and a text that differs from one by a character does not."""
    made = await asyncio.to_thread(
        subprocess.run,
        ["node", str(REPO / "scripts" / "webchat-manifest.mjs")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    manifest = json.loads(made.stdout)
    names = {operation["name"] for operation in manifest["operations"]}
    assert {"Viewer", "Inbox", "History", "Send", "MarkRead"} <= names, names
    database = await Database(migrated_url, max_size=1).open()
    try:
        assert await do_load_documents(database, read_manifest(manifest)) == len(manifest["operations"])
    finally:
        await database.close()
    settings = make_settings(migrated_url, documents_allowlist=True)
    async with RunningServer(settings) as server, httpx.AsyncClient() as http:
        texts = {operation["name"]: operation["body"] for operation in manifest["operations"]}
        viewer = await post(server, http, {"query": texts["Viewer"]})
        assert viewer.json()["data"]["viewer"]["userId"] == "1"
        created = await post(
            server, http, {"query": texts["CreateGroup"], "variables": {"title": "g", "members": ["2"]}}
        )
        assert "errors" not in created.json(), created.json()
        for operation in manifest["operations"]:
            if operation["type"] == "subscription":
                continue
            answer = (await post(server, http, {"query": operation["body"]})).json()
            codes = {error["extensions"]["code"] for error in answer.get("errors", [])}
            assert not any(code.startswith("PERSISTED_QUERY") for code in codes), (operation["name"], answer)
            changed = (await post(server, http, {"query": operation["body"] + "\n"})).json()
            assert changed["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_IN_LIST"
