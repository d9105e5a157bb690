// The urql client of docs/guide/clients.md, in a browser: HTTP for queries and
// mutations with the bearer token, graphql-ws (graphql-transport-ws) for subscriptions
// with the token in connection_init's payload. Every document goes by its sha256 (Apollo's
// persistedQuery extension, urql's persistedExchange), over HTTP and the websocket alike: a
// server with the web chat's documents loaded (its allowlist, docs/guide/clients.md) runs them
// by id; one without them answers PersistedQueryNotFound once per document, and the exchange
// sends the text with its hash, which the server keeps.
import { Client, fetchExchange, subscriptionExchange } from "@urql/core";
import { persistedExchange } from "@urql/exchange-persisted";
import { createClient as createWsClient } from "graphql-ws";

export function chatClient(httpUrl, wsUrl, token, onConnection) {
  const ws = createWsClient({
    url: wsUrl,
    connectionParams: { Authorization: `Bearer ${token}` }, // connection_init's payload
    // No silent re-subscribe with the first variables: live.js resubscribes with the
    // cursors the view holds by then, so nothing is missed and nothing comes twice.
    retryAttempts: 0,
    on: {
      connecting: () => onConnection("connecting"),
      connected: () => onConnection("live"),
      closed: () => onConnection("offline"),
    },
  });
  const client = new Client({
    url: httpUrl,
    fetchOptions: { headers: { Authorization: `Bearer ${token}` } },
    // No cache: every view keeps what it shows itself, by (conversationId, seq).
    requestPolicy: "network-only",
    exchanges: [
      persistedExchange({ preferGetForPersistedQueries: false, enableForMutation: true, enableForSubscriptions: true }),
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

// A query or mutation's data, or a thrown Error with the GraphQL error's code.
export async function run(client, kind, document, variables) {
  const result = await client[kind](document, variables).toPromise();
  if (result.error) {
    const graphQLError = result.error.graphQLErrors[0];
    const error = new Error(graphQLError ? graphQLError.message : "the server could not be reached");
    error.code = graphQLError?.extensions?.code ?? "NETWORK";
    throw error;
  }
  return result.data;
}
