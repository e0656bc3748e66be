"""Codex's own compactions, served from its hooks (design.md §6.16).

- ``compactd hook codex-precompact``: Codex runs its ``PreCompact`` hook commands with one JSON object on stdin
  (``session_id``, ``turn_id``, ``transcript_path``, ``cwd``, ``hook_event_name``, ``model``, ``trigger``) before
  it compacts a thread itself; compactd flushes the thread's durable facts to the workspace's memory file then.
  The transcript path is a claim: only a rollout under ``$CODEX_HOME/sessions`` (no symlink) is read, and the
  workspace follows the trust rule of :mod:`compactd.workspace`. The hook never blocks Codex: it exits 0.
- :data:`COMPACT_PROMPT`: a ``compact_prompt`` for Codex's ``experimental_compact_prompt_file`` asking for the
  headings compactd's own summaries carry, so both kinds of compaction leave the same structure.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from compactd.commit.durable import write_atomic
from compactd.config import Config
from compactd.sources.codex._files import codex_home, thread_id_of
from compactd.summarize.prompts import STRUCTURE_INSTRUCTIONS, UNRESOLVED_ASKS_INSTRUCTION

__all__ = ["COMPACT_PROMPT", "HookRefused", "install_compact_prompt", "precompact"]

log = logging.getLogger(__name__)

COMPACT_PROMPT = (
    "You are compacting this conversation so that work can continue from your summary alone: the earlier "
    "messages will be replaced by it. Keep everything needed to go on without redoing finished work.\n\n"
    + STRUCTURE_INSTRUCTIONS
    + "\n\n"
    + UNRESOLVED_ASKS_INSTRUCTION
    + "\n"
)
PROMPT_FILE_NAME = "compactd-compact-prompt.md"
STDIN_MAX_BYTES = 1 << 20


class HookRefused(Exception):
    """The hook's input names nothing compactd may read."""


def _rollout_path(payload: Mapping[str, Any], home: str) -> str:
    claimed = payload.get("transcript_path")
    if not isinstance(claimed, str) or not claimed:
        raise HookRefused("no transcript_path in the hook input")
    sessions = os.path.join(os.path.abspath(home), "sessions")
    path = os.path.abspath(claimed)
    inside = os.path.relpath(path, sessions)
    # The home itself may lie behind a symlink (``/home`` → ``/usr/home``); nothing below ``sessions`` may.
    if inside.startswith(os.pardir) or os.path.realpath(path) != os.path.join(
        os.path.realpath(sessions), inside
    ):
        raise HookRefused(f"{claimed} is not a rollout under {sessions} (reached without symlinks)")
    if thread_id_of(path) is None:
        raise HookRefused(f"{claimed} is not named like a Codex rollout")
    session = payload.get("session_id")
    if isinstance(session, str) and thread_id_of(path) != session.lower():
        raise HookRefused(f"{claimed} is not the rollout of session {session}")
    return path


async def precompact(config: Config, env: Mapping[str, str], raw: bytes) -> dict[str, Any]:
    """Flush the memories of the rollout a ``PreCompact`` hook input names; returns what was done."""
    from compactd.core.messages import llm_visible
    from compactd.memory import flush_span
    from compactd.sources.codex._compact import read_rollout
    from compactd.state import Metrics
    from compactd.summarize.settings import make_client
    from compactd.workspace import trusted_workspace

    if len(raw) > STDIN_MAX_BYTES:
        raise HookRefused(f"hook input larger than {STDIN_MAX_BYTES} bytes")
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise HookRefused(f"hook input is not JSON: {exc}") from None
    if not isinstance(payload, dict) or payload.get("hook_event_name") not in (None, "PreCompact"):
        raise HookRefused("not a PreCompact hook input")
    path = _rollout_path(payload, codex_home(env, config.codex.home))
    reading = read_rollout(path)
    workspace = trusted_workspace(config, path, reading.transcript.header)
    if workspace is None:
        return {"action": "none", "reason": "no trusted workspace for this session", "path": path}
    messages = list(
        llm_visible(entry["message"] for entry in reading.transcript.branch() if "message" in entry)
    )
    client = make_client(config)
    try:
        await flush_span(
            config,
            Metrics(),
            client,
            messages,
            workspace=workspace,
            session_file=path,
            session_id=reading.figures.session_id,
        )
    finally:
        if client is not None:
            await client.close()
    return {"action": "flush", "path": path, "messages": len(messages), "workspace": str(workspace.path)}


def install_compact_prompt(home: str) -> Path:
    """Write :data:`COMPACT_PROMPT` to ``<home>/compactd-compact-prompt.md`` (durably) and return its path, for
    ``experimental_compact_prompt_file`` in Codex's ``config.toml``."""
    target = Path(home) / PROMPT_FILE_NAME
    write_atomic(target, COMPACT_PROMPT.encode(), mode=0o644)
    return target
