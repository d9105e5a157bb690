"""The Python gql recipe of docs/guide/clients.md, run in-process against a real chatgql.

gql 4 with HTTPXAsyncTransport (GraphQL over HTTP, the bearer token in the
Authorization header) and WebsocketsTransport (subscriptions; the token in
connection_init's payload), over graphql-transport-ws and over the legacy
graphql-ws, which gql also speaks. The steps are the urql recipe's
(tests/clients/test_urql.py): create a group, send a message, read the history,
subscribe to messageNew (resuming after the history's lastSeq) and receive a
message sent after the subscription started, mark it read. gql and its
transports are pinned in pyproject.toml's `test` extra.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from chatgql.edge.auth import issue_token

from ..conftest import REPO
from ..support.recipes import CLIENTS_PAGE, recipe

# --- the recipe (docs/guide/clients.md; test_the_clients_page_holds_the_recipe_this_test_runs checks it holds it verbatim)
from gql import Client, GraphQLRequest
from gql.transport.httpx import HTTPXAsyncTransport
from gql.transport.websockets import WebsocketsTransport


def http_client(url: str, token: str) -> Client:
    return Client(transport=HTTPXAsyncTransport(url=url, headers={"Authorization": f"Bearer {token}"}))


def ws_client(ws_url: str, token: str, subprotocol: str = "graphql-transport-ws") -> Client:
    return Client(
        transport=WebsocketsTransport(
            url=ws_url,
            init_payload={"Authorization": f"Bearer {token}"},  # connection_init's payload
            subprotocols=[subprotocol],
        )
    )


# --- end of the recipe


CREATE_GROUP = "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }"
SEND = """mutation($c: ID!, $m: UUID!, $b: String!) {
  sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { id seq body senderId } duplicate }
}"""
HISTORY = """query($c: ID!) {
  conversation(id: $c) { id lastSeq unreadCount messages(last: 50) { nodes { id seq body senderId } } }
}"""
MESSAGE_NEW = """subscription($c: ID!, $cursors: [SyncCursor!]) {
  messageNew(conversationId: $c, cursors: $cursors) { conversationId seq message { id seq body senderId } }
}"""
MARK_READ = (
    "mutation($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { lastReadSeq unreadCount advanced } }"
)


@pytest.mark.parametrize("subprotocol", ["graphql-transport-ws", "graphql-ws"])
async def test_gql_recipe_creates_sends_reads_history_subscribes_and_marks_read(server, subprotocol):
    token1, token2 = issue_token(server.settings, "1"), issue_token(server.settings, "2")
    async with http_client(server.url, token1) as sender, http_client(server.url, token2) as reader:
        # 1. A group, and a message in it (user 1).
        group = await sender.execute(GraphQLRequest(CREATE_GROUP, variable_values={"t": "gql", "m": ["2"]}))
        c = group["createGroup"]["id"]
        first = await sender.execute(
            GraphQLRequest(SEND, variable_values={"c": c, "m": str(uuid.uuid4()), "b": "hello from gql"})
        )
        assert first["sendMessage"]["message"]["seq"] == 1 and not first["sendMessage"]["duplicate"]

        # 2. The history (user 2).
        history = (await reader.execute(GraphQLRequest(HISTORY, variable_values={"c": c})))["conversation"]
        assert [m["body"] for m in history["messages"]["nodes"]] == ["hello from gql"]
        assert history["unreadCount"] == 1

        # 3. messageNew (user 2), resuming after the history's lastSeq: a message sent once the
        #    subscription has started arrives whether or not the server has registered it yet.
        async with ws_client(server.ws_url, token2, subprotocol) as live:
            events = live.subscribe(
                GraphQLRequest(
                    MESSAGE_NEW,
                    variable_values={"c": c, "cursors": [{"conversationId": c, "afterSeq": history["lastSeq"]}]},
                )
            )
            next_event = asyncio.ensure_future(anext(events))  # the subscription starts here
            await asyncio.sleep(0)
            sent = await sender.execute(
                GraphQLRequest(SEND, variable_values={"c": c, "m": str(uuid.uuid4()), "b": "live from gql"})
            )
            event = (await asyncio.wait_for(next_event, 15))["messageNew"]
            await events.aclose()
        assert live.transport.subprotocol == subprotocol
        assert event["message"] == sent["sendMessage"]["message"]
        assert (event["conversationId"], event["seq"], event["message"]["body"], event["message"]["senderId"]) == (
            c,
            2,
            "live from gql",
            "1",
        )

        # 4. markRead (user 2); the history from the server then says nothing is unread.
        read = await reader.execute(GraphQLRequest(MARK_READ, variable_values={"c": c, "s": event["seq"]}))
        assert read["markRead"] == {"lastReadSeq": 2, "unreadCount": 0, "advanced": True}
        after = (await reader.execute(GraphQLRequest(HISTORY, variable_values={"c": c})))["conversation"]
        assert after["unreadCount"] == 0
        assert [m["body"] for m in after["messages"]["nodes"]] == ["hello from gql", "live from gql"]


def test_the_clients_page_holds_the_recipe_this_test_runs():
    assert recipe(REPO / "tests" / "clients" / "test_gql_client.py", "#") in CLIENTS_PAGE.read_text()
