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

const files = {};
for (const name of readdirSync(out).sort()) {
  if (name.endsWith(".js") || name.endsWith(".css")) files[name] = { sha256: sha256(join(out, name)) };
}
const manifest = { built_by: `esbuild ${version}`, development, files, inputs: inputs() };
writeFileSync(join(out, "manifest.json"), JSON.stringify(manifest, null, 2) + "\n");
console.log(`built ${Object.keys(files).join(", ")} into ${relative(process.cwd(), out)}`);
