// compactd as OpenClaw's compaction provider (OpenClaw >= 2026.9).
//
// OpenClaw keeps choosing the cut, persisting and accounting; it asks this provider only for the summary
// text. summarize() pipes {messages, previousSummary, customInstructions} as JSON into
// `compactd summarize --json` and returns its {"summary"}. On any failure (the command missing or failing,
// bad JSON, a timeout, an abort) it returns nothing, and OpenClaw falls back to its built-in summarizer.
// A plain ES module with no build step and no SDK import.

import { spawn } from "node:child_process";
import { homedir } from "node:os";

const PLUGIN_ID = "compactd";
const DEFAULT_COMMAND = ["compactd", "summarize", "--json"];
const DEFAULT_TIMEOUT_SECONDS = 170; // under OpenClaw's own compaction timeout (180 s)
const STDERR_KEEP_CHARS = 2000;
const STDOUT_MAX_BYTES = 16 * 1024 * 1024;

function expandHome(path) {
  return path === "~" || path.startsWith("~/") ? homedir() + path.slice(1) : path;
}

function commandOf(config) {
  let argv = DEFAULT_COMMAND;
  if (typeof config.command === "string" && config.command.trim()) {
    argv = config.command.trim().split(/\s+/);
  } else if (Array.isArray(config.command) && config.command.length > 0) {
    argv = config.command.map(String);
  }
  argv = [...argv];
  if (typeof config.configPath === "string" && config.configPath) argv.push("--config", expandHome(config.configPath));
  if (typeof config.workspace === "string" && config.workspace) argv.push("--workspace", expandHome(config.workspace));
  return argv;
}

function timeoutOf(config) {
  const seconds = Number(config.timeoutSeconds);
  return Number.isFinite(seconds) && seconds > 0 ? seconds : DEFAULT_TIMEOUT_SECONDS;
}

// Runs the command once; resolves to the summary text, or undefined after logging why not.
export function runSummarize(config, request, signal, log) {
  const argv = commandOf(config);
  return new Promise((resolve) => {
    let settled = false;
    let child;
    let timer;
    const finish = (summary, why) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener?.("abort", onAbort);
      if (child && child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      if (why) log(`compactd summarize gave no summary (${why}); OpenClaw's own summarizer is used`);
      resolve(summary);
    };
    const onAbort = () => finish(undefined, "aborted");
    if (signal?.aborted) return finish(undefined, "aborted");
    try {
      child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "pipe"], env: process.env });
    } catch (err) {
      return finish(undefined, `cannot start ${argv[0]}: ${err?.message ?? err}`);
    }
    signal?.addEventListener?.("abort", onAbort, { once: true });
    timer = setTimeout(() => finish(undefined, `no answer within ${timeoutOf(config)} s`), timeoutOf(config) * 1000);
    const out = [];
    let outBytes = 0;
    let err = "";
    child.stdout.on("data", (chunk) => {
      outBytes += chunk.length;
      if (outBytes > STDOUT_MAX_BYTES) return finish(undefined, "answer too large");
      out.push(chunk);
    });
    child.stderr.on("data", (chunk) => {
      err = (err + chunk.toString("utf8")).slice(-STDERR_KEEP_CHARS);
    });
    child.on("error", (error) => finish(undefined, `cannot run ${argv[0]}: ${error?.message ?? error}`));
    child.on("close", (code, killedBy) => {
      if (code !== 0) return finish(undefined, `exit ${code ?? killedBy}: ${err.trim()}`);
      let answer;
      try {
        answer = JSON.parse(Buffer.concat(out).toString("utf8"));
      } catch (error) {
        return finish(undefined, `bad JSON: ${error?.message ?? error}`);
      }
      const summary = answer && typeof answer.summary === "string" ? answer.summary : "";
      if (!summary.trim()) return finish(undefined, "empty summary");
      finish(summary);
    });
    child.stdin.on("error", () => {}); // a child that exits early: its exit code tells why
    child.stdin.end(JSON.stringify(request));
  });
}

export default {
  id: PLUGIN_ID,
  name: "compactd",
  description: "Compaction summaries from compactd (identifiers repaired, digest fallback, workspace rules)",
  register(api) {
    const config = api.pluginConfig && typeof api.pluginConfig === "object" ? api.pluginConfig : {};
    const log = (message) => (api.logger?.warn ?? console.warn)(message);
    api.registerCompactionProvider({
      id: PLUGIN_ID,
      label: "compactd",
      async summarize({ messages, previousSummary, customInstructions, signal }) {
        try {
          const request = { messages, previousSummary: previousSummary ?? null, customInstructions: customInstructions ?? null };
          return await runSummarize(config, request, signal, log);
        } catch (error) {
          log(`compactd summarize failed: ${error?.message ?? error}`);
          return undefined;
        }
      },
    });
  },
};
