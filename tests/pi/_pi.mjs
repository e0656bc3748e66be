// Shared helpers for the node scripts that drive pi's real SessionManager (tests/support/pi.py runs them).
// PI_PACKAGE_DIR points at the pinned install's node_modules/@mariozechner/pi-coding-agent (0.73) or
// node_modules/@earendil-works/pi-coding-agent (1.x).
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { existsSync, realpathSync } from "node:fs";
import { pathToFileURL } from "node:url";

const packageDir = process.env.PI_PACKAGE_DIR;
if (!packageDir) {
  throw new Error("PI_PACKAGE_DIR is not set");
}

function moduleUrl(relative) {
  return pathToFileURL(join(packageDir, relative)).href;
}

/** pi's session-manager.js (SessionManager, loadEntriesFromFile, findMostRecentSession, ...). */
export async function sessionManagerModule() {
  return import(moduleUrl("dist/core/session-manager.js"));
}

/** pi's compaction.js; the package's exports map does not list it, so it is imported by file URL. */
export async function compactionModule() {
  return import(moduleUrl("dist/core/compaction/compaction.js"));
}

/** pi-ai's transcript helpers (getCurrentSystemMessage, getCurrentTools) beside pi 1.x, or null (pi 0.73). */
export async function transcriptModule() {
  for (const relative of ["../pi-ai/dist/utils/transcript.js", "node_modules/@earendil-works/pi-ai/dist/utils/transcript.js"]) {
    const path = join(packageDir, relative);
    if (existsSync(path)) return import(pathToFileURL(path).href);
  }
  return null;
}

/** Whether the module at `url` is the script node was started with (not imported by another one). */
export function isMain(url) {
  return process.argv[1] !== undefined && url === pathToFileURL(realpathSync(process.argv[1])).href;
}

/** The whole of stdin, parsed as one JSON value. */
export async function readStdinJson() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

/** JSON.stringify escapes lone surrogates (well-formed JSON) and writes astral characters raw, as UTF-8. */
export function emit(value) {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

export function errorText(error) {
  return String((error && error.stack) || error);
}

const ZERO_COST = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 };
const DEFAULT_USAGE = { input: 100, output: 20, cacheRead: 0, cacheWrite: 0, totalTokens: 120, cost: ZERO_COST };

export function userMessage(text, timestamp = Date.now()) {
  return { role: "user", content: [{ type: "text", text }], timestamp };
}

/** An assistant reply shaped like pi-ai's AssistantMessage (usage fields given override the defaults). */
export function assistantMessage(text, usage, timestamp = Date.now()) {
  return {
    role: "assistant",
    content: [{ type: "text", text }],
    api: "anthropic-messages",
    provider: "anthropic",
    model: "claude-sonnet-4-5",
    usage: { ...DEFAULT_USAGE, ...(usage || {}) },
    stopReason: "stop",
    timestamp,
  };
}

/** A fresh 8-hex id not in `taken`, as pi's generateId does. */
export function freshId(taken) {
  for (let i = 0; i < 100; i++) {
    const id = randomUUID().slice(0, 8);
    if (!taken.has(id)) return id;
  }
  return randomUUID();
}
