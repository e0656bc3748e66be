"""Codex CLI (``@openai/codex``) as a session source: its rollouts followed, its own figure kept, idle sessions
compacted by an appended ``compacted`` item, memory flushed from its ``PreCompact`` hook (design.md §6.16).

The names load on first use (PEP 562), so the service, which needs only :class:`CodexSource`, does not import
the hook's commit machinery, and a command that never looks at Codex imports none of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compactd.codex._files import codex_home
    from compactd.codex._hook import COMPACT_PROMPT, install_compact_prompt, precompact
    from compactd.codex._source import CodexSource
    from compactd.sources import Host

__all__ = ["COMPACT_PROMPT", "CodexSource", "build", "codex_home", "install_compact_prompt", "precompact"]

_WHERE = {
    "COMPACT_PROMPT": "compactd.codex._hook",
    "CodexSource": "compactd.codex._source",
    "codex_home": "compactd.codex._files",
    "install_compact_prompt": "compactd.codex._hook",
    "precompact": "compactd.codex._hook",
}


def build(host: Host) -> CodexSource:
    """This package's :class:`~compactd.sources.Source`, lent the service's ``host``."""
    from compactd.codex._source import CodexSource

    return CodexSource(host.config, host.env, host=host)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'compactd.codex' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
