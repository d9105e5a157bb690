// Apollo Client 4 (InMemoryCache with no typePolicies, GraphQLWsLink) against a running chatgql.
//
//   node cache.mjs <http url> <ws url> <sender token> <reader token> <conversation id> <long id> <its size>
//
// The conversation already holds a few messages from the sender; the reader is a member. The long
// conversation (both are members) holds messages 1..size, bodies m1..m<size>.
// Prints one JSON line {"ok": true, "checks": [...]} and exits 0, or prints the failure and exits 1.
// Driven by tests/clients/test_apollo.py.

import { ApolloClient, ApolloLink, HttpLink, InMemoryCache, gql } from "@apollo/client";
import { GraphQLWsLink } from "@apollo/client/link/subscriptions";
import { isSubscriptionOperation, relayStylePagination } from "@apollo/client/utilities";
import { createClient } from "graphql-ws";
import WebSocket from "ws";

const [httpUrl, wsUrl, senderToken, readerToken, conversationId, longId, longSize] = process.argv.slice(2);
const checks = [];
const sockets = [];

function check(condition, what, detail) {
  if (!condition) throw new Error(`${what}: ${JSON.stringify(detail)}`);
  checks.push(what);
}

function makeClient(token, cache = new InMemoryCache()) {
  const ws = createClient({ url: wsUrl, webSocketImpl: WebSocket, connectionParams: { Authorization: `Bearer ${token}` } });
  sockets.push(ws);
  const http = new HttpLink({ uri: httpUrl, headers: { Authorization: `Bearer ${token}` } });
  return new ApolloClient({
    cache, // by default no typePolicies, no possibleTypes: ids and __typename only
    link: ApolloLink.split(({ query }) => isSubscriptionOperation(query), new GraphQLWsLink(ws), http),
  });
}

// Keeps one observer on a watched query for the whole run (so it stays active) and lets the
// script wait for the data to satisfy a predicate.
function track(observable) {
  let latest = null;
  let failure = null;
  const waiters = new Set();
  const wake = () => { for (const waiter of [...waiters]) waiter(); };
  observable.subscribe({
    next(result) { if (result.data) { latest = result.data; wake(); } },
    error(error) { failure = error; wake(); },
  });
  return (predicate, what, ms = 15000) => new Promise((resolve, reject) => {
    const done = () => { waiters.delete(test); clearTimeout(timer); };
    const test = () => {
      if (failure) { done(); reject(failure); } else if (latest && predicate(latest)) { done(); resolve(latest); }
    };
    const timer = setTimeout(() => { waiters.delete(test); reject(new Error(`timed out waiting for ${what}`)); }, ms);
    waiters.add(test);
    test();
  });
}

const HISTORY = gql`
  query History($c: ID!) {
    viewer { id userId }
    conversation(id: $c) {
      id
      lastSeq
      members { id userId lastReadSeq }
      messages(last: 50) { nodes { id seq body senderId } }
    }
  }
`;

const INBOX = gql`
  query Inbox { inbox(first: 20) { nodes { id lastSeq lastReadSeq unreadCount lastMessage { id body } } } }
`;

const MESSAGE_NEW = gql`
  subscription Resume($c: ID, $cursors: [SyncCursor!]) {
    messageNew(conversationId: $c, cursors: $cursors) {
      conversationId
      seq
      message { id seq body senderId }
      conversation { id lastSeq unreadCount lastMessage { id body } }
    }
  }
`;

const READ_UPDATED = gql`
  subscription Reads($c: ID) {
    readUpdated(conversationId: $c) { member { id lastReadSeq } conversation { id lastReadSeq unreadCount } }
  }
`;

const SEND = gql`
  mutation Send($c: ID!, $m: UUID!, $b: String!) {
    sendMessage(conversationId: $c, clientMsgId: $m, body: $b) { message { id seq body senderId } }
  }
`;

const MARK_READ = gql`
  mutation Read($c: ID!, $s: Long!) { markRead(conversationId: $c, seq: $s) { lastReadSeq } }
`;

const FORWARD = gql`
  query Forward($c: ID!, $first: Int!, $after: String) {
    messages(conversationId: $c, first: $first, after: $after) {
      edges { cursor node { id seq body } }
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
      gapTooLong
    }
  }
`;

const NODE = gql`
  query Node($id: ID!) {
    node(id: $id) {
      __typename
      id
      ... on Conversation { lastSeq }
      ... on Message { seq body }
      ... on Member { userId lastReadSeq }
      ... on Viewer { userId }
    }
  }
`;

async function main() {
  const reader = makeClient(readerToken);
  const sender = makeClient(senderToken);

  // 1. The history, normalised: every message, member, the viewer and the conversation are entities.
  const history = reader.watchQuery({ query: HISTORY, variables: { c: conversationId } });
  const historyUntil = track(history);
  const first = await historyUntil((d) => d.conversation, "the history query");
  const nodes = first.conversation.messages.nodes;
  check(nodes.length > 0, "the history has messages", nodes);
  const store = reader.cache.extract();
  check(store[`Conversation:${conversationId}`], "the conversation is stored under its id", Object.keys(store));
  for (const m of nodes) check(store[`Message:${m.id}`]?.body === m.body, `message ${m.seq} is normalised`, Object.keys(store));
  for (const m of first.conversation.members) check(store[`Member:${m.id}`], `member ${m.userId} is normalised`, Object.keys(store));
  check(store[`Viewer:${first.viewer.id}`], "the viewer is normalised", Object.keys(store));
  const inbox = reader.watchQuery({ query: INBOX });
  const inboxUntil = track(inbox);
  const entry = (d) => d.inbox.nodes.find((c) => c.id === conversationId);
  const before = entry(await inboxUntil((d) => entry(d), "the inbox query"));
  const refs = store[`Conversation:${conversationId}`][`messages({"last":50})`].nodes;
  check(refs.every((r) => typeof r.__ref === "string"), "the history holds references, not copies", refs);

  // 2. A message sent now arrives by the resumable subscription (cursor = the last seq the
  //    history holds, so nothing sent between the query and the subscribe is lost) and joins the
  //    cached history through subscribeToMore; the message entity is the one a query would name.
  const lastSeq = first.conversation.lastSeq;
  history.subscribeToMore({
    document: MESSAGE_NEW,
    variables: { c: conversationId, cursors: [{ conversationId, afterSeq: lastSeq }] },
    updateQuery(previous, { subscriptionData }) {
      const message = subscriptionData.data.messageNew.message;
      const known = previous.conversation.messages.nodes;
      if (known.some((m) => m.id === message.id)) return previous;
      return {
        ...previous,
        conversation: {
          ...previous.conversation,
          lastSeq: Math.max(previous.conversation.lastSeq, message.seq),
          messages: { ...previous.conversation.messages, nodes: [...known, message] },
        },
      };
    },
  });
  const body = `from apollo ${Date.now()}`;
  const sent = await sender.mutate({
    mutation: SEND, variables: { c: conversationId, m: crypto.randomUUID(), b: body },
  });
  const sentMessage = sent.data.sendMessage.message;
  const updated = await historyUntil(
    (d) => d.conversation.messages.nodes.some((m) => m.id === sentMessage.id), "the new message in the history",
  );
  const seqs = updated.conversation.messages.nodes.map((m) => m.seq);
  check(JSON.stringify(seqs) === JSON.stringify([...nodes.map((m) => m.seq), sentMessage.seq]),
    "the history gained exactly the new message", seqs);
  // The inbox was not touched by any code: the event's conversation updated the cached entry.
  const after = entry(await inboxUntil(
    (d) => entry(d).lastMessage?.id === sentMessage.id, "the new message as the inbox's lastMessage",
  ));
  check(after.unreadCount === before.unreadCount + 1 && after.lastSeq === sentMessage.seq,
    "the inbox entry's lastSeq and unreadCount follow the event, with no code", { before, after });
  check(reader.cache.extract()[`Message:${sentMessage.id}`]?.body === body,
    "the subscription's message is stored under the id the sender's mutation returned", sentMessage.id);

  // 3. readUpdated's member updates the cached member inside the history: no code at all.
  const readerUserId = first.viewer.userId;
  const reads = reader.subscribe({ query: READ_UPDATED, variables: { c: conversationId } }).subscribe({});
  let seen = false;
  for (let attempt = 0; attempt < 20 && !seen; attempt++) {
    // Until the subscription is live on the server: send, read, look.
    const more = await sender.mutate({
      mutation: SEND, variables: { c: conversationId, m: crypto.randomUUID(), b: `read me ${attempt}` },
    });
    const seq = more.data.sendMessage.message.seq;
    await reader.mutate({ mutation: MARK_READ, variables: { c: conversationId, s: seq } });
    try {
      await historyUntil((d) => d.conversation.members.some(
        (m) => m.userId === readerUserId && m.lastReadSeq === seq), "the member's watermark", 1000);
      await inboxUntil((d) => entry(d).lastReadSeq === seq && entry(d).unreadCount === 0, "the inbox's unreadCount", 1000);
      seen = true;
    } catch { /* not live yet: again */ }
  }
  reads.unsubscribe();
  check(seen, "a readUpdated event updates the cached member's lastReadSeq and the inbox's unreadCount", null);

  // 4. node(id:) round-trips for every type, and lands on the same cache entity.
  const current = reader.cache.readQuery({ query: HISTORY, variables: { c: conversationId } });
  const wanted = [
    ["Conversation", conversationId],
    ["Message", current.conversation.messages.nodes[0].id],
    ["Member", current.conversation.members[0].id],
    ["Viewer", current.viewer.id],
  ];
  for (const [typename, id] of wanted) {
    const { data } = await reader.query({ query: NODE, variables: { id }, fetchPolicy: "network-only" });
    check(data.node?.__typename === typename && data.node.id === id, `node(id:) round-trips a ${typename}`, data);
    check(reader.cache.identify(data.node) === `${typename}:${id}`, `node(id:) names the cached ${typename}`, data);
  }
  const { data: missing } = await reader.query({ query: NODE, variables: { id: "999999999" }, fetchPolicy: "network-only" });
  check(missing.node === null, "node(id:) of a conversation the reader is not in is null", missing);

  // 5. A long history paged forward as Relay's loadNext does: fetchMore with after = endCursor,
  //    merged by relayStylePagination (keyed by conversationId), until hasNextPage is false.
  const pager = makeClient(readerToken, new InMemoryCache({
    typePolicies: { Query: { fields: { messages: relayStylePagination(["conversationId"]) } } },
  }));
  const PAGE = 100;
  const total = Number(longSize);
  const paged = pager.watchQuery({ query: FORWARD, variables: { c: longId, first: PAGE } });
  const pagedUntil = track(paged);
  let merged = await pagedUntil((d) => d.messages?.edges.length > 0, "the first page");
  let flagged = 0;
  while (merged.messages.pageInfo.hasNextPage) {
    const held = merged.messages.edges.length;
    const more = await paged.fetchMore({ variables: { after: merged.messages.pageInfo.endCursor } });
    const page = more.data.messages.edges.map((e) => e.node.seq);
    check(page[0] === held + 1 && page.length === Math.min(PAGE, total - held),
      `the page after ${held} is ${held + 1}..${held + page.length}`, page.slice(0, 3));
    if (more.data.messages.gapTooLong) flagged += 1;
    merged = await pagedUntil((d) => d.messages.edges.length === held + page.length, `${held + page.length} merged`);
  }
  const longSeqs = merged.messages.edges.map((e) => e.node.seq);
  const bodies = merged.messages.edges.every((e) => e.node.body === `m${e.node.seq}`);
  check(longSeqs.length === total && longSeqs.every((seq, i) => seq === i + 1) && bodies,
    "relayStylePagination pages the long history forward: every message once, in order",
    { count: longSeqs.length, first: longSeqs[0], last: longSeqs.at(-1) });
  check(flagged > 1, "pages far behind are flagged gapTooLong, and are still the page after the cursor", flagged);
  check(merged.messages.pageInfo.hasNextPage === false && merged.messages.pageInfo.endCursor === String(total),
    "the merged pageInfo ends at the newest message", merged.messages.pageInfo);
}

try {
  await main();
  console.log(JSON.stringify({ ok: true, checks }));
  await Promise.all(sockets.map((s) => s.dispose()));
  process.exit(0);
} catch (error) {
  console.log(JSON.stringify({ ok: false, checks, error: String(error?.stack ?? error) }));
  process.exit(1);
}
