"""The cyclic garbage collector paused while a pass builds a transcript's worth of acyclic objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]

# How many of ``heap.frozen``'s blocks are open (it counts them under its lock; read here without it, since a
# block that starts or ends meanwhile changes only when the collector looks, never what it frees).
# ``gc.get_freeze_count`` would tell as much, but it walks every frozen object (a job's whole transcript).
frozen_blocks = 0


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block (``gc.disable``), then as it was.

    For a pass that builds millions of acyclic objects (parsing a transcript), or a few small ones per session
    for thousands of sessions (the start-up's load and read of every session): the allocations alone would
    trigger a collection every few hundred objects, each traversing all that was built before it. And for
    commands that read transcripts, print and exit (on a 200 MB transcript the collector's passes took more
    than all of ``inspect``'s figures). Refcounting frees as before; restored after, as ``main`` also runs
    inside tests.

    What the block built is then moved out of the young generations at once (``_settle``): the first
    allocation after the block would otherwise start a young collection over all of it (a parsed 50 MB
    transcript: about 0.02 s, and as much again when it is promoted once more)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            _settle()
            gc.enable()


def _settle() -> None:
    """Every tracked object into the oldest generation in constant time (``gc.freeze`` then ``gc.unfreeze``
    splice the lists), or, inside a job's ``heap.frozen`` block, into the frozen set, which that block's end
    hands back."""
    gc.freeze()
    if not frozen_blocks:
        gc.unfreeze()
