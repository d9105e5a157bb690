// Builds the web chat into src/chatgql/static/demo/ (committed: chatgql serves it with
// no build step for its users). manifest.json records each built file's sha256 and the
// sha256 of every input, so a test can tell cheaply that the build is up to date.
import { build, version } from "esbuild";
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
// WEBCHAT_DEVELOPMENT=1: React's development build, unminified (its warnings name the
// component at fault). Never commit it: the manifest says which it is, and a test checks.
const development = process.env.WEBCHAT_DEVELOPMENT === "1";
const out = join(here, "..", "src", "chatgql", "static", "demo");
const sha256 = (path) => createHash("sha256").update(readFileSync(path)).digest("hex");

// The inputs: what the test compares with the manifest.
export function inputs() {
  const files = ["build.mjs", "index.html", "package.json", "package-lock.json"];
  for (const name of readdirSync(join(here, "src")).sort()) files.push(`src/${name}`);
  return Object.fromEntries(files.map((file) => [file, sha256(join(here, file))]));
}

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const result = await build({
  entryPoints: { webchat: join(here, "src", "main.jsx") },
  bundle: true,
  minify: !development,
  format: "iife",
  target: "es2020",
  jsx: "automatic",
  define: { "process.env.NODE_ENV": development ? '"development"' : '"production"' },
  legalComments: "none",
  metafile: true,
  outdir: out,
  logLevel: "warning",
});
copyFileSync(join(here, "index.html"), join(out, "index.html"));

// Every bundled package's license, in one file.
const packages = new Set();
for (const input of Object.keys(result.metafile.inputs)) {
  const match = input.match(/node_modules\/((?:@[^/]+\/)?[^/]+)\//);
  if (match) packages.add(match[1]);
}
const licenses = [];
for (const name of [...packages].sort()) {
  const directory = join(here, "node_modules", name);
  const pkg = JSON.parse(readFileSync(join(directory, "package.json"), "utf8"));
  const file = readdirSync(directory).find((entry) => /^licen[cs]e/i.test(entry));
  const text = file ? readFileSync(join(directory, file), "utf8").trim() : `${pkg.license}`;
  licenses.push(`${name}@${pkg.version} (${pkg.license})\n\n${text}\n`);
}
writeFileSync(join(out, "LICENSES.txt"), licenses.join("\n" + "-".repeat(72) + "\n\n"));

// The web chat's persisted documents (Apollo's manifest format): every document src/operations.js
// exports, as the text urql prints for it, by its sha256, the id the web chat sends
// (src/client.js). `chatgql documents load --webchat` loads them, for an allowlist server.
const { stringifyDocument } = await import("@urql/core");
const operations = await import("./src/operations.js");
const documents = { format: "apollo-persisted-query-manifest", version: 1, operations: [] };
for (const document of Object.values(operations)) {
  if (!document || document.kind !== "Document") continue;
  const operation = document.definitions.find((definition) => definition.kind === "OperationDefinition");
  const body = stringifyDocument(document);
  const id = createHash("sha256").update(body, "utf8").digest("hex");
  documents.operations.push({ id, name: operation.name?.value ?? null, type: operation.operation, body });
}
documents.operations.sort((a, b) => (a.name ?? "").localeCompare(b.name ?? ""));
writeFileSync(join(out, "documents.json"), JSON.stringify(documents, null, 2) + "\n");

const files = {};
for (const name of readdirSync(out).sort()) {
  if (name.endsWith(".js") || name.endsWith(".css")) files[name] = { sha256: sha256(join(out, name)) };
}
const manifest = { built_by: `esbuild ${version}`, development, files, inputs: inputs() };
writeFileSync(join(out, "manifest.json"), JSON.stringify(manifest, null, 2) + "\n");
console.log(`built ${Object.keys(files).join(", ")} into ${relative(process.cwd(), out)}`);
