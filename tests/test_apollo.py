"""Apollo Client, as a frontend would use it, against a real chatgql (tests/apollo/cache.mjs).

In Node, with @apollo/client 4, InMemoryCache without typePolicies and
GraphQLWsLink (graphql-transport-ws): the history query is normalised (every
Message, Member, Viewer and the Conversation stored once under its id), a
message arriving through the resumable messageNew joins the cached history
(subscribeToMore) and, through the event's conversation, updates the cached
inbox entry with no code at all; a readUpdated event updates the cached
member and the inbox's unreadCount by itself; node(id:) round-trips each type. tests/apollo's packages are pinned by its
package-lock.json; scripts/test installs them (`npm ci`).
"""

from __future__ import annotations

import shutil

from .conftest import REPO
from .events.helpers import ChatApi
from .recipes import run_node_report

APOLLO = REPO / "tests" / "apollo"


async def test_apollo_client_normalises_the_history_and_live_events_update_it(server, http):
    node = shutil.which("node")
    assert node is not None, "Node.js is needed (20 or later)"
    assert (APOLLO / "node_modules" / "@apollo" / "client").is_dir(), "run `npm ci` in tests/apollo (scripts/test does)"
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2], title="apollo")
    for i in range(3):
        await api.send(1, cid, f"history {i}")
    report = await run_node_report(
        node, APOLLO, "cache.mjs", server.url, server.ws_url, api.token(1), api.token(2), cid, timeout=90
    )
    for check in (
        "the history holds references, not copies",
        "the history gained exactly the new message",
        "a readUpdated event updates the cached member's lastReadSeq and the inbox's unreadCount",
        "the inbox entry's lastSeq and unreadCount follow the event, with no code",
        "node(id:) round-trips a Conversation",
        "node(id:) round-trips a Message",
        "node(id:) round-trips a Member",
        "node(id:) round-trips a Viewer",
    ):
        assert check in report["checks"], report
