"""Where offloaded work runs: a daemon thread of its own (the loop goes on meanwhile), or, within
``offload.inline()`` (``once --dry-run``), the caller's thread and loop."""

from __future__ import annotations

import asyncio
import threading

import anyio
from compactd import offload


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
