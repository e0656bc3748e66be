"""Which paths belong to a SQLite-backed OpenClaw agent, where compactd must write nothing.

From 2026.9 an agent's sessions live in ``<agent dir>/agent/openclaw-agent.sqlite``; a ``.jsonl`` left in its
``sessions/`` is migration input that no model reads again, and anything written beside it would only confuse
``openclaw doctor``. Pure path logic plus ``lstat``.
"""

from __future__ import annotations

import os

DATABASE_NAME = "openclaw-agent.sqlite"
AGENT_SUBDIR = "agent"


def database_of(agent_dir: str) -> str:
    """Where an agent directory keeps its 2026.9+ database."""
    return os.path.join(agent_dir, AGENT_SUBDIR, DATABASE_NAME)


def is_sqlite_agent(agent_dir: str) -> bool:
    """Whether ``agent_dir`` (``<state>/agents/<id>``) is SQLite-backed: its database exists (in any form)."""
    return os.path.lexists(database_of(agent_dir))


def sqlite_agent_of(path: str, known: dict[str, str | None] | None = None) -> str | None:
    """The SQLite-backed agent directory a transcript path lies in (``<agent>/sessions/<file>``), or None.

    None for every OpenClaw install before 2026.9 (no database beside ``sessions/``) and for pi's files.
    ``known``: the answers of one pass over many files, by directory (one ``lstat`` per directory, not per file).
    """
    raw_dir = os.path.dirname(path)
    if known is not None and raw_dir in known:  # the pass's common case: no ``abspath`` per file
        return known[raw_dir]
    sessions_dir = os.path.dirname(os.path.abspath(path))
    if known is not None and sessions_dir in known:
        known[raw_dir] = known[sessions_dir]
        return known[sessions_dir]
    agent_dir: str | None = os.path.dirname(sessions_dir)
    if os.path.basename(sessions_dir) != "sessions" or not agent_dir or not is_sqlite_agent(agent_dir):
        agent_dir = None
    if known is not None:
        known[sessions_dir] = known[raw_dir] = agent_dir
    return agent_dir


def refusal(path: str, known: dict[str, str | None] | None = None) -> str | None:
    """Why compactd must not act on this transcript file, or None (the one rule the file sessions obey).

    ``known``: as :func:`sqlite_agent_of`'s, for one pass over many files."""
    agent = sqlite_agent_of(path, known)
    if agent is None:
        return None
    return (
        f"its agent {agent} is SQLite-backed (OpenClaw 2026.9+): the file is import input no model reads, "
        "and compactd writes nothing under that agent"
    )
