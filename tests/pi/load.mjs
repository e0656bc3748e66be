// Load session files with pi's SessionManager.open, as `pi --session FILE` would, and report what pi sees.
// stdin: {"paths": [...]} (each a throw-away copy alone in its own directory: pi may rewrite or wipe it).
// stdout: one JSON array, one object per path (or {"path", "error"} when pi throws).
import { readFileSync, existsSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { compactionModule, emit, errorText, readStdinJson, sessionManagerModule } from "./_pi.mjs";

const sm = await sessionManagerModule();
const compaction = await compactionModule();
const { paths } = await readStdinJson();

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
  } catch (error) {
    result.estimate = null;
    result.estimate_error = errorText(error);
  }
  return result;
}

const results = [];
for (const path of paths) {
  try {
    results.push(loadOne(path));
  } catch (error) {
    results.push({ path, error: errorText(error) });
  }
}
emit(results);
