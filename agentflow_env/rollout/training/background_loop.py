"""Sessions for trainers that step envs from blocking code (SkyRL's ``BaseTextEnv.step``).

Such a trainer calls ``step`` from its own worker threads, one trajectory per call. Every session
of the process then runs on one event loop on a daemon thread (``BackgroundLoop``): the
trajectories' tool calls and module requests interleave there as they would under one async
trainer, LLM clients keep one connection pool, and each blocking caller waits only for its own
coroutine. Calling ``run`` from the loop's own thread would wait forever, so it raises instead.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    """An event loop on a daemon thread, started on first use and shared by blocking callers."""

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


__all__ = ["BackgroundLoop"]
