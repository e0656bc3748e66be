"""Codex CLI (``@openai/codex``) as a session source: its rollouts followed, its own figure kept, idle sessions
compacted by an appended ``compacted`` item, memory flushed from its ``PreCompact`` hook (design.md §6.16)."""

from compactd.codex._files import codex_home
from compactd.codex._hook import COMPACT_PROMPT, install_compact_prompt, precompact
from compactd.codex._source import CodexSource

__all__ = ["COMPACT_PROMPT", "CodexSource", "codex_home", "install_compact_prompt", "precompact"]
