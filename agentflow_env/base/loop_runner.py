"""Driving async sessions from synchronous code, and sharing one loop between many of them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

LoopCloseHook = Callable[[], Coroutine[Any, Any, None]]

_close_hooks: list[LoopCloseHook] = []
_close_hooks_lock = threading.Lock()


def on_loop_close(hook: LoopCloseHook) -> None:
    """Have every ``LoopRunner`` await ``hook()`` on its loop when it closes (idempotent).

    For resources bound to the loop that used them, such as an LLM client's connection pools
    (``agentflow_env.llm.client`` registers its ``close_clients``).
    """
    with _close_hooks_lock:
        if hook not in _close_hooks:
            _close_hooks.append(hook)


class LoopRunner:
    """Runs coroutines to completion on a private event loop.

    When the caller is itself inside a running loop (a notebook, an async trainer), the coroutine
    runs on the private loop in a helper thread instead, since a loop cannot be re-entered.
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        # An env that is dropped without close() still releases its loop when collected.
        self._finalizer = weakref.finalize(self, _close_loop, self._loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._loop.run_until_complete(coro)
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        return self._pool.submit(self._loop.run_until_complete, coro).result()

    def close(self) -> None:
        with _close_hooks_lock:
            hooks = list(_close_hooks)
        for hook in hooks:
            if not self._loop.is_closed():
                self.run(hook())  # e.g. this loop's connection pools
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._finalizer()


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    if not loop.is_closed() and not loop.is_running():
        loop.close()


# -- sharing one loop ------------------------------------------------------------------------
SLICE_S = 0.004
"""About the most time that coroutines passing ``yield_to_loop`` run, together, in one pass of
the loop (a phase may run over it) before the loop's other callbacks get their turn."""


class _Turns:
    """How one loop's coroutines take turns at ``yield_to_loop``.

    A *slice* is the CPU work that coroutines passing ``yield_to_loop`` run in one pass of the
    loop. It starts at the first such point of a pass, which schedules a callback (``_tick``)
    for the next pass to end it. A coroutine goes on while the slice is under ``SLICE_S`` and no
    one waits; otherwise it waits, in order. A tick finding coroutines waiting admits the first
    (the holder) and starts its slice; the holder goes on while that lasts, waiters or not. So a
    pass runs about ``SLICE_S`` of such work, and the loop's timers and I/O run between passes.
    """

    __slots__ = ("holder", "slice_started", "tick_pending", "waiting")

    def __init__(self) -> None:
        self.slice_started: float | None = None
        self.holder: asyncio.Task[Any] | None = None
        self.tick_pending = False
        self.waiting: deque[tuple[asyncio.Future[None], asyncio.Task[Any] | None]] = deque()

    def begin(self, loop: asyncio.AbstractEventLoop, now: float) -> None:
        self.slice_started = now
        self.schedule_tick(loop)

    def schedule_tick(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self.tick_pending:
            self.tick_pending = True
            loop.call_soon(self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self.tick_pending = False
        self.slice_started = self.holder = None
        while self.waiting:
            admitted, task = self.waiting.popleft()
            if not admitted.done():  # a cancelled waiter is skipped
                admitted.set_result(None)
                self.holder = task
                self.begin(loop, time.perf_counter())
                return


_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turns] = weakref.WeakKeyDictionary()
_turns_lock = threading.Lock()


def _turns_of(loop: asyncio.AbstractEventLoop) -> _Turns:
    turns = _turns.get(loop)
    if turns is None:
        with _turns_lock:
            turns = _turns.setdefault(loop, _Turns())
    return turns


async def yield_to_loop() -> None:
    """A point between two CPU-bound phases of a coroutine where the loop may run other work.

    Many coroutines on one loop (a trainer's trajectories, all woken in one round) take turns
    here: the phases run in one pass of the loop add up to about ``SLICE_S``, the others wait,
    in order, for later passes, and the loop's timers and I/O (the trainer's generation, LLM
    replies) run in between instead of waiting behind all of them. A coroutine alone within its
    slice goes straight on. What each coroutine computes is unchanged; only when.
    """
    loop = asyncio.get_running_loop()
    turns = _turns_of(loop)
    now = time.perf_counter()
    if turns.slice_started is None:
        if not turns.waiting:
            turns.begin(loop, now)
            return
    elif now - turns.slice_started < SLICE_S and (
        not turns.waiting or asyncio.current_task(loop) is turns.holder
    ):
        return
    admitted: asyncio.Future[None] = loop.create_future()
    turns.waiting.append((admitted, asyncio.current_task(loop)))
    turns.schedule_tick(loop)
    await admitted


# -- a loop that always runs ---------------------------------------------------------------------
class BackgroundLoop:
    """An event loop on a daemon thread, started on first use and shared by blocking callers.

    Unlike ``LoopRunner``'s, this loop runs between calls too: what lives on it keeps working
    (a WebSocket answering its peer's pings while the caller computes), and every blocking caller
    waits only for its own coroutine. Calling ``run`` from the loop's own thread would wait
    forever, so it raises instead."""

    def __init__(self, name: str = "agentflow-sessions") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (its exception is raised here)."""
        loop = self._started()
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError(f"{self.name}: run() called from the loop's own thread")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop
