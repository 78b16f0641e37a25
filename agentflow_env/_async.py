"""Driving async sessions from synchronous code."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


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
        client = sys.modules.get("agentflow_env.llm.client")
        if client is not None and not self._loop.is_closed():
            self.run(client.close_clients())  # this loop's connection pools
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._finalizer()


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    if not loop.is_closed() and not loop.is_running():
        loop.close()
