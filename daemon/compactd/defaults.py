"""Every configurable default, in one place, with the reason for its value.

The values come from the seed design and OpenClaw 2026.5.6 (design.md §6); where we chose
differently the comment says why. Algorithm constants that are not configurable live beside their algorithm.
"""

from __future__ import annotations

__all__ = [
    "ABANDONED_TURN_SECONDS",
    "ARCHIVE_KEEP_COUNT",
    "ARCHIVE_KEEP_DAYS",
    "ARCHIVE_WARN_BYTES",
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_MAX_SECONDS",
    "CHARS_PER_TOKEN",
    "COMMIT_MODE",
    "DEFAULT_CONTEXT_TOKENS",
    "GUARD_HARD_MIN_TOKENS",
    "GUARD_WARN_BELOW_TOKENS",
    "IDENTIFIER_CAP",
    "IDENTIFIER_POLICY",
    "IDLE_SECONDS",
    "KEEP_RECENT_TOKENS",
    "KEEP_RECENT_TURNS",
    "LOCK_STALE_SECONDS",
    "MAX_COLD_READ_BYTES",
    "MAX_COLD_READ_LINES",
    "MAX_KEEP_RECENT_TURNS",
    "MEMORY_FLUSH_ENABLED",
    "MEMORY_FLUSH_FORCE_BYTES",
    "MEMORY_FLUSH_SOFT_THRESHOLD_TOKENS",
    "MEMORY_HOOK_TIMEOUT_SECONDS",
    "METRICS_TOP_SESSIONS",
    "MIN_PROMPT_BUDGET_RATIO",
    "MIN_PROMPT_BUDGET_TOKENS",
    "POST_COMPACTION_MAX_CHARS",
    "POST_COMPACTION_SECTIONS",
    "PREPARE_AS_READ",
    "QUALITY_GUARD_ENABLED",
    "QUALITY_GUARD_MAX_RETRIES",
    "QUALITY_GUARD_RETRIES",
    "REDACT_SECRETS",
    "RESCAN_SECONDS",
    "RESERVE_TOKENS",
    "ROTATE_GRACE_SECONDS",
    "SAFETY_MARGIN",
    "SESSION_ROOTS",
    "STATUS_REFRESH_SECONDS",
    "SUMMARIZER_CONTEXT_TOKENS",
    "SUMMARIZER_FALLBACK",
    "SUMMARIZER_MAX_CONCURRENCY",
    "SUMMARIZER_MAX_OUTPUT_TOKENS",
    "SUMMARIZER_RETRY_ATTEMPTS",
    "SUMMARIZER_RETRY_BASE_SECONDS",
    "SUMMARIZER_RETRY_JITTER",
    "SUMMARIZER_RETRY_MAX_SECONDS",
    "SUMMARIZER_TIMEOUT_SECONDS",
    "SUMMARIZER_TOOL_RESULT_MAX_CHARS",
    "SUMMARY_MAX_CHARS",
    "TARGET_FILL",
    "TOOL_RESULT_CONTEXT_SHARE",
    "TOOL_RESULT_MAX_CHARS",
    "TOOL_RESULT_MIN_KEEP_CHARS",
    "WATCH_DEBOUNCE_MS",
    "WATCH_STEP_MS",
]

# --- token accounting -------------------------------------------------------------------------------------
# Estimates (chars/4) are compared against hard limits only after this margin: chars/4 under-counts code, CJK
# and JSON, and an under-estimate is the failure that loses a turn (seed SAFETY_MARGIN, design.md §6.1).
SAFETY_MARGIN = 1.2
# pi's estimateTokens divisor: the ledger must equal pi's own figure, so this is not tunable.
CHARS_PER_TOKEN = 4

# --- reading ----------------------------------------------------------------------------------------------
# A whole transcript is read (the cold read: first sight, a rewrite, an append the ledger cannot fold in) only
# up to these sizes; a larger one is skipped with the reason. The cold read keeps ~1.3 KB per line besides the
# bytes, so the memory one user's file can make root's daemon take stays about 128 MiB + 130 MB.
MAX_COLD_READ_BYTES = 128 * 1024 * 1024
MAX_COLD_READ_LINES = 100_000
# ``once --dry-run`` keeps the discovery's reading of due sessions for their actions (each file parsed once) up
# to these many bytes of files in all (as much as one cold read may take: about 1.1 times that in memory); the
# ones past it are read again when acted on. Each due session is acted on right after its reading (one held
# at a time), so this bounds a reading kept longer, should one be.
DRY_RUN_KEPT_BYTES = 128 * 1024 * 1024

# --- context window ---------------------------------------------------------------------------------------
# When neither the config nor the transcript names a window, assume the common frontier size (design.md §6.2).
DEFAULT_CONTEXT_TOKENS = 200_000
# Below this a session cannot hold a prompt plus a reply: skip it with a warning instead of compacting forever.
GUARD_HARD_MIN_TOKENS = 16_000
# Below this compaction will fire often; warn once so the operator can pick a larger model.
GUARD_WARN_BELOW_TOKENS = 32_000

# --- compaction budget ------------------------------------------------------------------------------------
# Headroom kept free for the next reply and tool output (OpenClaw raises pi's 16,384 to this floor).
RESERVE_TOKENS = 20_000
# The prompt always keeps at least min(8,000, window × 0.5) tokens, so a 16k Ollama model keeps 8,000 tokens
# of prompt instead of compacting in a loop (design.md §6.3).
MIN_PROMPT_BUDGET_TOKENS = 8_000
MIN_PROMPT_BUDGET_RATIO = 0.5
# pi's own keep-recent bound: the tail kept verbatim is at most about this many tokens.
KEEP_RECENT_TOKENS = 20_000
# Recent turns kept verbatim (seed; OpenClaw recentTurnsPreserve allows 0-12).
KEEP_RECENT_TURNS = 3
# After a compaction the session fills at most this share of its threshold (the rest is room to work).
TARGET_FILL = 0.6
MAX_KEEP_RECENT_TURNS = 12
# How the result is committed: a rotation survives an agent that keeps appending from its in-memory leaf.
COMMIT_MODE = "rotate"
# A session is touched only after this much quiet, so a live agent's file is never rewritten under it.
IDLE_SECONDS = 30.0
# ... but quiet is not idle: a session whose branch ends mid-turn (a user message or tool calls awaiting the
# model) is left alone whatever its quiet time, until the turn ends or nothing has been written for this long
# (an abandoned turn: the agent died mid-turn). 15 minutes outlasts a slow local model's reply.
ABANDONED_TURN_SECONDS = 900.0
# A session its agent is at work on (a file locked or being written, an OpenClaw run in progress) is looked at
# again after this long, or after the idle time if that is longer; not counted as a failure.
BUSY_RETRY_SECONDS = 10.0
# One OpenClaw gateway RPC, connect to answer: a compaction's summary may take the gateway's 180 s and more.
OPENCLAW_RPC_TIMEOUT_SECONDS = 240.0
# Archives (``*.jsonl.bak.<ts>``) are the only copy of the lines a rotation summarized: they are removed by age
# only. A count cap (0 = none) is opt-in: 30 compactions of a busy session in an hour would otherwise delete
# thousands of lines that exist nowhere else within that hour.
ARCHIVE_KEEP_DAYS = 30.0
ARCHIVE_KEEP_COUNT = 0
# ``compactd doctor`` warns when all archives together take more than this (or 10 % of their filesystem).
ARCHIVE_WARN_BYTES = 1 << 30

# --- tool results -----------------------------------------------------------------------------------------
# One tool result may take at most this share of the window (design.md §6.5) ...
TOOL_RESULT_CONTEXT_SHARE = 0.3
# ... and never more than this many characters, whatever the window.
TOOL_RESULT_MAX_CHARS = 16_000
# Truncation keeps at least this much of a result so it stays useful (design.md §6.5).
TOOL_RESULT_MIN_KEEP_CHARS = 2_000
# What a summarizer reads of one tool result: pi truncates each to this in its summarization input
# (pi: "tool results truncated to 2000 chars", design.md §6.5). Not the cap above, which is what a result
# keeps in the agent's context (OpenClaw's 16,000): two limits of two readers, each named once, here.
SUMMARIZER_TOOL_RESULT_MAX_CHARS = 2_000

# --- summary ----------------------------------------------------------------------------------------------
# "strict": every identifier kept literally (the most common complaint about peers' summaries).
IDENTIFIER_POLICY = "strict"
# Identifiers ranked and guaranteed in the summary; those the user or the agent wrote are never dropped by the
# cap (it is cut from tool-call arguments and tool output, tool output first).
IDENTIFIER_CAP = 64
QUALITY_GUARD_ENABLED = True
QUALITY_GUARD_RETRIES = 1
QUALITY_GUARD_MAX_RETRIES = 3
# The committed summary (body + augmentation) is capped here, keeping the suffix (design.md §6.8).
SUMMARY_MAX_CHARS = 16_000
# Secrets are redacted before anything is sent to a model.
REDACT_SECRETS = True
# Each appended message redacted and its identifiers extracted as the daemon reads it (issue 22).
PREPARE_AS_READ = True

# --- AGENTS.md re-injection -------------------------------------------------------------------------------
POST_COMPACTION_SECTIONS = ("Session Startup", "Red Lines")
POST_COMPACTION_MAX_CHARS = 1_800

# --- memory flush -----------------------------------------------------------------------------------------
MEMORY_FLUSH_ENABLED = True
# Flush this many tokens before the compaction threshold, so memories are saved before history is summarized.
MEMORY_FLUSH_SOFT_THRESHOLD_TOKENS = 4_000
# A transcript this large is flushed whatever its token estimate (OpenClaw forceFlushTranscriptBytes).
MEMORY_FLUSH_FORCE_BYTES = 2 * 1024 * 1024
MEMORY_HOOK_TIMEOUT_SECONDS = 30.0

# --- summarizer endpoint ----------------------------------------------------------------------------------
# A small local summarizer often has much less room than the agent's model; chunks are sized to this.
SUMMARIZER_CONTEXT_TOKENS = 32_768
# Local CPU servers can take minutes on long prompts.
SUMMARIZER_TIMEOUT_SECONDS = 300.0
# A local Ollama serves one request at a time; parallel calls only time out together.
SUMMARIZER_MAX_CONCURRENCY = 1
SUMMARIZER_MAX_OUTPUT_TOKENS = 4_096
SUMMARIZER_RETRY_ATTEMPTS = 3
SUMMARIZER_RETRY_BASE_SECONDS = 0.5
SUMMARIZER_RETRY_MAX_SECONDS = 5.0
SUMMARIZER_RETRY_JITTER = 0.2

# --- service ----------------------------------------------------------------------------------------------
SESSION_ROOTS = ("~/.openclaw/agents/*/sessions", "~/.pi/agent/sessions/*")
# A full rescan catches what inotify drops silently (queue overflow).
RESCAN_SECONDS = 60.0
# watchfiles' defaults give ~820 ms append→ledger. Each step wakes the watcher thread: step 10 gave a median
# of 33 ms but 1.04 % of a core while idle over 1,000 sessions; step 15 gives 41 ms (p99 80) at 0.80 %
# (bench/bench_service.py), inside both targets (≤ 50 ms median, < 1 % idle).
WATCH_DEBOUNCE_MS = 50
WATCH_STEP_MS = 15
STATUS_REFRESH_SECONDS = 5.0
# When the model fails, the digest is committed instead ("none": nothing is, the session backs off).
SUMMARIZER_FALLBACK = "digest"
# The per-session metric series written (the fullest sessions); the rest count in the totals only.
METRICS_TOP_SESSIONS = 50
# Back-off after a failed or ineffective compaction: doubles from the base up to the cap.
BACKOFF_BASE_SECONDS = 60.0
BACKOFF_MAX_SECONDS = 6 * 3600.0
# OpenClaw reclaims a session lock older than this (design.md §6.12).
LOCK_STALE_SECONDS = 30 * 60.0
# After a rotation the old inode is read this long for late appends (design.md §7.1: ≥ 250 ms).
ROTATE_GRACE_SECONDS = 0.5
