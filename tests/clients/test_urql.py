"""The urql recipe of docs/guide/clients.md, run as a frontend would run it (tests/clients/urql/recipe.mjs).

In Node, with @urql/core 6 (the client under urql 5): fetchExchange over
HTTP with the bearer token, subscriptionExchange over graphql-ws
(graphql-transport-ws, the token in connection_init's payload), and
Graphcache for the reader. The script creates a group, sends a message, reads
the history, subscribes to messageNew (resuming after the history's lastSeq)
and receives a message sent after the subscription started, then marks it
read; then it reads a long conversation (1,531 messages, past CHATGQL_MAX_CATCH_UP's
default) forward with first/after, page after page, and must see every message
once, in order. tests/clients/urql's packages are pinned by its package-lock.json; scripts/test
installs them (`npm ci`).
"""

from __future__ import annotations

import shutil

from ..conftest import REPO
from ..support.history import seed_history
from ..support.live import ChatApi
from ..support.recipes import CLIENTS_PAGE, recipe, run_node_report

URQL = REPO / "tests" / "clients" / "urql"
LONG = 1531  # more than one 100-message page past the catch-up bound (1,000)


async def test_urql_recipe_creates_sends_reads_history_subscribes_and_marks_read(server, http, migrated_url):
    node = shutil.which("node")
    assert node is not None, "Node.js is needed (20 or later)"
    assert (URQL / "node_modules" / "@urql" / "core").is_dir(), "run `npm ci` in tests/clients/urql (scripts/test does)"
    api = ChatApi.of(server, http)
    long = await api.create_group(1, [2], title="long")
    await seed_history(migrated_url, int(long), "1", LONG)
    report = await run_node_report(
        node, URQL, "recipe.mjs", server.url, server.ws_url, api.token(1), api.token(2), long, str(LONG), timeout=90
    )
    assert report["history"] == ["hello from urql"]
    assert report["live"] == {"seq": 2, "body": "live from urql", "senderId": "1"}, report
    assert report["markRead"] == {"lastReadSeq": 2, "unreadCount": 0, "advanced": True}, report
    assert report["historyAfter"] == ["hello from urql", "live from urql"]
    assert report["longHistory"] == {"pages": 16, "count": LONG, "first": 1, "last": LONG}, report
    for check in (
        "the subscription receives the message sent after it started",
        "exactly once",
        "Graphcache: the event updated the cached conversation, with no refetch",
        "nothing is unread after markRead",
        "a long history paged forward holds every message once, in order",
    ):
        assert check in report["checks"], report
    # What the script did is what the server holds.
    history = await api.data(
        "query($c: ID!) { messages(conversationId: $c, first: 10) { nodes { seq body } } }",
        {"c": report["conversationId"]},
        user=2,
    )
    assert [m["body"] for m in history["messages"]["nodes"]] == ["hello from urql", "live from urql"]


def test_the_clients_page_holds_the_recipe_the_script_runs():
    assert recipe(URQL / "recipe.mjs", "//") in CLIENTS_PAGE.read_text()
