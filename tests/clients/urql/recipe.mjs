// The urql recipe of docs/guide/clients.md against a running chatgql: @urql/core 6 (the
// client under urql 5), GraphQL over HTTP by fetchExchange, subscriptions over graphql-transport-ws
// by subscriptionExchange + graphql-ws, and (for the reader) Graphcache instead of the document cache.
//
//   node recipe.mjs <http url> <ws url> <token of user 1> <token of user 2> <long conversation id> <its size>
//
// User 1 creates a group with user 2 and sends a message; user 2 reads the history, subscribes to
// messageNew (resuming after the history's lastSeq), receives a message user 1 sends after that,
// and marks it read. Then user 2 reads a long conversation (1..size, both members) forward, page
// after page, from the oldest message. Prints one JSON line {"ok": true, "checks": [...], ...} and exits 0, or prints
// the failure and exits 1. Driven by tests/clients/test_urql.py.

// --- the recipe (docs/guide/clients.md; tests/clients/test_urql.py checks the page holds it verbatim)
import { Client, cacheExchange, fetchExchange, gql, subscriptionExchange } from "@urql/core";
import { cacheExchange as graphcache } from "@urql/exchange-graphcache";
import { createClient as createWsClient } from "graphql-ws";
import WebSocket from "ws"; // Node only: browsers have a global WebSocket (drop webSocketImpl)

function chatClient(httpUrl, wsUrl, token, cache = cacheExchange) {
  const ws = createWsClient({
    url: wsUrl,
    webSocketImpl: WebSocket,
    connectionParams: { Authorization: `Bearer ${token}` }, // connection_init's payload
  });
  const client = new Client({
    url: httpUrl,
    fetchOptions: { headers: { Authorization: `Bearer ${token}` } },
    exchanges: [
      cache,
      fetchExchange,
      subscriptionExchange({
        forwardSubscription: (request) => ({
          subscribe: (sink) => ({ unsubscribe: ws.subscribe({ ...request, query: request.query || "" }, sink) }),
        }),
      }),
    ],
  });
  return { client, ws };
}

// Graphcache (optional): objects are keyed by __typename + id; payloads without an id are embedded.
const normalised = graphcache({
  keys: Object.fromEntries(
    ["MessageConnection", "PageInfo", "SendMessagePayload", "MarkReadPayload", "MessageNewEvent"]
      .map((type) => [type, () => null]),
  ),
});

// A long history, oldest first: `first`/`after` always answer the page right after the cursor
// (however far behind it is), so page with after = the previous endCursor until hasNextPage is false.
const FORWARD = gql`
  query Forward($c: ID!, $first: Int!, $after: String) {
    messages(conversationId: $c, first: $first, after: $after) {
      nodes { id seq body }
      pageInfo { hasNextPage endCursor }
    }
  }
`;
async function* historyForward(client, c, first = 100, after = null) {
  for (;;) {
    const { data, error } = await client.query(FORWARD, { c, first, after }).toPromise();
    if (error) throw error;
    yield data.messages.nodes;
    if (!data.messages.pageInfo.hasNextPage) return;
    after = data.messages.pageInfo.endCursor;
  }
}
// --- end of the recipe

const CREATE_GROUP = gql`
  mutation CreateGroup($title: String!, $members: [ID!]!) { createGroup(title: $title, memberIds: $members) { id } }
`;
const SEND = gql`
  mutation Send($c: ID!, $m: UUID!, $b: String!) {
    sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { id seq body senderId } duplicate }
  }
`;
const HISTORY = gql`
  query History($c: ID!) {
    conversation(id: $c) { id lastSeq unreadCount messages(last: 50) { nodes { id seq body senderId } } }
  }
`;
const MESSAGE_NEW = gql`
  subscription Live($c: ID!, $cursors: [SyncCursor!]) {
    messageNew(conversationId: $c, cursors: $cursors) {
      conversationId seq
      message { id seq body senderId }
      conversation { id lastSeq unreadCount }
    }
  }
`;
const MARK_READ = gql`
  mutation Read($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { lastReadSeq unreadCount advanced } }
`;

const [httpUrl, wsUrl, token1, token2, longConversationId, longSize] = process.argv.slice(2);
const checks = [];
const out = {};
const sockets = [];

function check(condition, what, detail) {
  if (!condition) throw new Error(`${what}: ${JSON.stringify(detail)}`);
  checks.push(what);
}

async function ok(promise) {
  const result = await promise;
  if (result.error) throw result.error;
  return result.data;
}

function within(ms, promise, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms); }),
  ]).finally(() => clearTimeout(timer));
}

async function main() {
  const sender = chatClient(httpUrl, wsUrl, token1);
  const reader = chatClient(httpUrl, wsUrl, token2, normalised);
  sockets.push(sender.ws, reader.ws);

  // 1. A group, and a message in it (HTTP, user 1).
  const { createGroup } = await ok(sender.client.mutation(CREATE_GROUP, { title: "urql", members: ["2"] }));
  const c = createGroup.id;
  out.conversationId = c;
  const first = await ok(sender.client.mutation(SEND, { c, m: crypto.randomUUID(), b: "hello from urql" }));
  check(first.sendMessage.message.seq === 1 && !first.sendMessage.duplicate, "sendMessage stores the first message", first);

  // 2. The history (HTTP, user 2, through Graphcache).
  const history = await ok(reader.client.query(HISTORY, { c }, { requestPolicy: "network-only" }));
  out.history = history.conversation.messages.nodes.map((m) => m.body);
  check(out.history.length === 1 && out.history[0] === "hello from urql", "the history holds the message", history);
  check(history.conversation.unreadCount === 1, "the message is unread", history);

  // 3. messageNew (graphql-transport-ws, user 2), resuming after the history's lastSeq: a message
  //    sent once the subscription has started arrives, whether or not the server has registered it yet.
  const events = [];
  let arrived;
  const arrival = new Promise((resolve) => { arrived = resolve; });
  const subscription = reader.client
    .subscription(MESSAGE_NEW, { c, cursors: [{ conversationId: c, afterSeq: history.conversation.lastSeq }] })
    .subscribe((result) => {
      if (result.error) { arrived(Promise.reject(result.error)); return; }
      events.push(result.data.messageNew);
      arrived();
    });
  const live = await ok(sender.client.mutation(SEND, { c, m: crypto.randomUUID(), b: "live from urql" }));
  await within(15000, arrival, "the messageNew event");
  subscription.unsubscribe();
  const event = events[0];
  out.live = { seq: event.seq, body: event.message.body, senderId: event.message.senderId };
  check(event.message.id === live.sendMessage.message.id && event.message.body === "live from urql" && event.seq === 2,
    "the subscription receives the message sent after it started", { event, live });
  check(events.length === 1, "exactly once", events);
  // Graphcache: the event's conversation updated the cached conversation the history query holds.
  const cached = reader.client.readQuery(HISTORY, { c });
  check(cached?.data?.conversation.lastSeq === 2 && cached.data.conversation.unreadCount === 2,
    "Graphcache: the event updated the cached conversation, with no refetch", cached?.data);

  // 4. markRead (HTTP, user 2), then the history from the server says nothing is unread.
  const read = await ok(reader.client.mutation(MARK_READ, { c, s: event.seq }));
  out.markRead = read.markRead;
  check(read.markRead.lastReadSeq === 2 && read.markRead.unreadCount === 0 && read.markRead.advanced,
    "markRead moves the watermark", read);
  const after = await ok(reader.client.query(HISTORY, { c }, { requestPolicy: "network-only" }));
  out.historyAfter = after.conversation.messages.nodes.map((m) => m.body);
  check(after.conversation.unreadCount === 0 && out.historyAfter.length === 2, "nothing is unread after markRead", after);

  // 5. A long history read forward (HTTP, user 2, through Graphcache), page after page.
  const seqs = [];
  let pages = 0;
  for await (const nodes of historyForward(reader.client, longConversationId)) {
    pages += 1;
    seqs.push(...nodes.filter((m) => m.body === `m${m.seq}`).map((m) => m.seq));
  }
  out.longHistory = { pages, count: seqs.length, first: seqs[0], last: seqs.at(-1) };
  check(seqs.length === Number(longSize) && seqs.every((seq, i) => seq === i + 1),
    "a long history paged forward holds every message once, in order", out.longHistory);
}

try {
  await main();
  console.log(JSON.stringify({ ok: true, checks, ...out }));
  await Promise.all(sockets.map((s) => s.dispose()));
  process.exit(0);
} catch (error) {
  console.log(JSON.stringify({ ok: false, checks, ...out, error: String(error?.stack ?? error) }));
  process.exit(1);
}
