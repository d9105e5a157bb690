// Runs graphql-http's server audits (GraphQL over HTTP conformance) against a running
// chatgql and prints one JSON object: {results: [{id, name, status, reason?, response?}]}.
// Usage: node audit.mjs http://127.0.0.1:8000/graphql [bearer-token]
// With a token every audited request carries `Authorization: Bearer <token>`.
import { serverAudits } from "graphql-http";

const [url, token] = process.argv.slice(2);
if (!url) {
  console.error("usage: node audit.mjs URL [TOKEN]");
  process.exit(2);
}

function fetchFn(input, init = {}) {
  if (!token) return fetch(input, init);
  const headers = new Headers(init.headers);
  headers.set("authorization", `Bearer ${token}`);
  return fetch(input, { ...init, headers });
}

const results = [];
for (const audit of serverAudits({ url, fetchFn })) {
  const result = await audit.fn();
  const entry = { id: result.id, name: result.name, status: result.status };
  if (result.status !== "ok") {
    entry.reason = result.reason;
    const response = result.response;
    entry.response = {
      status: response.status,
      contentType: response.headers.get("content-type"),
      body: (await response.text()).slice(0, 500),
    };
  }
  results.push(entry);
}
console.log(JSON.stringify({ results }, null, 1));
