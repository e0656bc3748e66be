"""Committing compactions and prunings to disk without losing a line: append and rotate, journal, recovery.

The names below load their module on first use (PEP 562): a process that needs only ``locks`` or ``durable``
(the service's start, the state files) does not import the whole commit path. The function ``commit`` shares
its name with its submodule; the package keeps the function under that name whichever is imported first.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compactd.commit.atomic import CRASH_POINTS
    from compactd.commit.commit import CommitMode, CommitResult, CompactionEntries, commit
    from compactd.commit.journal import Journal, RecoveryReport, recover
    from compactd.commit.notes import FULL_TEXT_PLACEHOLDER
    from compactd.commit.retention import apply_retention
    from compactd.commit.seal import seal_torn_line
    from compactd.commit.successor import LEAF_POINTER_TYPE

__all__ = [
    "CRASH_POINTS",
    "FULL_TEXT_PLACEHOLDER",
    "LEAF_POINTER_TYPE",
    "CommitMode",
    "CommitResult",
    "CompactionEntries",
    "Journal",
    "RecoveryReport",
    "apply_retention",
    "commit",
    "recover",
    "seal_torn_line",
]

_HOME = {
    "CRASH_POINTS": "atomic",
    "CommitMode": "commit",
    "CommitResult": "commit",
    "CompactionEntries": "commit",
    "commit": "commit",
    "Journal": "journal",
    "RecoveryReport": "journal",
    "recover": "journal",
    "apply_retention": "retention",
    "seal_torn_line": "seal",
    "FULL_TEXT_PLACEHOLDER": "notes",
    "LEAF_POINTER_TYPE": "successor",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """Importing the submodule ``commit`` binds it on the package; the name stays the function's."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "commit" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
