"""GraphiQL opens on chatgql's own example operations (graphql/examples.py): one tab each,
a one-line comment on top, every one valid against the schema and every query and
mutation answered without an error by a real server. In development the page has the
Sign-in panel (POST /dev/token); production keeps GraphiQL off (tests/graphql/test_graphiql.py,
tests/test_demo.py), and with CHATGQL_GRAPHIQL on there it has the examples and no sign-in.
In chromium: the tabs are there, the panel signs in, the Inbox tab runs as that user.
The screenshot is tests/out/graphiql/examples.png (docs/images/graphiql.png is a copy)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time

import graphql
import httpx
import pytest
from playwright.async_api import async_playwright, expect

from chatgql.graphql.examples import EXAMPLES
from chatgql.server.app import create_app

from ..conftest import REPO, GraphQLClient, RunningServer, make_settings

SHOTS = REPO / "tests" / "out" / "graphiql"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
QUERY_EDITOR = ".graphiql-query-editor .CodeMirror"
RESULT = ".result-window .CodeMirror"
OPERATIONS = [
    "Inbox",
    "StartGroup",
    "History",
    "Send",
    "MarkRead",
    "Live",
    "Resume",
    "Sync",
    "SyncThreads",
    "Quotes",
    "Saved",
    "MyThreads",
    "Blocked",
    "Scheduled",
    "Disappearing",
    "SaveDraft",
    "Presence",
    "Pinned",
]


def _config(page: str) -> dict:
    return json.loads(re.search(r'id="chatgql-config" type="application/json">([^<]*)<', page).group(1))


async def _result_containing(page, text: str, timeout: float = 15.0) -> str:
    """The result pane's text once it contains text (GraphiQL's editor is CodeMirror)."""
    deadline = time.monotonic() + timeout
    value = ""
    while time.monotonic() < deadline:
        value = await page.locator(RESULT).first.evaluate("element => element.CodeMirror.getValue()")
        if text in value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in the result pane; it shows: {value!r}")


async def _page(http: httpx.AsyncClient, url: str) -> str:
    response = await http.get(url, headers={"accept": "text/html"})
    assert response.status_code == 200
    return response.text


def test_every_example_has_a_one_line_comment_and_is_valid_against_the_schema():
    schema = graphql.build_schema((REPO / "schema.graphql").read_text())
    names = []
    for example in EXAMPLES:
        first, *rest = example.query.strip().splitlines()
        assert first.startswith("# ") and len(first) > 20, first
        assert not any(line.lstrip().startswith("#") for line in rest), example.query
        document = graphql.parse(example.query)
        assert graphql.validate(schema, document) == [], example.query
        names.append(document.definitions[0].name.value)
    assert names == OPERATIONS


async def test_the_development_page_opens_on_the_examples_with_the_sign_in(
    client: GraphQLClient, http: httpx.AsyncClient
):
    config = _config(await _page(http, client.url))
    assert config["devTokenPath"] == "/dev/token"
    tabs = config["defaultTabs"]
    assert [tab["query"] for tab in tabs] == [example.query for example in EXAMPLES]
    for tab in tabs:
        assert "sign in" in json.loads(tab["headers"])["Authorization"].lower()
    send = json.loads(tabs[OPERATIONS.index("Send")]["variables"])
    assert re.fullmatch(r"[0-9a-f-]{36}", send["clientMsgId"])  # a fresh one per page
    again = json.loads(_config(await _page(http, client.url))["defaultTabs"][OPERATIONS.index("Send")]["variables"])
    assert again["clientMsgId"] != send["clientMsgId"]


async def test_production_with_graphiql_on_has_the_examples_but_no_sign_in():
    settings = make_settings(
        "postgresql://unused@127.0.0.1:1/unused",
        env="production",
        jwt_secret="a-production-secret-for-tests-only-0123456789",
        graphiql=True,
    )
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://chatgql") as http:
        config = _config(await _page(http, "/graphql"))
    assert config["devTokenPath"] is None
    assert len(config["defaultTabs"]) == len(EXAMPLES)
    assert "chatgql token" in json.loads(config["defaultTabs"][0]["headers"])["Authorization"]


async def test_the_queries_and_mutations_run_as_written(client: GraphQLClient):
    """The examples with their own variables, "1" being a conversation the viewer is in."""
    for example in EXAMPLES:
        document = graphql.parse(example.query)
        if document.definitions[0].operation == graphql.OperationType.SUBSCRIPTION:
            continue
        variables = dict(example.variables)
        if variables.get("clientMsgId") == "{clientMsgId}":
            variables["clientMsgId"] = "6f1c6a52-5a3e-4a43-9e0d-3b7d1f7c2a11"
        data = await client.data(example.query, variables, user=1)
        assert data, example.query
        if "createGroup" in data:
            assert data["createGroup"]["id"] == "1"  # the conversation the later examples use


@pytest.mark.browser
@pytest.mark.timeout(90)
async def test_graphiql_opens_on_the_examples_and_signs_in_in_chromium(server: RunningServer, client: GraphQLClient):
    assert shutil.which(CHROMIUM), "the browser test needs Debian's chromium (scripts/test installs it)"
    await client.data('mutation { createGroup(title: "team", memberIds: ["2", "3"]) { id } }', user=1)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page_errors: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 720})
            page.on("pageerror", lambda error: page_errors.append(str(error)))
            await page.goto(server.url)
            await page.wait_for_selector(QUERY_EDITOR, timeout=20_000)
            tabs = page.locator(".graphiql-tab")
            await expect(tabs).to_have_count(len(EXAMPLES))
            for name in OPERATIONS:
                # the tab's own button: the tab's text also holds its close icon's title
                await expect(tabs.locator(".graphiql-tab-button", has_text=re.compile(rf"^{name}$"))).to_have_count(1)

            # The Sign-in panel is open at first; it mints a token for user 7.
            panel = page.locator(".chatgql-sign-in")
            await expect(panel).to_be_visible()
            await panel.locator("input[name=userId]").fill("7")
            await panel.get_by_role("button", name="Sign in").click()
            await expect(panel.locator(".chatgql-signed-in")).to_have_text("Signed in as user 7.")

            # The first tab (the inbox) runs as user 7, the placeholder header left as it is.
            await tabs.first.click()
            await page.locator(".graphiql-execute-button").click()
            result = json.loads(await _result_containing(page, '"totalUnread"'))
            assert result["data"]["viewer"] == {"userId": "7", "totalUnread": 0, "unreadConversations": 0}
            path = SHOTS / "examples.png"
            await page.screenshot(path=str(path))
            print(f"\nGraphiQL screenshot: {path}")
        finally:
            await browser.close()
    assert page_errors == []
