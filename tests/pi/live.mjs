// A pi SessionManager kept open on one file, driven over stdin/stdout JSON lines.
// Like a running pi, it reads the file once (SessionManager.open, at start) and then appends from its in-memory
// leaf whatever happened to the file meanwhile.
// argv[2]: the session file. First output line: {"ok": true, "session_id", "leaf_id", "entry_count"}.
// Requests (one JSON object a line), each answered with one line:
//   {"cmd": "append_exchange", "user", "assistant", "usage"?} -> {"ok", "user_id", "assistant_id"}
//   {"cmd": "append_message", "message"} -> {"ok", "id"} (one message, as pi's agent loop persists each one;
//     a missing timestamp is set to now)
//   {"cmd": "context"} -> {"ok", "leaf_id", "messages"} (pi's in-memory view, not re-read from disk)
//   {"cmd": "close"} -> {"ok"} and exit
// A failing request answers {"ok": false, "error"}.
import { createInterface } from "node:readline";
import { assistantMessage, emit, errorText, sessionManagerModule, userMessage } from "./_pi.mjs";

const sm = await sessionManagerModule();
let manager;
try {
  manager = sm.SessionManager.open(process.argv[2]);
} catch (error) {
  emit({ ok: false, error: errorText(error) });
  process.exit(1);
}
emit({
  ok: true,
  session_id: manager.getSessionId(),
  leaf_id: manager.getLeafId() ?? null,
  entry_count: manager.getEntries().length,
});

function handle(request) {
  switch (request.cmd) {
    case "append_exchange": {
      const user_id = manager.appendMessage(userMessage(request.user));
      const assistant_id = manager.appendMessage(assistantMessage(request.assistant, request.usage));
      return { ok: true, user_id, assistant_id };
    }
    case "append_message": {
      const message = { ...request.message };
      if (message.timestamp === undefined) message.timestamp = Date.now();
      return { ok: true, id: manager.appendMessage(message) };
    }
    case "context":
      return { ok: true, leaf_id: manager.getLeafId() ?? null, messages: manager.buildSessionContext().messages };
    default:
      throw new Error(`unknown command ${JSON.stringify(request.cmd)}`);
  }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let request;
  try {
    request = JSON.parse(line);
  } catch (error) {
    emit({ ok: false, error: errorText(error) });
    continue;
  }
  if (request.cmd === "close") {
    emit({ ok: true });
    break;
  }
  try {
    emit(handle(request));
  } catch (error) {
    emit({ ok: false, error: errorText(error) });
  }
}
lines.close();
