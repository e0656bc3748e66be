"""OpenClaw 2026.9+: sessions in a per-agent SQLite database, compacted through the gateway.

The public surface is small: :func:`refusal` (the file sessions' guard: nothing under a SQLite-backed
agent), :class:`OpenClawSource` (the service's second session source), :func:`discover` and
:func:`check_openclaw`. The modules behind it are private. The names load on first use (PEP 562), so a command
that only needs the guard (``compact``, ``once``) does not import the gateway, the store and the doctor.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compactd.sources import Host
    from compactd.sources.openclaw._discovery import Agent, Install, discover
    from compactd.sources.openclaw._doctor import check_openclaw
    from compactd.sources.openclaw._guard import refusal, sqlite_agent_of
    from compactd.sources.openclaw._source import OpenClawSource

__all__ = [
    "Agent",
    "Install",
    "OpenClawSource",
    "build",
    "check_openclaw",
    "discover",
    "refusal",
    "sqlite_agent_of",
]

_WHERE = {
    "Agent": "compactd.sources.openclaw._discovery",
    "Install": "compactd.sources.openclaw._discovery",
    "OpenClawSource": "compactd.sources.openclaw._source",
    "check_openclaw": "compactd.sources.openclaw._doctor",
    "discover": "compactd.sources.openclaw._discovery",
    "refusal": "compactd.sources.openclaw._guard",
    "sqlite_agent_of": "compactd.sources.openclaw._guard",
}


def build(host: Host) -> OpenClawSource:
    """This package's :class:`~compactd.sources.Source`, lent the service's ``host``."""
    from compactd.sources.openclaw._source import OpenClawSource

    return OpenClawSource(host.config, host.env, host=host)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'compactd.sources.openclaw' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
