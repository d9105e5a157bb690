"""GraphiQL in a real browser (Debian's chromium, headless, driven by Playwright): the
page loads with nothing from outside this server, a query runs with the Authorization
header from the headers tab, and a subscription started in the page shows a message
sent over HTTP (the websocket authenticates with the same headers, in connection_init)."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import uuid
from urllib.parse import urlsplit

import pytest
from playwright.async_api import Page, Route, async_playwright

from ..conftest import GraphQLClient, RunningServer

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
QUERY_EDITOR = ".graphiql-query-editor .CodeMirror"
VISIBLE_TOOL_EDITOR = ".graphiql-editor-tool .graphiql-editor:not(.hidden) .CodeMirror"
RESULT = ".result-window .CodeMirror"


async def _set(page: Page, selector: str, text: str) -> None:
    """Put text in a GraphiQL editor the way the editor itself would (CodeMirror's setValue)."""
    await page.locator(selector).first.evaluate("(element, text) => element.CodeMirror.setValue(text)", text)


async def _set_query(page: Page, text: str) -> None:
    """The query editor's text, once GraphiQL has taken it in: it re-parses an edit 100 ms
    later (debounced) and until then would run the previous document's operation name and
    kind. The page's onEditQuery, which writes the query into the URL, runs right after."""
    await _set(page, QUERY_EDITOR, text)
    await page.wait_for_function("text => new URL(location.href).searchParams.get('q') === text", arg=text)


async def _result_containing(page: Page, text: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    value = ""
    while time.monotonic() < deadline:
        value = await page.locator(RESULT).first.evaluate("element => element.CodeMirror.getValue()")
        if text in value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in the result pane; it shows: {value!r}")


@pytest.mark.timeout(90)
async def test_graphiql_runs_a_query_and_a_subscription_in_chromium(server: RunningServer, client: GraphQLClient):
    assert shutil.which(CHROMIUM), "the browser test needs Debian's chromium (scripts/test installs it)"
    started = time.monotonic()
    group = await client.data('mutation { createGroup(title: "browser", memberIds: ["2"]) { id } }', user=1)
    conversation_id = group["createGroup"]["id"]
    own_origin = urlsplit(server.url).netloc
    outside: list[str] = []
    page_errors: list[str] = []

    async def only_this_server(route: Route) -> None:
        if urlsplit(route.request.url).netloc == own_origin:
            await route.continue_()
        else:
            outside.append(route.request.url)
            await route.abort()

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            page.on("pageerror", lambda error: page_errors.append(str(error)))
            await page.route("**/*", only_this_server)
            await page.goto(server.url)
            await page.wait_for_selector(QUERY_EDITOR, timeout=20_000)

            # The headers tab: a token for user 1.
            await page.get_by_role("button", name="Headers", exact=True).click()
            await _set(page, VISIBLE_TOOL_EDITOR, json.dumps({"Authorization": f"Bearer {client.token(1)}"}))

            await _set_query(page, "query Me { viewer { userId } }")
            await page.locator(".graphiql-execute-button").click()
            result = json.loads(await _result_containing(page, '"userId"'))
            assert result == {"data": {"viewer": {"userId": "1"}}}

            # A subscription over the websocket, then a message sent over HTTP by user 2.
            await _set_query(
                page,
                f'subscription Live {{ messageNew(conversationId: "{conversation_id}") {{ message {{ body }} }} }}',
            )
            dispatcher = server.runtime.deps.dispatcher
            before = dispatcher.active
            await page.locator(".graphiql-execute-button").click()
            for _ in range(200):
                if dispatcher.active > before:
                    break
                await asyncio.sleep(0.05)
            shown = await page.locator(RESULT).first.evaluate("element => element.CodeMirror.getValue()")
            assert dispatcher.active == before + 1, (
                f"the page's subscription never reached the server; it shows {shown!r}"
            )
            body = f"hello from the test {uuid.uuid4()}"
            await client.data(
                "mutation($c: ID!, $m: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $m, body: $b) "
                "{ duplicate } }",
                {"c": conversation_id, "m": str(uuid.uuid4()), "b": body},
                user=2,
            )
            event = json.loads(await _result_containing(page, body))
            assert event == {"data": {"messageNew": {"message": {"body": body}}}}
        finally:
            await browser.close()
    assert outside == [], f"the page asked for something outside chatgql: {outside}"
    assert page_errors == []
    assert time.monotonic() - started < 60
