// Load session files with pi's SessionManager.open, as `pi --session FILE` would, and report what pi sees.
// stdin: {"paths": [...]} (each a throw-away copy alone in its own directory: pi may rewrite or wipe it).
// stdout: one JSON array, one object per path (or {"path", "error"} when pi throws).
// Imported (by server.mjs), it runs nothing and exports loadPaths.
import { readFileSync, existsSync } from "node:fs";
import { dirname, resolve } from "node:path";
import {
  compactionModule,
  emit,
  errorText,
  isMain,
  readStdinJson,
  sessionManagerModule,
  transcriptModule,
} from "./_pi.mjs";

const sm = await sessionManagerModule();
const compaction = await compactionModule();
const transcript = await transcriptModule(); // null before pi 1.x

// pi's JSON.parse reads any depth, but JSON.stringify (and Python's json module) stop after a few thousand
// levels: in a value nested deeper than this, each part at this depth is replaced by {"$deep": its JSON text},
// written without recursion (Python's side does the same to our value before comparing).
const CLIP_DEPTH = 64;

function depthOf(value) {
  let deepest = 0;
  const stack = [[value, 1]];
  while (stack.length) {
    const [item, depth] = stack.pop();
    if (item === null || typeof item !== "object") continue;
    deepest = Math.max(deepest, depth);
    for (const child of Object.values(item)) stack.push([child, depth + 1]);
  }
  return deepest;
}

function stringifyDeep(value) {
  const parts = [];
  const work = [{ value }];
  while (work.length) {
    const item = work.pop();
    if ("raw" in item) {
      parts.push(item.raw);
      continue;
    }
    const v = item.value;
    if (v === null || typeof v !== "object") {
      parts.push(JSON.stringify(v) ?? "null");
    } else if (Array.isArray(v)) {
      work.push({ raw: "]" });
      for (let i = v.length - 1; i >= 0; i--) {
        const x = v[i];
        work.push(x === undefined || typeof x === "function" || typeof x === "symbol" ? { raw: "null" } : { value: x });
        if (i) work.push({ raw: "," });
      }
      parts.push("[");
    } else {
      const keys = Object.keys(v).filter((k) => {
        const x = v[k];
        return x !== undefined && typeof x !== "function" && typeof x !== "symbol";
      });
      work.push({ raw: "}" });
      for (let i = keys.length - 1; i >= 0; i--) {
        work.push({ value: v[keys[i]] });
        work.push({ raw: `${i ? "," : ""}${JSON.stringify(keys[i])}:` });
      }
      parts.push("{");
    }
  }
  return parts.join("");
}

function clip(value, depth = 0) {
  if (value === null || typeof value !== "object") return value;
  if (depth >= CLIP_DEPTH) return { $deep: stringifyDeep(value) };
  if (Array.isArray(value)) return value.map((v) => clip(v, depth + 1));
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, clip(v, depth + 1)]));
}

const clipDeep = (value) => (depthOf(value) > CLIP_DEPTH ? clip(value) : value);

function loadOne(path) {
  const before = existsSync(path) ? readFileSync(path) : null;
  // What `pi -c` (continueRecent) would pick in this directory: it parses only the raw first 512 bytes.
  const recent = sm.findMostRecentSession(dirname(path));
  const resumable = recent !== null && resolve(recent) === resolve(path);
  // setSessionFile wipes the file (fresh header, same path) exactly when this comes back empty.
  const wiped = before !== null && sm.loadEntriesFromFile(path).length === 0;
  const manager = sm.SessionManager.open(path);
  const context = manager.buildSessionContext();
  const after = readFileSync(path);
  const result = {
    path,
    session_id: manager.getSessionId(),
    header: manager.getHeader(),
    leaf_id: manager.getLeafId() ?? null,
    entry_count: manager.getEntries().length,
    messages: context.messages,
    thinking_level: context.thinkingLevel,
    model: context.model,
    branch_ids: manager.getBranch().map((e) => e.id ?? null),
    rewritten: before === null || !before.equals(after),
    wiped,
    resumable,
  };
  try {
    result.estimate = compaction.estimateContextTokens(context.messages);
    result.message_tokens = context.messages.map((m) => compaction.estimateTokens(m));
    if (typeof manager.buildSessionProjection === "function") {
      // pi 1.x: what its auto-compaction compares with its threshold, and what agent-session restores.
      const branch = manager.getBranch();
      result.projected_estimate = compaction.estimateProjectedContextTokens(manager.buildSessionProjection(), branch);
      const systemMessages = branch.flatMap((e) => (e.type === "message" && e.message?.role === "system" ? [e.message] : []));
      result.tools = transcript.getCurrentTools(systemMessages).map((tool) => tool.name);
      result.system_prompt = clipDeep(transcript.getCurrentSystemMessage(context.messages) ?? null);
    }
  } catch (error) {
    result.estimate = null;
    result.estimate_error = errorText(error);
  }
  result.messages = result.messages.map(clipDeep);
  result.header = clipDeep(result.header);
  return result;
}

/** What pi makes of each path: one result object per path, in order. */
export function loadPaths(paths) {
  const results = [];
  for (const path of paths) {
    try {
      results.push(loadOne(path));
    } catch (error) {
      results.push({ path, error: errorText(error) });
    }
  }
  return results;
}

if (isMain(import.meta.url)) {
  const { paths } = await readStdinJson();
  emit(loadPaths(paths));
}
