"""The reference web chat (/demo) in a real browser: Debian's chromium, headless, driven
by Playwright, two users in two browser contexts (two people, two browsers).

User 1 starts a conversation with user 2 and sends; user 2 sees the badge and the total
unread, opens the conversation, and user 1 sees "seen". User 2's network drops (HTTP
offline, its websocket closed and refused), user 1 sends more, user 2 comes back and
shows each of them once, in order (messageNew resumed with its cursor). User 1 sends
while offline: the message fails, and the retry stores it once. The answer to a send is
lost after the server stored it: pending until then, "not sent" after, and the retry with
the same clientMsgId gets the original back (duplicate: true), shown once. User 1 edits a
message, reacts 👍 to one and deletes one: user 2 sees "edited", the count and the
tombstone live (messageChanged). User 2 reports a message of user 1 and blocks user 1: it collapses, user 1's
sends to their direct chat are refused, and unblocking shows it again; in slow mode a second message too soon is
refused with the wait. User 1 sees "user 2 is typing…" while user 2 types. A reload pages the history backward.
In a group, "seen by N" counts the members who read the message.

A draft written on one device is restored on another, follows the typing live and goes when it is sent;
the other person sees the writer online, then when they were last seen. A group's owner pins a message and the
member's pinned list follows live; the member's own pin is refused with the server's reason; the unpin empties both.

Screenshots of each step go to tests/out/webchat/ (printed).

Then the chat on a phone and with real text, in Debian's chromium and firefox-esr, each at
1280x800 and 390x844 (tests/webchat_browser/phone_and_real_text.mjs, driven by
puppeteer-core: CDP for chromium, WebDriver BiDi for Firefox, no browser download): no page
scrolls sideways with a 150-character word, a long URL or a 50-character group title; every
input has an accessible name; one pane at a time on a phone; the sign-in's refusal in words;
"user <id>" and ids without commas in the user ids box; a cleared edit says why; the
composer warns over the body limit; a refused send shows its reason and is discarded;
a new message while reading older ones shows "1 new message" and the view stays; a reload
keeps the open conversation. Its chromium screenshots are docs/images/web-chat.png (1280x800)
and docs/images/web-chat-phone.png (390x844)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import uuid
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest
from playwright.async_api import BrowserContext, Page, Route, WebSocketRoute, async_playwright, expect

from chatgql.edge.demo import webchat_documents

from .conftest import REPO, GraphQLClient, RunningServer, make_settings, scratch_database
from .support.live import ChatApi
from .support.recipes import run_node_report

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FIREFOX = shutil.which("firefox-esr") or "/usr/bin/firefox-esr"
BROWSERS = REPO / "tests" / "webchat_browser"
SHOTS = REPO / "tests" / "out" / "webchat"
WAIT_MS = 20_000
EXPECTED_NETWORK_ERROR = re.compile(r"Failed to load resource: net::ERR_(INTERNET_DISCONNECTED|FAILED)")


class Network:
    """One browser context's network, that the test can drop: HTTP goes offline and the
    page's websockets are closed, and refused while it is down."""

    def __init__(self, context: BrowserContext) -> None:
        self.context = context
        self.up = True
        self.sockets: list[WebSocketRoute] = []

    async def start(self) -> None:
        await self.context.route_web_socket(re.compile(r"/graphql$"), self._socket)

    async def _socket(self, socket: WebSocketRoute) -> None:
        if not self.up:
            await socket.close(code=4000, reason="offline")
            return
        socket.connect_to_server()
        self.sockets.append(socket)

    async def drop(self, *, http: bool = True) -> None:
        self.up = False
        if http:
            await self.context.set_offline(True)
        for socket in self.sockets:
            await socket.close(code=4000, reason="offline")
        self.sockets.clear()

    async def restore(self) -> None:
        self.up = True
        await self.context.set_offline(False)


async def _shot(page: Page, name: str, shots: list[Path]) -> None:
    path = SHOTS / f"{name}.png"
    await page.screenshot(path=str(path))
    shots.append(path)


async def _side_by_side(browser, pages: list[Page], name: str, shots: list[Path]) -> None:
    """Both people's windows in one picture (drawn by the browser: no image library)."""
    images = [base64.b64encode(await page.screenshot()).decode() for page in pages]
    composer = await browser.new_page(viewport={"width": 960 * len(pages) + 8 * (len(pages) - 1), "height": 600})
    await composer.set_content(
        '<body style="margin:0;display:flex;gap:8px;background:#94a3b8">'
        + "".join(f'<img src="data:image/png;base64,{image}">' for image in images)
        + "</body>"
    )
    path = SHOTS / f"{name}.png"
    await composer.screenshot(path=str(path))
    await composer.close()
    shots.append(path)


async def _sign_in(page: Page, url: str, user_id: str) -> None:
    await page.goto(url)
    await page.fill("input[name=userId]", user_id)
    await page.click("button[type=submit]")
    await expect(page.get_by_text(f"user {user_id}", exact=True).first).to_be_visible(timeout=WAIT_MS)
    await expect(page.get_by_test_id("connection")).to_have_text("live", timeout=WAIT_MS)


async def _send(page: Page, body: str) -> None:
    await page.fill("input[name=body]", body)
    await page.click(".composer button[type=submit]")


async def _bodies(page: Page) -> list[str]:
    return await page.locator("[data-testid=message] .body").all_inner_texts()


async def _seqs(page: Page) -> list[int]:
    return [
        int(seq) for seq in await page.locator("[data-testid=message]").evaluate_all("ms => ms.map(m => m.dataset.seq)")
    ]


@pytest.mark.timeout(180)
async def test_two_people_chat_see_badges_and_seen_and_resume_after_a_dropped_network(
    server: RunningServer, client: GraphQLClient
):
    assert shutil.which(CHROMIUM), "the browser test needs Debian's chromium (scripts/test installs it)"
    expect.set_options(timeout=WAIT_MS)  # a shared, slow machine: wait for conditions, long enough
    SHOTS.mkdir(parents=True, exist_ok=True)
    shots: list[Path] = []
    demo = urljoin(server.url, "/demo")
    own_origin = urlsplit(server.url).netloc
    outside: list[str] = []
    page_errors: list[str] = []

    def console_error(kind: str, text: str) -> None:
        # What the browser logs for requests made while the test has the network down, and for
        # the answer it aborts (requests to other origins are counted in `outside`).
        if kind == "error" and not EXPECTED_NETWORK_ERROR.fullmatch(text):
            page_errors.append(text)

    async def only_this_server(route: Route) -> None:
        if urlsplit(route.request.url).netloc == own_origin:
            await route.continue_()
        else:
            outside.append(route.request.url)
            await route.abort()

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        pages: list[Page] = []
        networks: list[Network] = []
        try:
            for _ in range(2):
                context = await browser.new_context(viewport={"width": 960, "height": 600})
                await context.route("**/*", only_this_server)
                network = Network(context)
                await network.start()
                page = await context.new_page()
                page.on("pageerror", lambda error: page_errors.append(str(error.stack)))
                page.on("console", lambda message: console_error(message.type, message.text))
                pages.append(page)
                networks.append(network)
            one, two = pages
            network_one, network_two = networks

            # Both sign in (the development sign-in); user 1 starts a direct conversation with 2.
            await _sign_in(one, demo, "1")
            await _sign_in(two, demo, "2")
            await one.fill("input[name=members]", "2")
            await one.click(".new button[type=submit]")
            await expect(one.get_by_test_id("conversation")).to_be_visible(timeout=WAIT_MS)
            await _send(one, "hello from 1")
            await expect(one.get_by_test_id("message")).to_have_count(1, timeout=WAIT_MS)
            await expect(one.get_by_test_id("tick")).to_contain_text("sent")
            await _shot(one, "01-sent", shots)

            # User 2: the conversation in the inbox with its badge, and the total unread.
            item = two.get_by_test_id("inbox-item")
            await expect(item.get_by_test_id("badge")).to_have_text("1", timeout=WAIT_MS)
            await expect(two.get_by_test_id("total-unread")).to_have_text("1")
            await _shot(two, "02-badge", shots)

            # User 2 opens it (and so reads it): the badge goes, user 1 sees "seen".
            await item.click()
            await expect(two.get_by_test_id("message")).to_have_text(re.compile("hello from 1"), timeout=WAIT_MS)
            await expect(one.get_by_test_id("tick")).to_contain_text("seen", timeout=WAIT_MS)
            await expect(two.get_by_test_id("total-unread")).to_have_text("0", timeout=WAIT_MS)
            await expect(item.get_by_test_id("badge")).to_have_count(0)
            await _send(two, "hi 1, this is 2")
            await expect(one.get_by_test_id("message")).to_have_count(2, timeout=WAIT_MS)
            await _shot(one, "03-seen", shots)

            # User 2's network drops; user 1 sends three more.
            await network_two.drop()
            await expect(two.get_by_test_id("connection")).to_have_text("offline", timeout=WAIT_MS)
            away = [f"while you were away {n}" for n in (1, 2, 3)]
            for body in away:
                await _send(one, body)
            await expect(one.get_by_test_id("message")).to_have_count(5, timeout=WAIT_MS)
            assert await _bodies(two) == ["hello from 1", "hi 1, this is 2"]
            await _shot(two, "04-offline", shots)

            # It comes back: each message once, in order, and user 1 sees it read.
            await network_two.restore()
            await expect(two.get_by_test_id("message")).to_have_count(5, timeout=WAIT_MS)
            await expect(two.get_by_test_id("connection")).to_have_text("live", timeout=WAIT_MS)
            expected = ["hello from 1", "hi 1, this is 2", *away]
            assert await _bodies(two) == expected
            assert await _seqs(two) == [1, 2, 3, 4, 5]
            await expect(one.get_by_test_id("tick").last).to_contain_text("seen", timeout=WAIT_MS)
            await _shot(two, "05-resumed", shots)
            await _side_by_side(browser, [one, two], "05-both", shots)

            # User 1 sends while offline: pending, then "not sent"; the retry stores it once.
            await network_one.drop()
            await _send(one, "sent while offline")
            await expect(one.get_by_test_id("pending")).to_contain_text("not sent", timeout=WAIT_MS)
            await _shot(one, "06-not-sent", shots)
            await network_one.restore()
            await one.get_by_test_id("pending").get_by_role("button", name="retry").click()
            await expect(one.get_by_test_id("pending")).to_have_count(0, timeout=WAIT_MS)
            await expect(two.get_by_test_id("message")).to_have_count(6, timeout=WAIT_MS)
            assert await _bodies(two) == [*expected, "sent while offline"]
            await _shot(two, "07-retried", shots)

            # The answer to a send is lost after the server stored it (and user 1 is not live,
            # so no event tells it either): "sending…" until then, "not sent" after; the retry,
            # with the same clientMsgId, gets the original back with duplicate: true.
            stored, release = asyncio.Event(), asyncio.Event()

            async def lose_the_answer(route: Route) -> None:
                if '"operationName":"Send"' not in (route.request.post_data or ""):
                    await route.fallback()
                    return
                await route.fetch()  # the server stores the message and answers...
                stored.set()
                await release.wait()
                await route.abort()  # ...and the answer never reaches the page

            await network_one.drop(http=False)
            await expect(one.get_by_test_id("connection")).to_have_text("offline")
            await one.route("**/graphql", lose_the_answer)
            await _send(one, "its answer was lost")
            await asyncio.wait_for(stored.wait(), WAIT_MS / 1000)
            await expect(two.get_by_test_id("message")).to_have_count(7)
            await expect(one.get_by_test_id("pending")).to_contain_text("sending")
            await _shot(one, "08-pending", shots)
            release.set()
            await expect(one.get_by_test_id("pending")).to_contain_text("not sent")
            await one.unroute("**/graphql", lose_the_answer)
            async with one.expect_response(lambda r: '"operationName":"Send"' in (r.request.post_data or "")) as answer:
                await one.get_by_test_id("pending").get_by_role("button", name="retry").click()
            sent = (await (await answer.value).json())["data"]["sendMessage"]
            assert sent["duplicate"] is True and sent["message"]["seq"] == 7, sent
            await expect(one.get_by_test_id("pending")).to_have_count(0)
            # Live again, the resumed subscription replays seq 7 too: still shown once.
            await network_one.restore()
            await expect(one.get_by_test_id("connection")).to_have_text("live")
            await _send(one, "and one more")
            await expect(two.get_by_test_id("message")).to_have_count(8)
            await expect(one.get_by_test_id("message")).to_have_count(8)
            assert await _seqs(one) == await _seqs(two) == list(range(1, 9))
            assert (await _bodies(one)).count("its answer was lost") == 1

            # Edits, deletions and reactions reach the other person live (messageChanged):
            # user 1 edits seq 8, reacts to user 2's seq 2 and deletes seq 7.
            def at(page: Page, seq: int):
                return page.locator(f"[data-testid=message][data-seq='{seq}']")

            await expect(at(two, 8).get_by_role("button", name="edit", exact=True)).to_have_count(0)  # not theirs
            await at(one, 8).get_by_role("button", name="edit", exact=True).click()
            await at(one, 8).locator("input[name=edit]").fill("and one more, edited")
            await at(one, 8).get_by_role("button", name="Save", exact=True).click()
            await expect(at(two, 8).locator(".body")).to_have_text("and one more, edited")
            await expect(at(two, 8).get_by_test_id("edited")).to_have_text("edited")
            await expect(at(one, 8).get_by_test_id("edited")).to_have_text("edited")
            await at(one, 2).get_by_test_id("react").click()
            await expect(at(two, 2).get_by_test_id("react")).to_have_text("👍 1")
            await expect(at(one, 2).get_by_test_id("react")).to_have_attribute("aria-pressed", "true")
            await expect(at(two, 2).get_by_test_id("react")).to_have_attribute("aria-pressed", "false")
            await at(two, 2).get_by_test_id("react").click()  # user 2 too: 2, then user 1 takes theirs back
            await expect(at(one, 2).get_by_test_id("react")).to_have_text("👍 2")
            await at(one, 2).get_by_test_id("react").click()
            await expect(at(two, 2).get_by_test_id("react")).to_have_text("👍 1")
            await expect(at(one, 2).get_by_test_id("react")).to_have_attribute("aria-pressed", "false")
            await at(one, 7).get_by_role("button", name="delete", exact=True).click()
            await expect(at(two, 7).get_by_test_id("tombstone")).to_have_text("message deleted")
            await expect(at(one, 7).get_by_test_id("tombstone")).to_have_text("message deleted")
            assert "its answer was lost" not in await _bodies(two)
            assert await _seqs(one) == await _seqs(two) == list(range(1, 9))  # the tombstone keeps its seq
            await _side_by_side(browser, [one, two], "08b-edited-reacted-deleted", shots)

            # Typing: user 1 sees "user 2 is typing…" while user 2 types, until it expires.
            await two.fill("input[name=body]", "I am typing")
            await expect(one.get_by_test_id("typing")).to_have_text("user 2 is typing…")
            await expect(two.get_by_test_id("typing")).to_have_count(0)  # never one's own
            await _shot(one, "08c-typing", shots)
            await expect(one.get_by_test_id("typing")).to_have_count(0)  # after CHATGQL_TYPING_SECONDS
            await two.fill("input[name=body]", "")

            # History paged backward: 30 more messages, then a reload shows the newest 20.
            conversation_id = await two.get_by_test_id("conversation").get_attribute("data-conversation-id")
            for n in range(30):
                await client.data(
                    "mutation($c: ID!, $m: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $m, "
                    "body: $b) { duplicate } }",
                    {"c": conversation_id, "m": f"00000000-0000-4000-8000-{n:012d}", "b": f"older {n}"},
                    user=1,
                )
            await expect(two.get_by_test_id("message")).to_have_count(38, timeout=WAIT_MS)
            await two.reload()
            await two.get_by_test_id("inbox-item").click()
            await expect(two.get_by_test_id("message")).to_have_count(20, timeout=WAIT_MS)
            assert await _seqs(two) == list(range(19, 39))
            await two.get_by_role("button", name="Load older messages").click()
            await expect(two.get_by_test_id("message")).to_have_count(38, timeout=WAIT_MS)
            assert await _seqs(two) == list(range(1, 39))
            await expect(two.get_by_role("button", name="Load older messages")).to_have_count(0)
            await _shot(two, "09-history", shots)

            # A group: "seen by N" counts the members whose watermark reached the message.
            await one.fill("input[name=members]", "2, 3")
            await one.fill("input[name=title]", "team")
            await one.click(".new button[type=submit]")
            await expect(one.get_by_test_id("conversation")).to_contain_text("team")
            group_id = await one.get_by_test_id("conversation").get_attribute("data-conversation-id")
            await _send(one, "hello team")
            await expect(one.get_by_test_id("tick")).to_contain_text("sent")
            await client.data(
                "mutation($c: ID!) { markRead(conversationId: $c, seq: 1) { advanced } }", {"c": group_id}, user=3
            )
            await expect(one.get_by_test_id("tick")).to_contain_text("seen by 1")
            await two.get_by_test_id("inbox-item").filter(has_text="team").click()
            await expect(two.get_by_test_id("message")).to_have_text(re.compile("hello team"))
            await expect(one.get_by_test_id("tick")).to_contain_text("seen by 2")
            await _shot(one, "10-group-seen-by", shots)

            # Moderation: user 2 reports user 1's message and blocks user 1; the message collapses, user 1's
            # sends to their direct chat are refused, and unblocking shows it again.
            hello = two.locator("[data-testid=message][data-seq='1']")
            await hello.get_by_test_id("report").click()
            await hello.get_by_label("Why report it").select_option("HARASSMENT")
            await hello.get_by_role("button", name="Report", exact=True).click()
            await expect(hello.get_by_test_id("report")).to_have_text("reported")
            await hello.get_by_test_id("block").click()
            await expect(hello.get_by_test_id("blocked-message")).to_have_text("message from user 1, whom you blocked")
            await _shot(two, "11-blocked", shots)
            refused = await client.error(
                "mutation($c: ID!) { sendMessage(conversationId: $c, clientMsgId: "
                '"00000000-0000-4000-8000-00000000beef", body: "hi") { duplicate } }',
                {"c": conversation_id},
                user=1,
            )
            assert refused["extensions"]["reason"] == "BLOCKED"
            await hello.get_by_test_id("unblock").click()
            await expect(hello).to_contain_text("hello team")

            # Slow mode: the group's owner sets it; user 2 (a member) sees it, and a second message too soon is
            # refused with the wait, on the unsent message.
            await client.data(
                "mutation($c: ID!) { setSlowMode(conversationId: $c, seconds: 600) { slowModeSeconds } }",
                {"c": group_id},
                user=1,
            )
            await two.reload()
            await two.get_by_test_id("inbox-item").filter(has_text="team").click()
            await expect(two.get_by_test_id("slow-mode")).to_have_text("slow mode: 600 s")
            await _send(two, "first in slow mode")
            await expect(two.get_by_test_id("message").filter(has_text="first in slow mode")).to_have_count(1)
            await _send(two, "second too soon")
            await expect(two.get_by_test_id("send-error")).to_contain_text("slow mode")
            await _shot(two, "12-slow-mode", shots)
        except BaseException:
            for n, page in enumerate(pages):
                await page.screenshot(path=str(SHOTS / f"failed-{n + 1}.png"))
            print("\npage errors:", page_errors)
            print(
                "\nthe pages when it failed:", *(SHOTS / f"failed-{n + 1}.png" for n in range(len(pages))), sep="\n  "
            )
            raise
        finally:
            await browser.close()
            # users 1 and 2 are the session's: no block of theirs may outlive the test
            await client.data('mutation { unblockUser(userId: "1") { blocked } }', user=2)
    print("\nweb chat screenshots:", *shots, sep="\n  ")
    assert outside == [], f"the page asked for something outside chatgql: {outside}"
    assert page_errors == []


@pytest.mark.timeout(300)
@pytest.mark.parametrize("size", ["1280x800", "390x844"], ids=["desktop", "phone"])
@pytest.mark.parametrize("browser", ["chromium", "firefox"])
async def test_the_chat_on_a_phone_and_with_real_text(server: RunningServer, browser: str, size: str):
    executable = {"chromium": CHROMIUM, "firefox": FIREFOX}[browser]
    assert shutil.which(executable), f"the browser test needs Debian's {browser} (scripts/test installs it)"
    node = shutil.which("node")
    assert node is not None, "Node.js is needed (20 or later)"
    assert (BROWSERS / "node_modules" / "puppeteer-core").is_dir(), "run `npm ci` in tests/webchat_browser"
    report = await run_node_report(
        node,
        BROWSERS,
        "phone_and_real_text.mjs",
        browser,
        executable,
        urljoin(server.url, "/demo"),
        size,
        str(SHOTS),
        timeout=240,
    )
    print(f"\n{browser} {size}:", *report["steps"], f"screenshot: {report['screenshot']}", sep="\n  ")
    steps = [re.sub(r"conversation \d+ not found", "conversation <id> not found", step) for step in report["steps"]]
    assert steps == [
        "sign-in refusal: This user id cannot sign in: it is longer than 255 characters.",
        '"user ben" started a direct conversation with ben',
        "a 154-character word and a long URL wrap in their bubbles; no sideways scroll",
        "a cleared edit: A message cannot be empty: delete it instead? delete message",
        "the composer warns at 4,001 characters and Send is disabled",
        "a 50-character group title fits (ellipsised where it must be)",
        "a refused send shows its reason (not sent: conversation <id> not found), no retry, discarded",
        'a new message while reading older ones: "1 new message ↓", the view stays',
        "a reload keeps the open conversation",
    ], report


@pytest.mark.timeout(180)
async def test_the_web_chat_on_an_allowlist_server_sends_its_documents_by_id_only(migrated_url: str):
    """The web chat on a server that runs only listed documents (CHATGQL_DOCUMENTS_ALLOWLIST=true),
    which knows the web chat's own because it serves it (nothing loaded): two people start a
    conversation, send, see it live and read it, and every document the pages send, over HTTP and
    the websocket, goes by its sha256 with no text (urql's persistedExchange), each one of the web
    chat's manifest. (Loading the manifest, for a server that does not serve the chat, is
    tests/graphql/test_persisted.py's.)"""
    assert shutil.which(CHROMIUM), "the browser test needs Debian's chromium (scripts/test installs it)"
    expect.set_options(timeout=WAIT_MS)
    manifest = json.loads(webchat_documents().read_text(encoding="utf-8"))
    listed = {operation["id"] for operation in manifest["operations"]}
    # a database of its own, with no document loaded (the session's server would relay this test's
    # live events to itself)
    url = await scratch_database(migrated_url, "webchat_allowlist")
    sent: list[dict] = []  # each GraphQL request the pages made: an HTTP body or a websocket subscribe payload

    def http_request(request) -> None:
        if request.method == "POST" and urlsplit(request.url).path == "/graphql":
            sent.append(json.loads(request.post_data or "null"))

    def websocket(socket) -> None:
        def frame(payload) -> None:
            message = json.loads(payload)
            if message.get("type") == "subscribe":
                sent.append(message["payload"])

        socket.on("framesent", frame)

    async with RunningServer(make_settings(url, documents_allowlist=True)) as server:
        demo = urljoin(server.url, "/demo")
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                one, two = [
                    await (await browser.new_context(viewport={"width": 960, "height": 600})).new_page() for _ in "12"
                ]
                for page in (one, two):
                    page.on("request", http_request)
                    page.on("websocket", websocket)
                await _sign_in(one, demo, "701")
                await _sign_in(two, demo, "702")
                await one.fill("input[name=members]", "702")
                await one.click(".new button[type=submit]")
                await expect(one.get_by_test_id("conversation")).to_be_visible()
                await _send(one, "sent by id")
                await expect(one.get_by_test_id("tick")).to_contain_text("sent")
                item = two.get_by_test_id("inbox-item")
                await expect(item.get_by_test_id("badge")).to_have_text("1")
                await item.click()
                await expect(two.get_by_test_id("message")).to_have_text(re.compile("sent by id"))
                await expect(one.get_by_test_id("tick")).to_contain_text("seen")
                await _send(two, "and back")
                await expect(one.get_by_test_id("message")).to_have_count(2)
            finally:
                await browser.close()
    kinds = {"http": 0, "websocket": 0}
    for request in sent:
        for one_request in request if isinstance(request, list) else [request]:
            persisted = (one_request.get("extensions") or {}).get("persistedQuery") or {}
            assert persisted.get("sha256Hash") in listed, one_request
            assert not one_request.get("query"), one_request  # no text: the id alone
            kinds["websocket" if "query" in one_request else "http"] += 1
    assert kinds["http"] >= 5 and kinds["websocket"] >= 2, kinds


async def test_threads_in_the_web_chat_their_unread_my_threads_and_a_live_reply(server: RunningServer, http):
    """A thread in the web chat (docs/guide/threads.md): "Threads" lists the one the viewer follows with its
    unread; opening it shows the root and its replies and reads it (the badge goes); a reply from its box goes
    to the thread only; another member's reply shows live; a message's "thread" link opens its thread."""
    assert shutil.which(CHROMIUM), "the browser test needs Debian's chromium (scripts/test installs it)"
    expect.set_options(timeout=WAIT_MS)
    SHOTS.mkdir(parents=True, exist_ok=True)
    api = ChatApi.of(server, http)
    author, replier = "71001", "71002"
    cid = await api.create_group(author, [replier], title="thread test")
    await api.send(author, cid, "root of the thread")
    root = (
        await api.data(
            "query($c: ID!) { messages(conversationId: $c, first: 1) { nodes { id } } }", {"c": cid}, user=author
        )
    )["messages"]["nodes"][0]["id"]
    reply = """
    mutation($c: ID!, $m: UUID!, $b: String!, $r: ID!) {
      sendMessage(conversationId: $c, clientMsgId: $m, body: $b, replyTo: $r, threadOnly: true) { message { seq } } }
    """
    await api.data(reply, {"c": cid, "m": str(uuid.uuid4()), "b": "first reply", "r": root}, user=replier)
    page_errors: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 960, "height": 600})
            page.on("pageerror", lambda error: page_errors.append(str(error.stack)))
            await _sign_in(page, urljoin(server.url, "/demo"), author)
            threads = page.get_by_test_id("my-threads")
            await expect(threads.get_by_test_id("thread-unread")).to_have_text("1")
            await expect(threads.get_by_test_id("thread-row")).to_contain_text("root of the thread")
            await threads.get_by_test_id("thread-row").click()
            pane = page.get_by_test_id("thread")
            await expect(pane.get_by_test_id("thread-message")).to_have_count(2)
            await expect(pane.get_by_test_id("thread-message").nth(1)).to_contain_text("first reply")
            await expect(threads.get_by_test_id("thread-unread")).to_have_count(0)  # opening it read it
            await page.fill("input[name=threadReply]", "my answer")
            await page.click(".thread .composer button[type=submit]")
            await expect(pane.get_by_test_id("thread-message")).to_have_count(3)
            await api.data(reply, {"c": cid, "m": str(uuid.uuid4()), "b": "live reply", "r": root}, user=replier)
            await expect(pane.get_by_test_id("thread-message")).to_have_count(4)  # threadUpdated, live
            await expect(pane.get_by_test_id("thread-message").nth(3)).to_contain_text("live reply")
            # the open thread reads the live reply too: the list shows it, with no unread left
            await expect(threads.get_by_test_id("thread-row")).to_contain_text("3 replies")
            await expect(threads.get_by_test_id("thread-unread")).to_have_count(0)
            await page.screenshot(path=str(SHOTS / "threads.png"))
            await page.get_by_test_id("thread-back").click()
            await expect(page.get_by_test_id("conversation")).to_be_visible()
            await page.locator("[data-testid=message][data-seq='1'] [data-testid=open-thread]").click()
            await expect(page.get_by_test_id("thread")).to_have_attribute("data-root-id", root)
        finally:
            await browser.close()
    assert page_errors == []
    seen = await api.data(
        "query($r: ID!) { thread(rootId: $r) { lastReplySeq unreadCount } }", {"r": root}, user=author
    )
    assert seen["thread"] == {"lastReplySeq": 3, "unreadCount": 0}
    # the thread-only replies stay out of the conversation's unread
    counts = await api.data("query($c: ID!) { conversation(id: $c) { lastSeq unreadCount } }", {"c": cid}, user=author)
    assert counts["conversation"]["unreadCount"] == 0


@pytest.mark.timeout(180)
async def test_a_draft_follows_its_writer_to_another_device_and_presence_shows_online_then_last_seen(
    server: RunningServer,
):
    """Ana writes on her laptop; her phone shows the draft when she opens the conversation there, follows
    her typing live, and drops it when she sends. Ben sees Ana online (the green dot) while a device of
    hers is connected, and when she was last seen once none is."""
    assert shutil.which(CHROMIUM), "the browser test needs Debian's chromium (scripts/test installs it)"
    expect.set_options(timeout=WAIT_MS)
    SHOTS.mkdir(parents=True, exist_ok=True)
    shots: list[Path] = []
    demo = urljoin(server.url, "/demo")
    tag = uuid.uuid4().hex[:6]
    ana, ben = f"ana{tag}", f"ben{tag}"
    page_errors: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            contexts = [await browser.new_context(viewport={"width": 960, "height": 600}) for _ in range(3)]
            laptop, phone, bens = [await context.new_page() for context in contexts]
            for page in (laptop, phone, bens):
                page.on("pageerror", lambda error: page_errors.append(str(error.stack)))
            for page, user in ((laptop, ana), (bens, ben)):
                await _sign_in(page, demo, user)
            await laptop.fill("input[name=members]", ben)
            await laptop.click(".new button[type=submit]")
            await expect(laptop.get_by_test_id("conversation")).to_be_visible()
            await laptop.fill("input[name=body]", "half a thought")  # saved a moment after the typing stops
            await _sign_in(phone, demo, ana)  # her phone, once the conversation exists (its inbox lists it)
            await phone.get_by_test_id("inbox-item").click()  # the draft restored on the other device
            await expect(phone.locator("input[name=body]")).to_have_value("half a thought")
            await laptop.fill("input[name=body]", "half a thought, and the rest")  # followed live
            await expect(phone.locator("input[name=body]")).to_have_value("half a thought, and the rest")
            await _shot(phone, "draft-on-the-phone", shots)
            await laptop.click(".composer button[type=submit]")  # sent: the draft goes everywhere
            await expect(phone.get_by_test_id("message")).to_have_count(1)
            await expect(phone.locator("input[name=body]")).to_have_value("")
            await expect(laptop.locator("input[name=body]")).to_have_value("")

            await bens.get_by_test_id("inbox-item").click()  # Ben sees Ana online
            await expect(bens.get_by_test_id("presence")).to_have_text("● online")
            await _shot(bens, "presence-online", shots)
            await contexts[0].close()
            await contexts[1].close()  # no device of Ana's connected: last seen
            await expect(bens.get_by_test_id("presence")).to_contain_text("last seen")
            await _shot(bens, "presence-last-seen", shots)
        finally:
            await browser.close()
    print("\nweb chat screenshots:", *shots, sep="\n  ")
    assert page_errors == []


@pytest.mark.timeout(180)
async def test_quote_forward_and_save_a_message_in_the_web_chat(server: RunningServer, client: GraphQLClient):
    """User 1 quotes user 2's message (the quote shows in the message sent), forwards it into another
    group (a new message there, marked forwarded), saves it and finds it in their saved list, which
    unsaving empties."""
    assert shutil.which(CHROMIUM), "the browser test needs Debian's chromium (scripts/test installs it)"
    expect.set_options(timeout=WAIT_MS)
    SHOTS.mkdir(parents=True, exist_ok=True)
    shots: list[Path] = []
    create = "mutation($t: String!, $m: [ID!]!) { createGroup(title: $t, memberIds: $m) { id } }"
    source = (await client.data(create, {"t": "source", "m": ["2"]}, user=1))["createGroup"]["id"]
    await client.data(create, {"t": "elsewhere", "m": ["3"]}, user=1)
    send = 'mutation($c: ID!, $m: UUID!) { sendMessage(conversationId: $c, clientMsgId: $m, body: "the original") { duplicate } }'
    await client.data(send, {"c": source, "m": "9a1c6a52-5a3e-4a43-9e0d-3b7d1f7c2a11"}, user=2)
    page_errors: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = await (await browser.new_context(viewport={"width": 960, "height": 600})).new_page()
            page.on("pageerror", lambda error: page_errors.append(str(error.stack)))
            await _sign_in(page, urljoin(server.url, "/demo"), "1")
            await page.get_by_test_id("inbox-item").filter(has_text="source").click()
            original = page.locator("[data-testid=message][data-seq='1']")
            await expect(original).to_have_count(1)

            # Quote it: the composer says so, and the message sent shows the quote.
            await original.get_by_test_id("quote-action").click()
            await expect(page.get_by_test_id("quoting")).to_contain_text("the original")
            await _send(page, "about that")
            sent = page.get_by_test_id("message").filter(has_text="about that")
            await expect(sent.get_by_test_id("quote")).to_have_attribute("data-state", "VISIBLE")
            await expect(sent.get_by_test_id("quote")).to_contain_text("the original")
            await expect(page.get_by_test_id("quoting")).to_have_count(0)
            await _shot(page, "20-quote", shots)

            # Save it, then forward it into the other group.
            await original.get_by_test_id("save").click()
            await expect(original.get_by_test_id("save")).to_have_text("saved")
            await original.get_by_test_id("forward").click()
            form = page.get_by_test_id("forward-form")
            await form.get_by_label("Forward to").select_option(label="elsewhere")
            await form.get_by_role("button", name="Forward").click()
            await expect(form).to_have_count(0)
            await page.get_by_test_id("inbox-item").filter(has_text="elsewhere").click()
            copy = page.get_by_test_id("message").filter(has_text="the original")
            await expect(copy.get_by_test_id("forwarded")).to_be_visible()
            await _shot(page, "21-forwarded", shots)

            # The saved list: the saved message, gone once unsaved.
            await page.get_by_test_id("show-saved").click()
            saved = page.get_by_test_id("saved-message")
            await expect(saved).to_have_count(1)
            await expect(saved).to_contain_text("the original")
            await _shot(page, "22-saved", shots)
            await saved.get_by_test_id("unsave").click()
            await expect(saved).to_have_count(0)
        finally:
            await browser.close()
    assert not page_errors, page_errors
    print("screenshots:", *shots, sep="\n  ")


@pytest.mark.timeout(180)
async def test_pinned_messages_in_the_web_chat_live_and_a_plain_members_pin_refused(server: RunningServer, http):
    """In a group (docs/guide/web-chat.md): its owner pins a message; the plain member sees it in the pinned list
    above the history live (messageChanged PINNED) and a click there shows the message highlighted; an edit of it
    shows in both lists; the member's own pin is refused with the server's reason (FORBIDDEN, PIN_NOT_ALLOWED) and pins nothing; the owner unpins
    it and it leaves both lists (UNPINNED)."""
    assert shutil.which(CHROMIUM), "the browser test needs Debian's chromium (scripts/test installs it)"
    expect.set_options(timeout=WAIT_MS)
    SHOTS.mkdir(parents=True, exist_ok=True)
    shots: list[Path] = []
    api = ChatApi.of(server, http)
    tag = uuid.uuid4().hex[:8]
    owner, member = f"owner{tag}", f"member{tag}"
    cid = await api.create_group(owner, [member], title=f"pins {tag}")
    await api.send(member, cid, "pin me")
    await api.send(owner, cid, "not for pinning")
    demo = urljoin(server.url, "/demo")
    page_errors: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            contexts = [await browser.new_context(viewport={"width": 960, "height": 600}) for _ in range(2)]
            owners, members = [await context.new_page() for context in contexts]
            for page, user in ((owners, owner), (members, member)):
                page.on("pageerror", lambda error: page_errors.append(str(error.stack)))
                await _sign_in(page, demo, user)
                await page.get_by_test_id("inbox-item").filter(has_text=f"pins {tag}").click()
                await expect(page.get_by_test_id("message")).to_have_count(2)
                await expect(page.get_by_test_id("pinned")).to_have_count(0)

            # The owner pins the member's message: both pinned lists show it, the member's live.
            first = "[data-testid=message][data-seq='1']"
            await owners.locator(first).get_by_test_id("pin").click()
            for page in (owners, members):
                await expect(page.get_by_test_id("pinned")).to_have_count(1)
                await expect(page.get_by_test_id("pinned")).to_contain_text("pin me")
                await expect(page.locator(first).get_by_test_id("pinned-mark")).to_be_visible()
            await expect(owners.locator(first).get_by_test_id("pin")).to_have_text("unpin")
            await members.get_by_test_id("pinned").get_by_role("button").click()  # shows the message
            await expect(members.locator(first)).to_have_class(re.compile(r"\bhighlighted\b"))
            # Its sender edits it: the pinned lists show the new text (messageChanged EDITED).
            await members.locator(first).get_by_role("button", name="edit", exact=True).click()
            await members.fill("input[name=edit]", "pin me, edited")
            await members.locator(first).get_by_role("button", name="Save", exact=True).click()
            for page in (owners, members):
                await expect(page.get_by_test_id("pinned")).to_contain_text("pin me, edited")

            # A plain member may not pin in a group: the refusal is shown, and nothing is pinned.
            second = members.locator("[data-testid=message][data-seq='2']")
            await second.get_by_test_id("pin").click()
            await expect(second.locator(".error")).to_have_text("only a group's OWNER or an ADMIN may pin or unpin")
            await expect(second.get_by_test_id("pinned-mark")).to_have_count(0)
            await expect(members.get_by_test_id("pinned")).to_have_count(1)
            await _side_by_side(browser, [owners, members], "30-pinned", shots)

            # The owner unpins it: it leaves both lists.
            await owners.locator(first).get_by_test_id("pin").click()
            for page in (owners, members):
                await expect(page.get_by_test_id("pinned")).to_have_count(0)
                await expect(page.locator(first).get_by_test_id("pinned-mark")).to_have_count(0)
            await expect(owners.locator(first).get_by_test_id("pin")).to_have_text("pin")
        finally:
            await browser.close()
    assert page_errors == []
    pinned = await api.data("query($c: ID!) { pinnedMessages(conversationId: $c) { seq } }", {"c": cid}, user=owner)
    assert pinned["pinnedMessages"] == []
    print("\nweb chat screenshots:", *shots, sep="\n  ")
