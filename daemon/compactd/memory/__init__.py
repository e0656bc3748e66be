"""The memory flush that runs before a compaction: operator hooks, and durable memories appended to a file.

Nothing here may block or break a compaction. Hooks are fire-and-forget (a failure or a timeout is a warning),
and the built-in flush turns every error, an LLM outage included, into a :class:`FlushResult` with status
``failed``. The built-in flush writes to exactly one file, ``<workspace>/memory/YYYY-MM-DD.md`` (local
date), and only ever appends to it: the workspace is the agent's home, and AGENTS.md, MEMORY.md, SOUL.md and
their kind are the agent's own (design.md §6.10). The confinement is enforced with directory file
descriptors and ``O_NOFOLLOW``, so a symlink swapped in after a check still cannot redirect the write; as root
the write is made as the workspace's owner (:mod:`compactd.workspace`), so their permissions apply and the file
is theirs.

A facade over :mod:`._hooks` (before-compaction hooks), :mod:`._writer` (the confined append to the memory
file), :mod:`._flush` (the built-in flush) and :mod:`._step` (both, as an action of either session source runs
them), so ``from compactd.memory import ...`` keeps working.
"""

from __future__ import annotations

from compactd.memory._flush import (
    FLUSH_MAX_OUTPUT_TOKENS,
    FLUSH_OVERFLOW_RETRIES,
    FlushClient,
    FlushResult,
    FlushStatus,
    flush_memories,
    flush_prompts,
)
from compactd.memory._hooks import (
    HOOK_EVENT,
    HookResult,
    HookStatus,
    before_compaction_event,
    encode_event,
    run_hooks,
)
from compactd.memory._step import flush_span, start_hooks
from compactd.memory._writer import (
    FORBIDDEN_NAMES,
    MEMORY_DIR_NAME,
    MemoryWriteRefused,
    append_memory,
    append_memory_as_owner,
    local_date,
    memory_file_for,
)

__all__ = [
    "FLUSH_MAX_OUTPUT_TOKENS",
    "FLUSH_OVERFLOW_RETRIES",
    "FORBIDDEN_NAMES",
    "HOOK_EVENT",
    "MEMORY_DIR_NAME",
    "FlushClient",
    "FlushResult",
    "FlushStatus",
    "HookResult",
    "HookStatus",
    "MemoryWriteRefused",
    "append_memory",
    "append_memory_as_owner",
    "before_compaction_event",
    "encode_event",
    "flush_memories",
    "flush_prompts",
    "flush_span",
    "local_date",
    "memory_file_for",
    "run_hooks",
    "start_hooks",
]
