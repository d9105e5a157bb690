#!/usr/bin/env node
// The web chat's persisted documents: every GraphQL document webchat/src/operations.js exports,
// as the text urql sends for it (@urql/core's stringifyDocument), in Apollo's persisted query
// manifest format (id: the text's sha256). `chatgql documents load` reads it, so a server with
// CHATGQL_DOCUMENTS_ALLOWLIST=true serves the web chat:
//
//   node scripts/webchat-manifest.mjs > webchat-documents.json
//   chatgql documents load webchat-documents.json
//
// @urql/core comes from webchat/node_modules (`npm ci` there) or tests/clients/urql/node_modules
// (the same pinned version), or the node_modules directory given as the first argument.
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const candidates = [process.argv[2], join(repo, "webchat/node_modules"), join(repo, "tests/clients/urql/node_modules")];
const modules = candidates.find((dir) => dir && existsSync(join(dir, "@urql/core/dist/urql-core.mjs")));
if (!modules) {
  console.error("webchat-manifest: @urql/core not found: run `npm ci` in webchat/ (or pass a node_modules directory)");
  process.exit(2);
}
const urql = await import(pathToFileURL(join(modules, "@urql/core/dist/urql-core.mjs")).href);

const IMPORT = 'import { gql } from "@urql/core";';
const source = readFileSync(join(repo, "webchat/src/operations.js"), "utf8");
if (!source.includes(IMPORT)) {
  console.error(`webchat-manifest: webchat/src/operations.js no longer has \`${IMPORT}\`: update this script`);
  process.exit(2);
}
globalThis.__chatgqlUrql = urql;
const scratch = mkdtempSync(join(tmpdir(), "webchat-manifest-"));
let operations;
try {
  const copy = join(scratch, "operations.mjs");
  writeFileSync(copy, source.replace(IMPORT, "const { gql } = globalThis.__chatgqlUrql;"));
  operations = await import(pathToFileURL(copy).href);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}

const manifest = { format: "apollo-persisted-query-manifest", version: 1, operations: [] };
for (const document of Object.values(operations)) {
  if (!document || document.kind !== "Document") continue;
  const operation = document.definitions.find((definition) => definition.kind === "OperationDefinition");
  const body = urql.stringifyDocument(document);
  const id = createHash("sha256").update(body, "utf8").digest("hex");
  manifest.operations.push({ id, name: operation.name?.value ?? null, type: operation.operation, body });
}
manifest.operations.sort((a, b) => (a.name ?? "").localeCompare(b.name ?? ""));
process.stdout.write(JSON.stringify(manifest, null, 2) + "\n");
