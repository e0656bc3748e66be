"""Committing compactions and prunings to disk without losing a line: append and rotate, journal, recovery."""

from compactd.commit.atomic import CRASH_POINTS
from compactd.commit.commit import CommitMode, CommitResult, CompactionEntries, commit
from compactd.commit.journal import Journal, RecoveryReport, recover
from compactd.commit.retention import apply_retention
from compactd.commit.seal import seal_torn_line
from compactd.commit.successor import FULL_TEXT_PLACEHOLDER, LEAF_POINTER_TYPE

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
