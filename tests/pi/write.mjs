// Write sessions with pi's own SessionManager from lists of operations.
// stdin: {"specs": [{"dir", "cwd", "open"?, "ops": [...]}, ...]}; stdout: JSON array of
// {"path", "session_id", "ids": [id or null per op], "exists"} (or {"error"}).
//
// Each op is {"op": NAME, ...arguments}. A `target` or `firstKeptEntryId` given as an integer refers to the
// entry produced by that earlier op (index into ops); a string is used literally; null is null.
//   appendMessage {message}            appendModelChange {provider, modelId}
//   appendThinkingLevelChange {thinkingLevel}
//   appendCompaction {summary, firstKeptEntryId, tokensBefore, details?, fromHook?}
//   appendCustomEntry {customType, data?}
//   appendCustomMessageEntry {customType, content, display, details?}
//   appendLabelChange {target, label?}  appendSessionInfo {name}
//   branch {target}                     resetLeaf {}
//   branchWithSummary {target, summary, details?, fromHook?}
// pi 1.x only:
//   appendContextEdit {target, replacement}  (replacement null omits the target's content)
//   appendUsage {kind, provider, model, usage, note?}
//   appendCompaction with firstKeptEntryId null is a retain-none compaction (1.x records its own id).
// With "open": an existing file is opened with SessionManager.open instead of creating a new session.
// pi writes nothing until the session holds an assistant message (1.x: a user message), so "exists" may be false.
// Imported (by server.mjs), it runs nothing and exports writeSpecs.
import { existsSync } from "node:fs";
import { emit, errorText, isMain, readStdinJson, sessionManagerModule } from "./_pi.mjs";

const sm = await sessionManagerModule();

function resolveRef(ref, ids, index) {
  if (typeof ref === "number") {
    if (ref < 0 || ref >= index || ids[ref] == null) {
      throw new Error(`op ${index}: reference ${ref} is not an earlier op that produced an entry`);
    }
    return ids[ref];
  }
  return ref;
}

function runOp(manager, op, ids, index) {
  switch (op.op) {
    case "appendMessage":
      return manager.appendMessage(op.message);
    case "appendModelChange":
      return manager.appendModelChange(op.provider, op.modelId);
    case "appendThinkingLevelChange":
      return manager.appendThinkingLevelChange(op.thinkingLevel);
    case "appendCompaction":
      return manager.appendCompaction(
        op.summary,
        resolveRef(op.firstKeptEntryId, ids, index),
        op.tokensBefore,
        op.details,
        op.fromHook,
      );
    case "appendCustomEntry":
      return manager.appendCustomEntry(op.customType, op.data);
    case "appendCustomMessageEntry":
      return manager.appendCustomMessageEntry(op.customType, op.content, op.display, op.details);
    case "appendLabelChange":
      return manager.appendLabelChange(resolveRef(op.target, ids, index), op.label);
    case "appendContextEdit":
      return manager.appendContextEdit(resolveRef(op.target, ids, index), op.replacement);
    case "appendUsage":
      return manager.appendUsage(op.kind, op.provider, op.model, op.usage, op.note).id;
    case "appendSessionInfo":
      return manager.appendSessionInfo(op.name);
    case "branch":
      manager.branch(resolveRef(op.target, ids, index));
      return null;
    case "resetLeaf":
      manager.resetLeaf();
      return null;
    case "branchWithSummary":
      return manager.branchWithSummary(
        resolveRef(op.target, ids, index),
        op.summary,
        op.details,
        op.fromHook,
      );
    default:
      throw new Error(`op ${index}: unknown operation ${JSON.stringify(op.op)}`);
  }
}

function writeOne(spec) {
  const manager = spec.open
    ? sm.SessionManager.open(spec.open)
    : sm.SessionManager.create(spec.cwd ?? spec.dir, spec.dir);
  const ids = [];
  spec.ops.forEach((op, index) => {
    ids.push(runOp(manager, op, ids, index) ?? null);
  });
  const path = manager.getSessionFile();
  return { path, session_id: manager.getSessionId(), ids, leaf_id: manager.getLeafId() ?? null, exists: existsSync(path) };
}

/** Each spec written by pi: one result object per spec, in order. */
export function writeSpecs(specs) {
  const results = [];
  for (const spec of specs) {
    try {
      results.push(writeOne(spec));
    } catch (error) {
      results.push({ error: errorText(error) });
    }
  }
  return results;
}

if (isMain(import.meta.url)) {
  const { specs } = await readStdinJson();
  emit(writeSpecs(specs));
}
