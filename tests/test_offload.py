"""``compactd.offload``: the work runs in a thread of its own, and nothing of it stays there once it is done."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import pytest
from compactd import offload


class _Held:
    """Stands for a parsed transcript the work closes over."""


def _work_over(held: _Held) -> Callable[[], int]:
    return lambda: id(held)


def test_run_sync_lets_go_of_the_work_before_the_caller_resumes(monkeypatch: pytest.MonkeyPatch) -> None:
    """When ``run_sync`` returns, its thread (kept here from ending until the check is made) holds neither
    the function nor what it closes over: the caller's last reference frees it there and then (``inspect``
    frees its transcript before it re-enables the cyclic collector, not whenever the thread gets to end)."""
    release = threading.Event()
    signal = anyio.from_thread.run_sync

    def signal_then_wait(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        result = signal(func, *args, **kwargs)
        release.wait(timeout=60)  # the thread stays alive, in ``target``, until the test has looked
        return result

    monkeypatch.setattr(anyio.from_thread, "run_sync", signal_then_wait)

    async def main() -> tuple[int, bool]:
        held = _Held()
        ref = weakref.ref(held)
        work = _work_over(held)
        del held
        result = await offload.run_sync(work, name="test-offload")
        del work
        return result, ref() is None

    try:
        result, freed = anyio.run(main)
    finally:
        release.set()
    assert isinstance(result, int)
    assert freed


def test_run_sync_still_hands_back_the_work_s_error() -> None:
    async def main() -> None:
        await offload.run_sync(lambda: 1 // 0, name="test-offload")

    with pytest.raises(ZeroDivisionError):
        anyio.run(main)
