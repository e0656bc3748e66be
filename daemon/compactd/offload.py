"""CPU-bound work off the event loop: one compaction of a big session is seconds to minutes of pure Python.

While it runs, the loop must go on pinging systemd's watchdog, following the other sessions' appends, writing
status and handling signals. A thread is enough for that: CPython hands the GIL over every 5 ms
(``sys.getswitchinterval``), so the loop keeps running beside a thread that computes; a process would also
have to pickle the transcript there and the result back, and bridge every model call (bench/bench_loop.py
measures both). The thread is a daemon thread of its own, not anyio's pool, whose threads the interpreter
joins at exit: a job cancelled at shutdown is abandoned (its result dropped) and the process stops at once.
So only computation may run here; whatever writes (the commit) runs where a cancellation waits for it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import math
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["LoopClient", "inline", "run_async", "run_inline", "run_sync"]

log = logging.getLogger(__name__)

T = TypeVar("T")
# A model call the engine's thread hands to the loop, and where its answer goes.
Call = tuple[Callable[[], Awaitable[Any]], "Future[Any]"]
# Set by ``inline()``: a context variable, so only the code run from that block (its event loop's tasks) sees it.
_inline = contextvars.ContextVar("compactd_offload_inline", default=False)


@contextlib.contextmanager
def inline() -> Iterator[None]:
    """Meanwhile, the work runs where it is asked for, in the caller's thread and on its loop: for a process
    whose loop has nothing else to do (``once --dry-run`` reads, decides and plans one session after another;
    no watchdog, no watcher), to which a thread and an event loop per step are only a cost."""
    token = _inline.set(True)
    try:
        yield
    finally:
        _inline.reset(token)


def run_inline(func: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``anyio.run(func)`` for work that never waits, under :func:`inline` (``once --dry-run``): its coroutine
    is driven to its end without an event loop, so asyncio and anyio's backend are neither imported nor started
    (about 45 ms of CPU, a twentieth of a dry run over 200 sessions). A coroutine that does wait is an error."""
    with inline():
        coro = func()
        try:
            waited = coro.send(None)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        coro.close()
    raise RuntimeError(f"run_inline: the work waited for {waited!r} (it needs an event loop: anyio.run)")


async def run_sync(func: Callable[[], T], *, name: str = "compactd-cpu") -> T:
    """``func()`` in a daemon thread; the caller's loop runs meanwhile. Cancelling the caller abandons the
    thread (it finishes on its own, or dies with the process), so ``func`` must write nothing."""
    if _inline.get():
        return func()
    # Imported here: what runs inline (``once --dry-run``) needs neither, nor anyio's primitives they load.
    import anyio.from_thread
    from anyio.lowlevel import current_token

    token = current_token()
    done = anyio.Event()
    outcome: list[tuple[bool, Any]] = []

    def target() -> None:
        nonlocal func
        try:
            outcome.append((True, func()))
        except BaseException as exc:  # handed to the awaiting task, which re-raises it
            outcome.append((False, exc))
        # The work (and what it closes over: a whole transcript) is let go before the caller resumes, not
        # when this thread ends: it may not run again before the caller has finished and its process exits,
        # and meanwhile the cyclic collector would traverse all of it once the caller re-enables it.
        del func
        try:
            anyio.from_thread.run_sync(done.set, token=token)
        except anyio.RunFinishedError:
            log.debug("thread %s finished after its loop (an abandoned job)", name)

    threading.Thread(target=target, name=name, daemon=True).start()
    await done.wait()
    ok, value = outcome[0]
    if ok:
        return value  # type: ignore[no-any-return]
    raise value


async def run_async(
    func: Callable[[], Awaitable[T]], *, client: LoopClient | None = None, name: str = "compactd-cpu"
) -> T:
    """``await func()`` on an event loop of its own in a daemon thread (:func:`run_sync`): for async code that
    is mostly computation, such as the engine. ``client``'s model calls are made here meanwhile, on this loop
    and in this task: cancelling it cancels them too."""

    async def main() -> T:
        return await func()

    if _inline.get() and client is None:
        return await func()
    import anyio

    if client is None:
        return await run_sync(functools.partial(anyio.run, main), name=name)
    outcome: list[tuple[bool, Any]] = []
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.serve)
            try:  # the job's own error is raised as it is, not in the task group's ExceptionGroup
                outcome.append((True, await run_sync(functools.partial(anyio.run, main), name=name)))
            except Exception as exc:
                outcome.append((False, exc))
            tg.cancel_scope.cancel()
    finally:
        client.close()
    ok, value = outcome[0]
    if ok:
        return value  # type: ignore[no-any-return]
    raise value


class LoopClient:
    """A summarizer client for code running in :func:`run_async`'s thread: each call is handed to the loop that
    owns the client (its HTTP connections, its concurrency limiter, its retry sleeps) and made by the task
    that awaits the job (:meth:`serve`); the thread waits for the answer.

    The engine makes its model calls one after another, so blocking the thread's own loop meanwhile costs
    nothing."""

    def __init__(self, client: Any) -> None:
        import anyio.from_thread  # for the calls; loaded here, not by every command (see run_sync)
        from anyio.lowlevel import current_token

        self.client = client
        self._token = current_token()
        self._send, self._calls = anyio.create_memory_object_stream[Call](max_buffer_size=math.inf)

    async def complete(self, system: str, user: str, *, max_tokens: int | None = None) -> Any:
        return self._call(functools.partial(self.client.complete, system, user, max_tokens=max_tokens))

    def pace(self) -> Any:
        import anyio.from_thread

        return anyio.from_thread.run_sync(self.client.pace, token=self._token)

    async def prepare(self) -> Any:
        """The client's ``prepare`` (what the server is, the context it gives), made on the owning loop."""
        prepare = getattr(self.client, "prepare", None)
        return self._call(prepare) if prepare is not None else None

    def _call(self, call: Callable[[], Awaitable[Any]]) -> Any:
        from concurrent.futures import Future

        import anyio.from_thread

        answer: Future[Any] = Future()
        anyio.from_thread.run_sync(self._send.send_nowait, (call, answer), token=self._token)
        return answer.result()

    def close(self) -> None:
        """Close the hand-over stream (its job is over: no call is made after it)."""
        self._send.close()
        self._calls.close()

    async def serve(self) -> None:
        """Make the calls the thread hands over, until cancelled (then the one in progress fails over there)."""
        async for call, answer in self._calls:
            try:
                answer.set_result(await call())
            except Exception as exc:  # the model's errors are the engine's to handle
                answer.set_exception(exc)
            except BaseException:
                answer.set_exception(RuntimeError("the job was cancelled"))
                raise
