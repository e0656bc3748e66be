"""compactd.heap.collector_paused: the cyclic collector off for a block, then as it was."""

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
