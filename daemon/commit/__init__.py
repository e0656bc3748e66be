"""Committing compactions and prunings to disk without losing a line: append and rotate, journal, recovery."""

from daemon.commit.atomic import CRASH_ENV, CRASH_POINTS
from daemon.commit.commit import CommitMode, CommitResult, CompactionEntries, commit
from daemon.commit.journal import Journal, RecoveryReport, recover
from daemon.commit.retention import apply_retention
from daemon.commit.seal import seal_torn_line
from daemon.commit.successor import FULL_TEXT_PLACEHOLDER, LEAF_POINTER_TYPE

__all__ = [
    "CRASH_ENV",
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
