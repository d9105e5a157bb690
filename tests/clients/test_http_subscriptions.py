"""The reference clients of subscriptions over plain HTTP against a real chatgql
(tests/clients/sse/subscriptions.mjs): graphql-sse's npm client in both of its modes, and
Apollo Client 4's HttpLink, which speaks multipart subscriptions. Each resumes messageNew from
the cursor it holds and gets what was sent after it, then the live messages, in order and each
once, and a non-member's subscription is refused with NOT_FOUND; graphql-sse's client, whose stream
ends at its token's expiry, connects again with the token its `headers` gives then and resumes from
its cursor, in both modes (a token of three real seconds: exp has a resolution of seconds). The clients are made by the recipe of
docs/guide/clients.md, which must hold it verbatim. tests/clients/sse's packages
are pinned by its package-lock.json; scripts/test installs them (`npm ci`).

(The guarantees themselves, transport by transport: tests/graphql/test_http_subscriptions.py.)
"""

from __future__ import annotations

import shutil

from ..conftest import REPO
from ..support.live import ChatApi
from ..support.recipes import CLIENTS_PAGE, recipe, run_node_report

CLIENTS = REPO / "tests" / "clients" / "sse"


def test_the_clients_page_holds_the_recipe_the_test_runs():
    assert recipe(CLIENTS / "subscriptions.mjs", "//") in CLIENTS_PAGE.read_text()


async def test_graphql_sse_both_modes_and_apollo_multipart_resume_and_deliver_in_order(server, http):
    node = shutil.which("node")
    assert node is not None, "Node.js is needed (20 or later)"
    assert (CLIENTS / "node_modules" / "graphql-sse").is_dir(), "run `npm ci` in tests/clients/sse (scripts/test does)"
    api = ChatApi.of(server, http)
    cid = await api.create_group(9201, [9202], title="over http")
    last = await api.send(9201, cid, "before")
    assert not server.settings.jwt_audience  # the script's short-lived tokens carry none
    secret = server.settings.jwt_secret.get_secret_value()
    report = await run_node_report(
        node,
        CLIENTS,
        "subscriptions.mjs",
        *(server.url, api.token(9201), api.token(9202), api.token(9203), cid, str(last), "9202", secret),
        timeout=120,
    )
    for client in ("graphql-sse, distinct connections", "graphql-sse, single connection", "Apollo Client, multipart"):
        for check in (
            "the messages sent after the cursor arrive in order, each once",
            "a non-member's subscription is refused with NOT_FOUND",
        ):
            assert f"{client}: {check}" in report["checks"], report
    for client in ("graphql-sse, distinct connections", "graphql-sse, single connection"):
        check = "resumed from its cursor, the message sent while away and the next one delivered, in order"
        assert f"{client}: {check}" in report["checks"], report
