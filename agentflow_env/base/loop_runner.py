"""Driving async sessions from synchronous code."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
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
