"""Apollo Client, as a frontend would use it, against a real chatgql (tests/clients/apollo/cache.mjs).

In Node, with @apollo/client 4, InMemoryCache without typePolicies and
GraphQLWsLink (graphql-transport-ws): the history query is normalised (every
Message, Member, Viewer and the Conversation stored once under its id), a
message arriving through the resumable messageNew joins the cached history
(subscribeToMore) and, through the event's conversation, updates the cached
inbox entry with no code at all; a readUpdated event updates the cached
member and the inbox's unreadCount by itself; node(id:) round-trips each type;
and a second client, with relayStylePagination on Query.messages, pages a
1,531-message conversation forward with fetchMore (after = endCursor) and holds
every message once, in order, pages far behind the catch-up bound included. tests/clients/apollo's packages are pinned by its
package-lock.json; scripts/test installs them (`npm ci`).
"""

from __future__ import annotations

import shutil

from ..conftest import REPO
from ..support.history import seed_history
from ..support.live import ChatApi
from ..support.recipes import run_node_report

APOLLO = REPO / "tests" / "clients" / "apollo"
LONG = 1531  # more than one 100-message page past the catch-up bound (1,000)


async def test_apollo_client_normalises_the_history_and_live_events_update_it(server, http, migrated_url):
    node = shutil.which("node")
    assert node is not None, "Node.js is needed (20 or later)"
    assert (APOLLO / "node_modules" / "@apollo" / "client").is_dir(), (
        "run `npm ci` in tests/clients/apollo (scripts/test does)"
    )
    api = ChatApi.of(server, http)
    cid = await api.create_group(1, [2], title="apollo")
    for i in range(3):
        await api.send(1, cid, f"history {i}")
    long = await api.create_group(1, [2], title="long")
    await seed_history(migrated_url, int(long), "1", LONG)
    report = await run_node_report(
        node,
        APOLLO,
        "cache.mjs",
        *(server.url, server.ws_url, api.token(1), api.token(2), cid, long, str(LONG)),
        timeout=120,
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
        "relayStylePagination pages the long history forward: every message once, in order",
        "pages far behind are flagged gapTooLong, and are still the page after the cursor",
    ):
        assert check in report["checks"], report
