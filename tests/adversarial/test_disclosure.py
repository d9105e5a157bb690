"""What a production server's answers give away: no schema hints, no Python text, no long echo, no metrics.

Each probe is sent to the production-mode server (`prod`, a `chatgql serve`
process with default settings); the suggestion probes are also sent to a
development server, which must still suggest: so the probes do reach the code
that suggests, and the production answers say nothing because production hides it.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets
from graphql import GraphQLEnumType, GraphQLError

from chatgql.graphql.errors import MAX_ECHO_CHARS, client_error
from chatgql.graphql.scalars import SCALARS

from ..conftest import GraphQLClient
from .conftest import ServeProcess, serve_process

USER = 501

# One probe per kind of suggestion graphql-core makes: (query, variables).
SUGGESTION_PROBES = {
    "field": ("{ viewer { totalUnred } }", None),
    "argument": ("{ inbox(frist: 5) { nodes { id } } }", None),
    "directive argument": ("{ viewer @include(iff: true) { totalUnread } }", None),
    "variable type": ("query($c: [SyncCursr!]!) { sync(cursors: $c) { lastSeq } }", None),
    "fragment type": ("{ viewer { ... on Viewr { totalUnread } } }", None),
    "input field (literal)": ('{ sync(cursors: [{conversationId: "1", afterSeq: 0, aftrSeq: 1}]) { lastSeq } }', None),
    "input field (variable)": (
        "query($c: [SyncCursor!]!) { sync(cursors: $c) { lastSeq } }",
        {"c": [{"conversationId": "1", "afterSeq": 0, "aftrSeq": 1}]},
    ),
}


async def _errors(http: httpx.AsyncClient, server: ServeProcess, body: dict, user: int | None = USER) -> list[dict]:
    response = await http.post(server.url, content=json.dumps(body), headers=server.headers(user))
    assert response.status_code < 500, response.text[:500]
    errors = response.json()["errors"]
    assert errors, response.text[:500]
    return errors


@pytest.fixture
async def http():
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


@pytest.mark.parametrize("kind", list(SUGGESTION_PROBES))
async def test_production_suggests_nothing_of_any_kind(prod: ServeProcess, http, kind):
    query, variables = SUGGESTION_PROBES[kind]
    for error in await _errors(http, prod, {"query": query, "variables": variables}):
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert "did you mean" not in error["message"].lower(), error


@pytest.mark.parametrize("kind", list(SUGGESTION_PROBES))
async def test_development_still_suggests_so_the_probes_reach_the_suggestions(client: GraphQLClient, kind):
    query, variables = SUGGESTION_PROBES[kind]
    body = await client.execute(query, variables, user=USER)
    assert any("Did you mean" in error["message"] for error in body["errors"]), body


def test_enum_value_suggestions_are_removed_when_hidden():
    # No argument of the contract takes an enum, so no request reaches enum coercion:
    # the error graphql-core makes there goes through the same rewriting.
    color = GraphQLEnumType("Color", {"RED": 1, "GREEN": 2})
    with pytest.raises(GraphQLError) as raised:
        color.parse_value("GREN")
    assert "Did you mean" in raised.value.message
    hidden = client_error(raised.value, hide_suggestions=True)
    assert "Did you mean" not in hidden.message and "GREEN" not in hidden.message
    assert hidden.extensions["code"] == "BAD_USER_INPUT"
    assert "Did you mean" in client_error(raised.value, hide_suggestions=False).message


HUGE = "9" * 5000
MARK_READ_LITERAL = 'mutation { markRead(conversationId: "1", seq: %s) { lastReadSeq } }'
MARK_READ = 'mutation($s: Long!) { markRead(conversationId: "1", seq: $s) { lastReadSeq } }'
SEND = 'mutation($u: UUID!) { sendMessage(conversationId: "1", clientMsgId: $u, body: "x") { duplicate } }'
SEND_LITERAL = 'mutation { sendMessage(conversationId: "1", clientMsgId: "%s", body: "x") { duplicate } }'

COERCION_PROBES = {
    "Long literal of 5,000 digits": {"query": MARK_READ_LITERAL % HUGE},
    "Long literal of 30 digits": {"query": MARK_READ_LITERAL % ("9" * 30)},
    "Long variable of 5,000 digits as a string": {"query": MARK_READ, "variables": {"s": HUGE}},
    "Long variable beyond 64 bits": {"query": MARK_READ, "variables": {"s": 2**70}},
    "Long variable that is a float": {"query": MARK_READ, "variables": {"s": 1.5}},
    "Int literal of 5,000 digits": {"query": "{ inbox(first: %s) { nodes { id } } }" % HUGE},
    "Int literal of 4,000 digits": {"query": "{ inbox(first: %s) { nodes { id } } }" % ("9" * 4000)},
    "UUID variable of 3,000 characters": {"query": SEND, "variables": {"u": "z" * 3000}},
    "UUID literal of 3,000 characters": {"query": SEND_LITERAL % ("z" * 3000)},
    "UUID variable that is a number": {"query": SEND, "variables": {"u": 12}},
    "String variable that is a huge list": {
        "query": 'mutation($b: String!) { sendMessage(conversationId: "1", clientMsgId: '
        '"6f1c6a52-5a3e-4a43-9e0d-3b7d1f7c2a11", body: $b) { duplicate } }',
        "variables": {"b": ["y" * 1000] * 100},
    },
}


def _assert_short_and_quiet(error: dict) -> None:
    message = error["message"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT", error
    assert len(message) <= 301, message[:400]
    for leak in ("sys.", "set_int_max_str_digits", "Exceeds the limit", "badly formed", "Traceback"):
        assert leak not in message, message
    assert "9" * (MAX_ECHO_CHARS + 1) not in message and "z" * (MAX_ECHO_CHARS + 1) not in message, message


@pytest.mark.parametrize("kind", list(COERCION_PROBES))
async def test_a_value_a_scalar_refuses_is_answered_short_and_coded_without_echo(prod: ServeProcess, http, kind):
    for error in await _errors(http, prod, COERCION_PROBES[kind]):
        _assert_short_and_quiet(error)


@pytest.mark.parametrize("name", ["UUID", "DateTime", "Long"])
@pytest.mark.parametrize("value", ["x" * 10_000, "2026-13-45T99:99:99" + "9" * 5000, 3.5, None, ["a"], {"a": 1}])
def test_every_scalar_refuses_with_a_short_graphql_error_of_its_own(name, value):
    (definition,) = [d for d in SCALARS.values() if d.name == name]
    with pytest.raises(GraphQLError) as raised:
        definition.parse_value(value)
    assert len(raised.value.message) < 100 and "x" * 20 not in raised.value.message


HUGE_NAME = "N" * 200_000


def _assert_name_cut(message: str) -> None:
    assert len(message) <= 301, message[:400]
    assert "N" * (MAX_ECHO_CHARS - 10) in message  # the start of the name, to say which one
    assert "N" * (MAX_ECHO_CHARS + 1) not in message


async def test_a_huge_unknown_operation_name_is_echoed_cut_on_a_first_request(prod: ServeProcess, http):
    query = "query Known { viewer { totalUnread } } # first-request probe"
    errors = await _errors(http, prod, {"query": query, "operationName": HUGE_NAME})
    assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT"
    _assert_name_cut(errors[0]["message"])


async def test_a_huge_unknown_operation_name_is_echoed_cut_on_the_accepted_documents_path(prod: ServeProcess, http):
    query = "query Known { viewer { totalUnread } } # fast-path probe"
    first = await http.post(prod.url, json={"query": query}, headers=prod.headers(USER))
    assert first.status_code == 200 and "errors" not in first.json(), first.text  # now an accepted document
    errors = await _errors(http, prod, {"query": query, "operationName": HUGE_NAME})
    assert errors[0]["extensions"]["code"] == "BAD_USER_INPUT"
    _assert_name_cut(errors[0]["message"])


async def test_a_huge_unknown_operation_name_in_a_batch_is_echoed_cut(prod: ServeProcess, http):
    body = [{"query": "query Known { viewer { totalUnread } }", "operationName": HUGE_NAME}]
    response = await http.post(prod.url, json=body, headers=prod.headers(USER))
    assert response.status_code < 500
    text = response.text
    assert len(text) < 1000, text[:400]
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert "N" * (MAX_ECHO_CHARS + 1) not in text


async def test_a_huge_unknown_operation_name_over_a_websocket_is_echoed_cut(prod: ServeProcess):
    async with websockets.connect(prod.ws_url, subprotocols=["graphql-transport-ws"], max_size=None) as ws:
        token = prod.headers(USER)["authorization"]
        await ws.send(json.dumps({"type": "connection_init", "payload": {"Authorization": token}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        query = "subscription Known { messageNew { seq } }"
        await ws.send(
            json.dumps({"id": "1", "type": "subscribe", "payload": {"query": query, "operationName": HUGE_NAME}})
        )
        answer = await ws.recv()
    assert len(answer) < 1000, answer[:400]
    assert json.loads(answer)["payload"][0]["extensions"]["code"] == "BAD_USER_INPUT", answer
    assert "N" * (MAX_ECHO_CHARS + 1) not in answer


def _operation(protocol: str, op_id: str, query: str, variables: str = "{}") -> str:
    kind = "subscribe" if protocol == "graphql-transport-ws" else "start"
    return '{"id": "%s", "type": "%s", "payload": {"query": "%s", "variables": %s}}' % (op_id, kind, query, variables)


@pytest.mark.parametrize("protocol", ["graphql-transport-ws", "graphql-ws"])
async def test_a_websocket_message_with_a_5000_digit_number_is_refused_not_a_crash(prod: ServeProcess, protocol):
    """Python's json refuses an integer of more than 4,300 digits with a ValueError of its own, which
    used to escape the websocket handler. Now it is a message that is not JSON: graphql-transport-ws
    closes with 4400, the legacy graphql-ws ignores it and goes on."""
    async with websockets.connect(prod.ws_url, subprotocols=[protocol], max_size=None) as ws:
        token = prod.headers(USER)["authorization"]
        await ws.send(json.dumps({"type": "connection_init", "payload": {"Authorization": token}}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        query = "query($n: Int) { inbox(first: $n) { nodes { id } } }"
        await ws.send(_operation(protocol, "1", query, '{"n": %s}' % HUGE))
        if protocol == "graphql-transport-ws":
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4400, closed.value
            assert "sys." not in closed.value.rcvd.reason
        else:
            # the connection goes on: the next message is answered (a query over websockets is refused)
            await ws.send(_operation(protocol, "2", "{ viewer { totalUnread } }"))
            answer = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert answer["id"] == "2" and answer["payload"]["extensions"]["code"] == "BAD_USER_INPUT", answer
    assert "Exceeds the limit" not in prod.output()


async def test_metrics_are_not_served_on_the_public_port_in_production_by_default(prod: ServeProcess, http):
    assert (await http.get(f"{prod.base}/metrics")).status_code == 404
    assert (await http.get(f"{prod.base}/metrics", headers={"authorization": "Bearer guess"})).status_code == 404
    assert (await http.get(f"{prod.base}/healthz")).status_code == 200


async def test_metrics_with_a_token_answer_only_that_bearer(migrated_url, http):
    token = "metrics-token-for-tests-0123456789"
    async with serve_process(migrated_url, CHATGQL_METRICS_TOKEN=token) as server:
        url = f"{server.base}/metrics"
        assert (await http.get(url)).status_code == 404
        assert (await http.get(url, headers={"authorization": "Bearer wrong"})).status_code == 404
        assert (await http.get(url, headers={"authorization": token})).status_code == 404  # no scheme
        ok = await http.get(url, headers={"authorization": f"Bearer {token}"})
        assert ok.status_code == 200 and "chatgql_outbox_rows" in ok.text


async def test_metrics_stay_open_in_development(client: GraphQLClient, http):
    response = await http.get(client.url.replace("/graphql", "/metrics"))
    assert response.status_code == 200 and "chatgql_" in response.text
