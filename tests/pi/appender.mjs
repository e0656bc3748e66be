// Append numbered pi `message` entries to a path exactly as pi persists them: one
// appendFileSync(path, JSON.stringify(entry) + "\n") per entry (open O_APPEND, write, close; no lock, no fsync).
// stdin: {"path", "count", "start_seq", "pause_every", "pause_ms"}.
// Entry i carries text "seq <start_seq + i>", user for even i and assistant for odd i, a fresh unique 8-hex id,
// and parentId chained from the previous entry; the first one's parent is the file's leaf as pi would load it.
// stdout: {"started": true, "leaf_id"} once the leaf is read, then {"done": true, "written": [[seq, id], ...]}.
import { appendFileSync, existsSync } from "node:fs";
import {
  assistantMessage,
  emit,
  errorText,
  freshId,
  readStdinJson,
  sessionManagerModule,
  userMessage,
} from "./_pi.mjs";

const sm = await sessionManagerModule();
const { path, count, start_seq: startSeq = 0, pause_every: pauseEvery = 0, pause_ms: pauseMs = 1 } =
  await readStdinJson();

const taken = new Set();
let leafId = null;
if (existsSync(path)) {
  for (const entry of sm.loadEntriesFromFile(path)) {
    if (!entry || entry.type === "session") continue;
    if (typeof entry.id === "string") taken.add(entry.id);
    leafId = entry.id ?? null;
  }
}
emit({ started: true, leaf_id: leafId });

const sleeper = new Int32Array(new SharedArrayBuffer(4));
const written = [];
try {
  let parentId = leafId;
  for (let i = 0; i < count; i++) {
    const seq = startSeq + i;
    const id = freshId(taken);
    taken.add(id);
    const text = `seq ${seq}`;
    const message = i % 2 === 0 ? userMessage(text) : assistantMessage(text, { input: 10, output: 5, totalTokens: 15 });
    const entry = { type: "message", id, parentId, timestamp: new Date().toISOString(), message };
    appendFileSync(path, `${JSON.stringify(entry)}\n`);
    written.push([seq, id]);
    parentId = id;
    if (pauseEvery > 0 && (i + 1) % pauseEvery === 0) Atomics.wait(sleeper, 0, 0, pauseMs);
  }
  emit({ done: true, written });
} catch (error) {
  emit({ done: false, written, error: errorText(error) });
  process.exitCode = 1;
}
