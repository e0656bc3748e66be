"""compactd.heap.collector_paused: the cyclic collector off for a block, then as it was, and what the block
built left to the oldest generation."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from compactd.heap import collector_paused


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


def test_paused_then_enabled_again() -> None:
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_left_disabled_when_it_was() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_enabled_again_after_an_exception() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def _generation_of(obj: object) -> int | None:
    return next((g for g in range(3) if any(o is obj for o in gc.get_objects(generation=g))), None)


def test_what_the_block_built_is_left_to_the_oldest_generation() -> None:
    """The young collection that would follow the block never traverses what it built (a parsed transcript)."""
    gc.enable()
    with collector_paused():
        built = [{"n": i} for i in range(1000)]
        assert _generation_of(built) == 0
    assert _generation_of(built) == 2 and gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_inside_a_frozen_block_what_it_built_is_frozen_until_that_block_ends() -> None:
    from compactd.heap import frozen

    gc.enable()
    with frozen():
        with collector_paused():
            built = [{"n": i} for i in range(1000)]
        assert _generation_of(built) is None  # frozen: no generation holds it
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0 and _generation_of(built) == 2
