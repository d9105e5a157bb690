// The web chat (/demo) with real text, at one window size, in one browser: Debian's
// chromium (over CDP) or firefox-esr (over WebDriver BiDi), both driven by puppeteer-core
// with no browser download. Two people in two browser contexts. Run by
// tests/test_webchat_browser.py:
//
//   node phone_and_real_text.mjs <chromium|firefox> <executable> <demo url> <width>x<height> <screenshot dir>
//
// It checks, and fails with a message naming the step when one does not hold:
// - no page ever scrolls sideways (document.documentElement.scrollWidth <= clientWidth),
//   and no message, title or inbox row runs out of its box: a 150-character word, a long
//   URL, a 50-character group title;
// - every input has an accessible name (a label or aria-label): the sign-in, the user ids
//   box, the group title box, the message box, the edit box;
// - the sign-in's refusal is a sentence that does not name the API's field (userId);
// - "user <id>" in the user ids box is that one user; "<a> <b>" says to use commas;
// - a phone (narrower than 700 px) shows one pane at a time, with a back button;
// - clearing an edit's text says a message cannot be empty and offers delete;
// - the composer warns before a message over the body limit, and disables Send;
// - a send the server refuses shows the server's reason, offers no retry, and is discarded;
// - reading older messages is not interrupted by a new one: "1 new message" instead;
// - a reload opens the same conversation again (#conversation=<id>).
// Its last line on stdout is a JSON report: {"ok", "steps", "screenshot"} or {"ok": false, "error"}.
// The screenshot of the finished conversation goes to the screenshot dir as
// <browser>-<width>x<height>.png.
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import puppeteer from "puppeteer-core";

const [kind, executablePath, demoUrl, size, shotDir] = process.argv.slice(2);
const [width, height] = size.split("x").map(Number);
const phone = width < 700;
const WAIT_MS = 30_000; // a shared, slow machine: wait for conditions, long enough
const origin = new URL(demoUrl).origin;
const users = { ana: "ana", ben: "ben", cat: "cat" }; // the tests start from empty tables
const LONG_WORD = "Pneumonoultramicroscopicsilicovolcanoconiosis".repeat(3) + "-and-then-some-more"; // 154 chars
const LONG_URL = `https://docs.example.com/chatgql/guides/${"very-long-path-segment/".repeat(6)}index.html?utm_source=chat&ref=${"x".repeat(40)}`;
const TITLE = "Quarterly planning for the whole product team, Q3!"; // 50 characters
assert.equal([...LONG_WORD].length >= 150, true);
assert.equal([...TITLE].length, 50);

mkdirSync(shotDir, { recursive: true });
const steps = [];
function step(text) {
  steps.push(text);
  console.error(`${kind} ${size}: ${text}`);
}

// The API, as a user (the development sign-in mints the token): for what the test sets up
// behind the pages' backs (history, another member leaving).
const tokens = {};
async function api(user, query, variables = {}) {
  if (!tokens[user]) {
    const answer = await fetch(`${origin}/dev/token`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ userId: user }),
    });
    tokens[user] = (await answer.json()).token;
  }
  const answer = await fetch(`${origin}/graphql`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${tokens[user]}` },
    body: JSON.stringify({ query, variables }),
  });
  const result = await answer.json();
  assert.equal(result.errors, undefined, JSON.stringify(result.errors));
  return result.data;
}

let counter = 0;
const clientMsgId = () => `00000000-0000-4000-8000-${String(Date.now() % 1e6).padStart(6, "0")}${String(++counter).padStart(6, "0")}`;
const sendAs = (user, conversationId, body) =>
  api(
    user,
    "mutation($c: ID!, $m: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { seq } } }",
    { c: conversationId, m: clientMsgId(), b: body },
  );

// --- what the checks read in a page -------------------------------------------------------

// The page scrolls sideways, or an element runs out of the window.
async function assertNoSidewaysScroll(page, where) {
  const found = await page.evaluate(() => {
    const root = document.documentElement;
    const problems = [];
    if (root.scrollWidth > root.clientWidth) problems.push(`the page: scrollWidth ${root.scrollWidth} > ${root.clientWidth}`);
    if (document.body.scrollWidth > document.body.clientWidth) problems.push(`the body: scrollWidth ${document.body.scrollWidth}`);
    for (const list of document.querySelectorAll(".messages, .inbox")) {
      if (list.scrollWidth > list.clientWidth + 1) problems.push(`${list.className}: scrollWidth ${list.scrollWidth} > ${list.clientWidth}`);
    }
    for (const element of document.querySelectorAll(".message, .message .body, .inbox li, header, .composer, .new")) {
      const box = element.getBoundingClientRect();
      if (box.width && (box.right > root.clientWidth + 0.5 || box.left < -0.5)) {
        problems.push(`${element.tagName}.${element.className} spans ${box.left}..${box.right} of ${root.clientWidth}`);
      }
    }
    // A message's text stays in its bubble.
    for (const body of document.querySelectorAll(".message .body")) {
      const bubble = body.closest(".message").getBoundingClientRect();
      const text = body.getBoundingClientRect();
      if (text.right > bubble.right + 0.5) problems.push(`a message's text runs out of its bubble (${text.right} > ${bubble.right})`);
    }
    return problems;
  });
  assert.deepEqual(found, [], `${where}: something is wider than the window`);
}

// Every input, textarea and select that shows has an accessible name.
async function assertInputsNamed(page, where, atLeast) {
  const inputs = await page.evaluate(() =>
    [...document.querySelectorAll("input, textarea, select")]
      .filter((input) => input.type !== "hidden" && input.getClientRects().length)
      .map((input) => {
        const labelledBy = (input.getAttribute("aria-labelledby") || "")
          .split(/\s+/)
          .map((id) => document.getElementById(id)?.textContent ?? "")
          .join(" ");
        const label = [...(input.labels ?? [])].map((label) => label.textContent).join(" ");
        return { name: input.name, accessibleName: (input.getAttribute("aria-label") || labelledBy || label).trim() };
      }),
  );
  assert.ok(inputs.length >= atLeast, `${where}: ${inputs.length} inputs, expected at least ${atLeast}`);
  const nameless = inputs.filter((input) => !input.accessibleName).map((input) => input.name);
  assert.deepEqual(nameless, [], `${where}: inputs without an accessible name`);
  return inputs;
}

const waitFor = (page, fn, ...args) => page.waitForFunction(fn, { timeout: WAIT_MS, polling: 100 }, ...args);
const text = (page, selector) => page.$eval(selector, (element) => element.textContent);
const count = (page, selector) => page.$$eval(selector, (elements) => elements.length);
const visible = (page, selector) =>
  page.evaluate((selector) => {
    const element = document.querySelector(selector);
    return Boolean(element && element.getClientRects().length && getComputedStyle(element).visibility !== "hidden");
  }, selector);

// React's inputs are controlled: set the value as typing would (the native setter, then "input").
async function setInput(page, selector, value) {
  await page.waitForSelector(selector, { timeout: WAIT_MS });
  await page.$eval(
    selector,
    (input, value) => {
      const setter = Object.getOwnPropertyDescriptor(Object.getPrototypeOf(input), "value").set;
      setter.call(input, value);
      input.dispatchEvent(new Event("input", { bubbles: true }));
    },
    value,
  );
}

// A click as the element's click(): the chat's handlers are onClick and onSubmit. (A pointer
// click through WebDriver BiDi closed firefox-esr 153's connection on the second "Start".)
async function click(page, selector) {
  const element = await page.waitForSelector(selector, { timeout: WAIT_MS, visible: true });
  await element.evaluate((element) => element.click());
}

// A button by its text, inside `within` (a selector).
async function clickButton(page, within, label) {
  await waitFor(
    page,
    (within, label) => [...document.querySelectorAll(`${within} button`)].some((b) => b.textContent.trim() === label),
    within,
    label,
  );
  await page.evaluate(
    (within, label) => [...document.querySelectorAll(`${within} button`)].find((b) => b.textContent.trim() === label).click(),
    within,
    label,
  );
}

async function signIn(page, user) {
  await page.goto(demoUrl, { waitUntil: "load" });
  await page.waitForSelector("input[name=userId]", { timeout: WAIT_MS });
  await page.evaluate(() => sessionStorage.clear());
  await setInput(page, "input[name=userId]", user);
  await click(page, "button[type=submit]");
  await waitFor(page, () => document.querySelector("[data-testid=connection]")?.textContent === "live");
}

async function sendInComposer(page, body) {
  await setInput(page, "input[name=body]", body);
  await click(page, ".composer button[type=submit]");
}

async function openInboxItem(page, conversationId) {
  if (phone && (await visible(page, "[data-testid=back]"))) await click(page, "[data-testid=back]");
  await click(page, `[data-testid=inbox-item][data-conversation-id="${conversationId}"]`);
  await waitFor(page, (id) => document.querySelector("[data-testid=conversation]")?.dataset.conversationId === id, conversationId);
}

// One pane at a time on a phone: the conversation open, the inbox out of the way, a back button.
async function assertPanes(page, where) {
  const inbox = await visible(page, "aside");
  const conversation = await visible(page, "[data-testid=conversation]");
  const back = await visible(page, "[data-testid=back]");
  if (phone) assert.deepEqual({ inbox, conversation, back }, { inbox: false, conversation: true, back: true }, where);
  else assert.deepEqual({ inbox, conversation, back }, { inbox: true, conversation: true, back: false }, where);
}

// --- the run ------------------------------------------------------------------------------

const browser = await puppeteer.launch({
  browser: kind === "firefox" ? "firefox" : "chrome",
  executablePath,
  headless: true,
  args: kind === "firefox" ? [] : ["--no-sandbox"],
  defaultViewport: { width, height },
  dumpio: process.env.WEBCHAT_DUMPIO === "1", // the browser's own output, to debug with
});
const pageErrors = [];
let screenshot = null;
// Never outlive the test that runs this: a browser left behind would hold the machine.
const DEADLINE_MS = 200_000;
const watchdog = setTimeout(() => {
  console.log(JSON.stringify({ ok: false, error: `not done after ${DEADLINE_MS} ms`, steps }));
  browser.close().finally(() => process.exit(1));
}, DEADLINE_MS);
try {
  const pages = {};
  for (const name of ["ana", "ben"]) {
    const context = await browser.createBrowserContext();
    const page = await context.newPage();
    await page.setViewport({ width, height });
    page.on("pageerror", (error) => pageErrors.push(`${name}: ${error.message ?? error}`));
    pages[name] = page;
  }
  const { ana, ben } = pages;

  // The sign-in: named inputs; a refusal in words, not the API's field name.
  await ana.goto(demoUrl, { waitUntil: "load" });
  await ana.waitForSelector("input[name=userId]", { timeout: WAIT_MS });
  await assertInputsNamed(ana, "the sign-in", 1);
  await click(ana, "button[type=submit]");
  await waitFor(ana, () => document.querySelector("[data-testid=signin-error]"));
  await setInput(ana, "input[name=userId]", "u".repeat(300));
  await click(ana, "button[type=submit]");
  await waitFor(ana, () => /longer than/.test(document.querySelector("[data-testid=signin-error]")?.textContent));
  const refusal = await text(ana, "[data-testid=signin-error]");
  assert.doesNotMatch(refusal, /userId/, "the sign-in error names the API's field");
  assert.match(refusal, /^This user id cannot sign in: it is longer than 255 characters\.$/);
  await assertNoSidewaysScroll(ana, "the sign-in with a long id");
  step(`sign-in refusal: ${refusal}`);

  await signIn(ana, users.ana);
  await signIn(ben, users.ben);

  // The user ids box: "user <id>" is that user; ids without commas are a mistake, said so.
  await assertInputsNamed(ana, "the inbox", 1);
  await setInput(ana, "input[name=members]", `${users.ben} ${users.cat}`);
  await waitFor(ana, () => /separate user ids with commas/.test(document.querySelector("[data-testid=members-help]")?.textContent));
  assert.equal(await ana.$eval(".new button[type=submit]", (button) => button.disabled), true);
  await setInput(ana, "input[name=members]", `user ${users.ben}`);
  await waitFor(
    ana,
    (ben) => document.querySelector("[data-testid=members-help]")?.textContent === `a direct conversation with user ${ben}`,
    users.ben,
  );
  await click(ana, ".new button[type=submit]");
  await ana.waitForSelector("[data-testid=conversation][data-conversation-id]", { timeout: WAIT_MS });
  const direct = await ana.$eval("[data-testid=conversation]", (element) => element.dataset.conversationId);
  assert.equal(await text(ana, "[data-testid=conversation-title]"), `user ${users.ben}`);
  await assertPanes(ana, "ana's open conversation");
  step(`"user ${users.ben}" started a direct conversation with ${users.ben}`);

  // Real text: a long word, a long URL; nothing scrolls sideways, for either person.
  await sendInComposer(ana, "Hi Ben! The design doc is here:");
  await sendInComposer(ana, LONG_URL);
  await sendInComposer(ana, `And the build id you asked for: ${LONG_WORD}`);
  await waitFor(ana, () => document.querySelectorAll("[data-testid=message]").length === 3);
  await openInboxItem(ben, direct);
  await waitFor(ben, () => document.querySelectorAll("[data-testid=message]").length === 3);
  await sendInComposer(ben, "Thanks, reading it now 👀");
  await waitFor(ana, () => document.querySelectorAll("[data-testid=message]").length === 4);
  await assertNoSidewaysScroll(ana, "ana, a long word and a long URL");
  await assertNoSidewaysScroll(ben, "ben, a long word and a long URL");
  await assertInputsNamed(ana, "the conversation", 1);
  step("a 154-character word and a long URL wrap in their bubbles; no sideways scroll");

  // The edit box: named; cleared, it says why it cannot save and offers delete.
  const at = (seq) => `[data-testid=message][data-seq="${seq}"]`;
  await clickButton(ana, at(1), "edit");
  await ana.waitForSelector(`${at(1)} input[name=edit]`, { timeout: WAIT_MS });
  await assertInputsNamed(ana, "the edit box", 2);
  await setInput(ana, `${at(1)} input[name=edit]`, "   ");
  await clickButton(ana, at(1), "Save");
  await waitFor(ana, (m) => /cannot be empty/.test(document.querySelector(`${m} [data-testid=edit-problem]`)?.textContent), at(1));
  step(`a cleared edit: ${await text(ana, `${at(1)} [data-testid=edit-problem]`)}`);
  await setInput(ana, `${at(1)} input[name=edit]`, "Hi Ben! The design doc is here (v2):");
  await clickButton(ana, at(1), "Save");
  await waitFor(ben, (m) => document.querySelector(`${m} [data-testid=edited]`), at(1));
  // A reaction and a deletion, for the picture.
  await click(ben, `${at(1)} [data-testid=react]`);
  await waitFor(ana, (m) => document.querySelector(`${m} [data-testid=react]`)?.textContent === "👍 1", at(1));
  await sendInComposer(ana, "(wrong chat, sorry)");
  await waitFor(ana, () => document.querySelectorAll("[data-testid=message]").length === 5);
  await clickButton(ana, at(5), "delete");
  await waitFor(ben, (m) => document.querySelector(`${m} [data-testid=tombstone]`), at(5));
  await sendInComposer(ben, "Got it, the build is green. See you at the planning 🙂");
  await waitFor(ana, () => document.querySelectorAll("[data-testid=message]").length === 6);

  // Over the limit: the composer says so before sending, and Send is off.
  await setInput(ana, "input[name=body]", "x".repeat(4001));
  await waitFor(ana, () => document.querySelector("[data-testid=over-limit]"));
  assert.match(await text(ana, "[data-testid=over-limit]"), /4,001 characters: a message holds at most 4,000/);
  assert.equal(await ana.$eval(".composer button[type=submit]", (button) => button.disabled), true);
  await assertNoSidewaysScroll(ana, "a message over the limit in the composer");
  await setInput(ana, "input[name=body]", "");
  await waitFor(ana, () => !document.querySelector("[data-testid=over-limit]"));
  step("the composer warns at 4,001 characters and Send is disabled");

  // Both pictures are taken here: edited, reacted, deleted, a long word and URL wrapped.
  const bottomOf = (page) => page.$eval("[data-testid=messages]", (list) => list.scrollTo(0, list.scrollHeight));
  await bottomOf(ana);
  screenshot = join(shotDir, `${kind}-${width}x${height}.png`);
  await ana.screenshot({ path: screenshot });

  // A group with a 50-character title: ellipsised in the inbox and the header, no sideways scroll.
  if (phone) await click(ana, "[data-testid=back]");
  await setInput(ana, "input[name=members]", `${users.ben}, ${users.cat}`);
  await ana.waitForSelector("input[name=title]", { timeout: WAIT_MS });
  await assertInputsNamed(ana, "the new group form", 2);
  await setInput(ana, "input[name=title]", TITLE);
  await click(ana, ".new button[type=submit]");
  await waitFor(ana, (title) => document.querySelector("[data-testid=conversation-title]")?.textContent === title, TITLE);
  const group = await ana.$eval("[data-testid=conversation]", (element) => element.dataset.conversationId);
  await assertPanes(ana, "ana's group");
  await assertNoSidewaysScroll(ana, "a 50-character group title");
  await sendInComposer(ana, "Agenda: roadmap, hiring, the offsite.");
  await openInboxItem(ben, group);
  await waitFor(ben, () => document.querySelectorAll("[data-testid=message]").length === 1);
  await assertNoSidewaysScroll(ben, "ben, a 50-character group title");
  step("a 50-character group title fits (ellipsised where it must be)");

  // A send the server refuses: ben left the group (from another device), then sends here.
  await api(users.ben, "mutation($c: ID!) { leaveGroup(conversationId: $c) { userId } }", { c: group });
  await sendInComposer(ben, "see you all there");
  await waitFor(ben, () => document.querySelector("[data-testid=send-error]"));
  const reason = await text(ben, "[data-testid=send-error]");
  assert.match(reason, /^not sent: \S/, "the refusal's reason is shown");
  const pendingButtons = await ben.$$eval("[data-testid=pending] button", (buttons) => buttons.map((b) => b.textContent.trim()));
  assert.deepEqual(pendingButtons, ["discard"], "a refused send offers no retry");
  await assertNoSidewaysScroll(ben, "a refused send");
  await clickButton(ben, "[data-testid=pending]", "discard");
  await waitFor(ben, () => !document.querySelector("[data-testid=pending]"));
  step(`a refused send shows its reason (${reason}), no retry, discarded`);

  // Reading older history: a new message does not pull the view down; "1 new message" does.
  await openInboxItem(ben, direct);
  await waitFor(ben, () => document.querySelectorAll("[data-testid=message]").length === 6);
  for (let n = 1; n <= 24; n++) await sendAs(users.ana, direct, `history line ${n}`);
  await waitFor(ben, () => document.querySelectorAll("[data-testid=message]").length === 30);
  await waitFor(ben, () => {
    const list = document.querySelector("[data-testid=messages]");
    return list.scrollHeight - list.scrollTop - list.clientHeight < 48; // following the newest
  });
  await ben.$eval("[data-testid=messages]", (list) => list.scrollTo(0, 0));
  await waitFor(ben, () => document.querySelector("[data-testid=messages]").scrollTop === 0);
  await sendAs(users.ana, direct, "one more while you read");
  await waitFor(ben, () => document.querySelectorAll("[data-testid=message]").length === 31);
  await waitFor(ben, () => document.querySelector("[data-testid=new-messages]")?.textContent === "1 new message ↓");
  assert.equal(await ben.$eval("[data-testid=messages]", (list) => list.scrollTop), 0, "the view jumped");
  await assertNoSidewaysScroll(ben, "the new messages button");
  await click(ben, "[data-testid=new-messages]");
  await waitFor(ben, () => !document.querySelector("[data-testid=new-messages]"));
  await waitFor(ben, () => {
    const list = document.querySelector("[data-testid=messages]");
    return list.scrollHeight - list.scrollTop - list.clientHeight < 48;
  });
  step('a new message while reading older ones: "1 new message ↓", the view stays');

  // A reload opens the same conversation.
  assert.equal(new URL(ben.url()).hash, `#conversation=${direct}`);
  await ben.reload({ waitUntil: "load" });
  await waitFor(ben, (id) => document.querySelector("[data-testid=conversation]")?.dataset.conversationId === id, direct);
  await waitFor(ben, () => document.querySelectorAll("[data-testid=message]").length === 20);
  await assertPanes(ben, "ben after a reload");
  await assertNoSidewaysScroll(ben, "ben after a reload");
  if (phone) {
    await click(ben, "[data-testid=back]");
    await waitFor(ben, () => document.querySelector("aside")?.getClientRects().length > 0);
    assert.equal(new URL(ben.url()).hash, "", "back to the inbox forgets the open conversation");
    await assertNoSidewaysScroll(ben, "ben's inbox on a phone");
  }
  step("a reload keeps the open conversation");
  assert.deepEqual(pageErrors, [], "errors in the pages");
  console.log(JSON.stringify({ ok: true, steps, screenshot }));
} catch (error) {
  const failed = [];
  for (const [n, page] of (await browser.pages()).entries()) {
    const path = join(shotDir, `failed-${kind}-${width}x${height}-${n}.png`);
    if (await page.screenshot({ path }).then(() => true, () => false)) failed.push(path);
  }
  console.log(JSON.stringify({ ok: false, error: error.stack ?? String(error), steps, pageErrors, failed }));
  process.exitCode = 1;
} finally {
  clearTimeout(watchdog);
  await browser.close();
}
