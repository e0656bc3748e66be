"""The process's heap: glibc malloc's arenas and handing freed pages back to the system, and the cyclic
garbage collector kept off what one job holds for its whole length.

Reading and compacting transcripts allocates and frees far more than compactd keeps; without these the
resident size stays near the largest job's peak, and the freed pages of one phase (a compaction's engine) are
not what the next phase's large buffers (the commit's file bytes) can reuse, so each phase adds its own peak.
Both are no-ops where glibc is not there.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from compactd.core import collector
from compactd.core.collector import collector_paused

__all__ = ["collector_paused", "fix_mmap_threshold", "frozen", "limit_malloc_arenas", "release_free_memory"]

# Buffers from this size up are mapped on their own (``fix_mmap_threshold``).
MMAP_THRESHOLD = 1 << 20

_frozen_lock = threading.Lock()
_frozen_depth = 0


@contextmanager
def frozen() -> Iterator[None]:
    """Every object alive now left out of the cyclic collector's passes until the block ends (``gc.freeze``).

    A job holds a parsed transcript (millions of acyclic dicts and strings) while it allocates millions more; each
    full collection would traverse the transcript again (a tenth of a followed 50 MB compaction's CPU). Only the
    collector's timing changes: refcounting frees as before, and everything frozen is handed back to it when the
    last of the jobs running together ends."""
    global _frozen_depth
    with _frozen_lock:
        _frozen_depth += 1
        collector.frozen_blocks = _frozen_depth
        gc.freeze()
    try:
        yield
    finally:
        with _frozen_lock:
            _frozen_depth -= 1
            collector.frozen_blocks = _frozen_depth
            if _frozen_depth == 0:
                gc.unfreeze()


def limit_malloc_arenas() -> None:
    """One glibc malloc arena for the whole process (``M_ARENA_MAX``): the watcher and worker threads would
    otherwise each grow an arena of their own that is never given back; compactd is not allocation-bound."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-8, 1)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


def fix_mmap_threshold() -> None:
    """Every allocation of ``MMAP_THRESHOLD`` or more mapped on its own (``M_MMAP_THRESHOLD``), for good.

    glibc raises its threshold (up to 32 MiB) each time a mapped block is freed: after a transcript's bytes are
    read and freed, the next large buffers (the successor being built, the commit's snapshot) land in the heap,
    where growing one copies it and freeing one leaves its pages resident, so a compaction's peak depends on
    what came before it (100,000 orphans: 175 MB, and 143 MB with the threshold fixed, CPU the same)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def release_free_memory() -> None:
    """Hand freed heap pages back to the system (glibc's ``malloc_trim``); a no-op where it is not available."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
