// load.mjs, write.mjs and a one-shot append exchange served by one long-lived node process, so that a test
// pays node's start-up and pi's module loading (most of a judgement's cost) once per pytest run, not per call.
// The work per request is exactly the scripts' own (loadPaths, writeSpecs; the exchange is live.mjs's
// open + append_exchange); tests/support/pi.py restarts the process when it dies or times out.
// Requests (one JSON object a line), each answered with one line {"ok": true, "result"} or {"ok": false, "error"}:
//   {"cmd": "load", "cwd", "payload": {"paths"}}      -> result: load.mjs's output
//   {"cmd": "write", "cwd", "payload": {"specs"}}     -> result: write.mjs's output
//   {"cmd": "exchange", "cwd", "path", "user", "assistant", "usage"?} -> result: {"user_id", "assistant_id"}
// `cwd` is the caller's working directory, which pi reads for a header without one (a script would inherit it).
import { createInterface } from "node:readline";
import { assistantMessage, emit, errorText, sessionManagerModule, userMessage } from "./_pi.mjs";
import { loadPaths } from "./load.mjs";
import { writeSpecs } from "./write.mjs";

const sm = await sessionManagerModule();

function handle(request) {
  if (request.cwd && request.cwd !== process.cwd()) process.chdir(request.cwd);
  switch (request.cmd) {
    case "load":
      return loadPaths(request.payload.paths);
    case "write":
      return writeSpecs(request.payload.specs);
    case "exchange": {
      const manager = sm.SessionManager.open(request.path);
      const user_id = manager.appendMessage(userMessage(request.user));
      const assistant_id = manager.appendMessage(assistantMessage(request.assistant, request.usage));
      return { user_id, assistant_id };
    }
    default:
      throw new Error(`unknown command ${JSON.stringify(request.cmd)}`);
  }
}

emit({ ok: true, ready: true });
const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  try {
    emit({ ok: true, result: handle(JSON.parse(line)) });
  } catch (error) {
    emit({ ok: false, error: errorText(error) });
  }
}
