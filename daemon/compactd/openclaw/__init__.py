"""OpenClaw 2026.9+: sessions in a per-agent SQLite database, compacted through the gateway.

The public surface is small: :func:`refusal` (the file sessions' guard: nothing under a SQLite-backed
agent), :class:`OpenClawSource` (the service's second session source), :func:`discover` and
:func:`doctor_lines`. The modules behind it are private.
"""

from compactd.openclaw._discovery import Agent, Install, discover
from compactd.openclaw._doctor import check_openclaw
from compactd.openclaw._guard import refusal, sqlite_agent_of
from compactd.openclaw._source import OpenClawSource

__all__ = [
    "Agent",
    "Install",
    "OpenClawSource",
    "check_openclaw",
    "discover",
    "refusal",
    "sqlite_agent_of",
]
