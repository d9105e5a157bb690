// The reference clients of subscriptions over plain HTTP against a running chatgql: graphql-sse's
// client in its distinct connections mode and its single connection mode, and Apollo Client 4's
// HttpLink (multipart subscriptions, as Apollo's iOS and Kotlin clients speak them).
//
//   node subscriptions.mjs <http url> <sender token> <reader token> <stranger token> <conversation id> <last seq>
//     <the reader's user id> <the server's token secret (a test server's: short-lived tokens are made here)>
//
// The reader and the sender are members of the conversation, whose last message is <last seq>;
// the stranger is not. For each client: a resumed messageNew (cursors at the last seq it knows)
// gets the messages sent after it, in order, each once, and then the live ones; the stranger's
// subscription is refused with NOT_FOUND. And graphql-sse's client, in both modes, started with
// a token that expires three seconds later: its stream ends at the token's expiry, the client connects again with the
// token `headers` gives then, and the subscription resumes from its cursor: a message sent while it
// was away arrives, and one sent after. Prints one JSON line {"ok": true, "checks": [...]} and
// exits 0, or prints the failure and exits 1. Driven by tests/clients/test_http_subscriptions.py.

// --- the recipe
import { ApolloClient, HttpLink, InMemoryCache, gql } from "@apollo/client";
import { createClient } from "graphql-sse";

// graphql-sse: a stream per subscription (distinct connections: HTTP/2), or every subscription of the
// client on one stream (singleConnection: true: HTTP/1.1 and its six connections per host). `headers`
// is called at each connection, reconnections included: it hands the client the current token.
function sseClient(url, currentToken, singleConnection = false) {
  return createClient({ url, singleConnection, headers: async () => ({ Authorization: `Bearer ${await currentToken()}` }) });
}

// Apollo Client: HttpLink runs a subscription as a multipart HTTP subscription; no websocket link.
function apolloClient(url, token) {
  return new ApolloClient({
    cache: new InMemoryCache(),
    link: new HttpLink({ uri: url, headers: { Authorization: `Bearer ${token}` } }),
  });
}
// --- end of the recipe
import { createHmac } from "node:crypto";

const [url, senderToken, readerToken, strangerToken, conversationId, lastSeqArg, readerId, secret] = process.argv.slice(2);
let lastSeq = Number(lastSeqArg);
const checks = [];

function check(condition, what, detail) {
  if (!condition) throw new Error(`${what}: ${JSON.stringify(detail)}`);
  checks.push(what);
}

const RESUME = `subscription Resume($c: ID!, $after: Long!) {
  messageNew(conversationId: $c, cursors: [{conversationId: $c, afterSeq: $after}]) { conversationId seq message { id body } }
}`;

async function send(body) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${senderToken}` },
    body: JSON.stringify({
      query: "mutation($c: ID!, $m: UUID!, $b: String!) { sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { seq } } }",
      variables: { c: conversationId, m: crypto.randomUUID(), b: body },
    }),
  });
  const { data, errors } = await response.json();
  if (errors) throw new Error(JSON.stringify(errors));
  return data.sendMessage.message.seq;
}

// Collects what a subscription delivers; `until(n)` waits for n events (15 s at most).
function collector() {
  const events = [];
  const errors = [];
  const waiters = new Set();
  const wake = () => { for (const waiter of [...waiters]) waiter(); };
  return {
    events,
    errors,
    next(result) {
      if (result.errors) errors.push(...result.errors);
      else events.push(result.data.messageNew);
      wake();
    },
    error(error) { errors.push(error); wake(); },
    until(count, what) {
      return new Promise((resolve, reject) => {
        const test = () => {
          if (events.length >= count || errors.length) { waiters.delete(test); clearTimeout(timer); resolve(); }
        };
        const timer = setTimeout(() => { waiters.delete(test); reject(new Error(`timed out waiting for ${what}: ${JSON.stringify({ events, errors })}`)); }, 15000);
        waiters.add(test);
        test();
      });
    },
  };
}

// Sends three messages while subscribed from the last seq, and checks they arrive in order, each once.
async function resumeThenLive(name, subscribe) {
  const from = lastSeq;
  const seen = collector();
  const stop = subscribe({ query: RESUME, variables: { c: conversationId, after: from } }, seen);
  const sent = [];
  for (const body of ["one", "two", "three"]) sent.push(await send(`${name} ${body}`));
  await seen.until(3, `${name}: three messages`);
  check(seen.errors.length === 0, `${name}: no error`, seen.errors);
  check(
    JSON.stringify(seen.events.map((e) => e.seq)) === JSON.stringify(sent),
    `${name}: the messages sent after the cursor arrive in order, each once`,
    { sent, got: seen.events },
  );
  check(seen.events[2].message.body === `${name} three`, `${name}: with their bodies`, seen.events[2]);
  lastSeq = sent[2];
  stop();
}

async function refusesTheStranger(name, subscribe) {
  const seen = collector();
  const stop = subscribe({ query: RESUME, variables: { c: conversationId, after: 0 } }, seen);
  await seen.until(1, `${name}: the stranger's refusal`);
  const code = seen.errors[0]?.extensions?.code ?? seen.errors[0]?.errors?.[0]?.extensions?.code;
  check(code === "NOT_FOUND", `${name}: a non-member's subscription is refused with NOT_FOUND`, seen.errors);
  stop();
}

function sseSubscriber(token, singleConnection) {
  const client = sseClient(url, async () => token, singleConnection);
  const subscribe = (request, sink) => client.subscribe(request, { next: sink.next, error: sink.error, complete() {} });
  return { subscribe, dispose: () => client.dispose() };
}

function apolloSubscriber(token) {
  const client = apolloClient(url, token);
  const subscribe = (request, sink) => {
    const subscription = client
      .subscribe({ query: gql(request.query), variables: request.variables })
      .subscribe({ next: (result) => sink.next(result.error ? { errors: result.error.errors ?? [result.error] } : result), error: sink.error });
    return () => subscription.unsubscribe();
  };
  return { subscribe, dispose: () => client.stop() };
}

// A token of the reader's that expires `seconds` from now (HS256, as the server's issue_token makes them).
function shortToken(seconds) {
  const part = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const now = Math.floor(Date.now() / 1000);
  const unsigned = `${part({ alg: "HS256", typ: "JWT" })}.${part({ sub: readerId, iat: now, exp: now + seconds })}`;
  return `${unsigned}.${createHmac("sha256", secret).update(unsigned).digest("base64url")}`;
}

// The stream ends at the short token's expiry; the client connects again (its retry), calling
// `headers` for the current token, and sends the same request: from the same cursor.
async function reconnectsWithTheNewToken(name, singleConnection) {
  const from = lastSeq;
  let calls = 0;
  let away = null;
  const short = shortToken(3);
  const client = createClient({
    url,
    singleConnection,
    headers: async () => ({ Authorization: `Bearer ${calls++ === 0 ? short : readerToken}` }),
    on: { connecting: (retrying) => { if (retrying && !away) away = send(`${name} while away`); } },
  });
  const seen = collector();
  const stop = client.subscribe(
    { query: RESUME, variables: { c: conversationId, after: from } },
    { next: seen.next, error: seen.error, complete() {} },
  );
  const deadline = Date.now() + 30000;
  while (!away && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  check(away !== null, `${name}: the stream ended at the token's expiry and the client connected again`, { calls, seen });
  const whileAway = await away;
  const after = await send(`${name} after`);
  const want = (events) => events.some((e) => e.seq === after);
  while (!want(seen.events) && !seen.errors.length && Date.now() < deadline) await seen.until(seen.events.length + 1, `${name}: the message sent after`).catch(() => {});
  const seqs = [...new Set(seen.events.map((e) => e.seq))];
  check(seen.errors.length === 0, `${name}: no error across the reconnection`, seen.errors);
  check(calls >= 2, `${name}: headers gave the new token`, { calls });
  check(
    seqs.includes(whileAway) && seqs.includes(after) && JSON.stringify(seqs) === JSON.stringify([...seqs].sort((a, b) => a - b)),
    `${name}: resumed from its cursor, the message sent while away and the next one delivered, in order`,
    { whileAway, after, seqs },
  );
  stop();
  client.dispose();
  return after;
}

try {
  // Both at once: the short token's lifetime is the same for both.
  const afters = await Promise.all([
    reconnectsWithTheNewToken("graphql-sse, distinct connections", false),
    reconnectsWithTheNewToken("graphql-sse, single connection", true),
  ]);
  lastSeq = Math.max(...afters);
  for (const [name, make] of [
    ["graphql-sse, distinct connections", (token) => sseSubscriber(token, false)],
    ["graphql-sse, single connection", (token) => sseSubscriber(token, true)],
    ["Apollo Client, multipart", (token) => apolloSubscriber(token)],
  ]) {
    const reader = make(readerToken);
    await resumeThenLive(name, reader.subscribe);
    reader.dispose();
    const stranger = make(strangerToken);
    await refusesTheStranger(name, stranger.subscribe);
    stranger.dispose();
  }
  console.log(JSON.stringify({ ok: true, checks }));
  process.exit(0);
} catch (error) {
  console.log(JSON.stringify({ ok: false, checks, error: String(error?.stack ?? error) }));
  process.exit(1);
}
