"""The loop every session source's worker runs: act on the fullest ready session, else sleep until a change
wakes it or time alone may make one ready (idle, a turn abandoned, a back-off over)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import anyio

T = TypeVar("T")


class Owner(Protocol):
    stopping: bool
    wakeup: anyio.Event  # set by whoever makes a session due; replaced before each sleep

    def next_wake(self, now: float) -> float: ...


async def work(
    owner: Owner, ready: Callable[[float], Sequence[T]], act: Callable[[T], Awaitable[object]]
) -> None:
    while not owner.stopping:
        now = time.time()
        due = ready(now)
        if due:
            await act(due[0])
            continue
        owner.wakeup = anyio.Event()
        with anyio.move_on_after(owner.next_wake(now)):
            await owner.wakeup.wait()
