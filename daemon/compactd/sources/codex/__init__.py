"""Codex CLI (``@openai/codex``) as a session source: its rollouts followed, its own figure kept, idle sessions
compacted by an appended ``compacted`` item, memory flushed from its ``PreCompact`` hook (design.md §6.16).

The names load on first use (PEP 562), so the service, which needs only :class:`CodexSource`, does not import
the hook's commit machinery, and a command that never looks at Codex imports none of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compactd.sources import Host
    from compactd.sources.codex._files import codex_home
    from compactd.sources.codex._hook import COMPACT_PROMPT, install_compact_prompt, precompact
    from compactd.sources.codex._source import CodexSource

__all__ = ["COMPACT_PROMPT", "CodexSource", "build", "codex_home", "install_compact_prompt", "precompact"]

_WHERE = {
    "COMPACT_PROMPT": "compactd.sources.codex._hook",
    "CodexSource": "compactd.sources.codex._source",
    "codex_home": "compactd.sources.codex._files",
    "install_compact_prompt": "compactd.sources.codex._hook",
    "precompact": "compactd.sources.codex._hook",
}


def build(host: Host) -> CodexSource:
    """This package's :class:`~compactd.sources.Source`, lent the service's ``host``."""
    from compactd.sources.codex._source import CodexSource

    return CodexSource(host.config, host.env, host=host)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'compactd.sources.codex' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
