"""``compactd.offload``: where offloaded work runs (a daemon thread of its own, the loop going on meanwhile; or,
within ``offload.inline()`` (``once --dry-run``), the caller's thread and loop), and that nothing of it stays in
the thread once it is done."""

from __future__ import annotations

import asyncio
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


def _where() -> tuple[int, int, int]:
    """(thread of run_sync's work, thread of run_async's work, whether run_async ran on the caller's loop)."""

    async def main() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()

        async def on_loop() -> tuple[int, bool]:
            return threading.get_ident(), asyncio.get_running_loop() is loop

        sync = await offload.run_sync(threading.get_ident)
        thread, same_loop = await offload.run_async(on_loop)
        return sync, thread, int(same_loop)

    return anyio.run(main)


def test_work_runs_in_a_thread_of_its_own_unless_inline() -> None:
    caller = threading.get_ident()
    sync, thread, same_loop = _where()
    assert sync != caller and thread != caller and not same_loop
    with offload.inline():
        assert _where() == (caller, caller, 1)
    sync, thread, same_loop = _where()  # the block over, threads again
    assert sync != caller and thread != caller and not same_loop


def test_an_error_is_raised_to_the_caller_inline_too() -> None:
    def fail() -> None:
        raise ValueError("boom")

    async def main() -> str:
        try:
            await offload.run_sync(fail)
        except ValueError as exc:
            return str(exc)
        return "no error"

    assert anyio.run(main) == "boom"
    with offload.inline():
        assert anyio.run(main) == "boom"


def test_inline_holds_for_the_block_alone_not_for_another_thread_meanwhile() -> None:
    seen: list[tuple[tuple[int, int, int], int]] = []
    with offload.inline():
        other = threading.Thread(target=lambda: seen.append((_where(), threading.get_ident())))
        other.start()
        other.join()
    (sync, thread, same_loop), ident = seen[0]
    assert sync != ident and thread != ident and not same_loop


def test_run_inline_drives_work_that_never_waits_in_the_caller_s_thread() -> None:
    """``once --dry-run``: the offloaded steps run inline and the coroutine is driven without an event loop."""
    caller = threading.get_ident()

    async def main() -> tuple[int, int]:
        sync = await offload.run_sync(threading.get_ident)
        nested = await offload.run_async(lambda: offload.run_sync(threading.get_ident))
        return sync, nested

    assert offload.run_inline(main) == (caller, caller)
    assert not offload._inline.get()  # inline for that work alone


def test_run_inline_raises_the_work_s_error_and_refuses_work_that_waits() -> None:
    async def fail() -> None:
        await offload.run_sync(lambda: None)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        offload.run_inline(fail)

    async def waits() -> None:
        await asyncio.sleep(0)

    with pytest.raises(RuntimeError, match="event loop"):
        offload.run_inline(waits)
