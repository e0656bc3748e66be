"""The flush step of an action, one for both session sources (the file tailer's and OpenClaw's): the
before-compaction hooks started fire-and-forget, then the built-in flush of the span about to be summarized,
each counted in the metrics and logged under the session's name."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from compactd.memory._flush import FlushClient, flush_memories
from compactd.memory._hooks import before_compaction_event, run_hooks

if TYPE_CHECKING:
    import anyio.abc

    from compactd.config import Config
    from compactd.core.messages import Message
    from compactd.state import Metrics
    from compactd.workspace import Workspace

log = logging.getLogger(__name__)


async def start_hooks(
    config: Config,
    metrics: Metrics,
    task_group: anyio.abc.TaskGroup | None,
    *,
    session_file: str,
    session_id: str | None,
    tokens: int,
    context_window: int,
    flush_threshold: int,
    compact_threshold: int,
    memory_dir: str | os.PathLike[str] | None,
) -> None:
    """The configured hooks, in ``task_group`` (the service's) when there is one, else awaited here; a hook
    can neither block nor break the compaction."""
    hooks = config.memory_flush.hooks
    if not hooks:
        return
    event = before_compaction_event(
        session_id=session_id,
        session_file=session_file,
        tokens=tokens,
        context_window=context_window,
        flush_threshold=flush_threshold,
        compact_threshold=compact_threshold,
        memory_dir=memory_dir,
    )

    async def run() -> None:
        try:
            for result in await run_hooks(hooks, event):
                metrics.record_hook(result.status)
        except Exception:  # run in the service's task group: an escape would stop the service
            log.exception("session=%s action=hooks_failed", session_file)

    if task_group is not None:
        task_group.start_soon(run)
    else:
        await run()


async def flush_span(
    config: Config,
    metrics: Metrics,
    client: FlushClient | None,
    messages: Sequence[Message],
    *,
    workspace: Path | Workspace,
    session_file: str,
    session_id: str | None,
) -> None:
    """The built-in flush of ``messages`` into ``workspace``'s memory file, as configured; never raises."""
    result = await flush_memories(
        client,
        messages,
        workspace=workspace,
        session_id=session_id,
        now=datetime.now().astimezone(),
        redact=config.compaction.redact_secrets,
        prompt=config.memory_flush.prompt,
        system_prompt=config.memory_flush.system_prompt,
    )
    metrics.record_flush(result.status)
    if result.latency_s is not None:
        metrics.observe_summarizer_latency(result.latency_s, purpose="memory_flush")
    log.info("session=%s action=memory_flush status=%s file=%s", session_file, result.status, result.path)
