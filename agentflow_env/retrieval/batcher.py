"""The retriever server's batching: the queries of concurrent requests searched together.

``QueryBatcher`` runs one thread beside the server's event loop: the queries submitted within
``window_s`` of the first are searched in one ``search_batch`` call (identical queries once, per
``topk``), so many environment processes share one index, and the event loop never waits for a
search. ``ServerStats`` counts what a server did (``/health`` reports it).
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from agentflow_env.retrieval.bm25 import Hit, Searchable

SEARCH_TIMEOUT_S = 300.0


@dataclass
class ServerStats:
    """Counters of a running server (read them for monitoring and tests)."""

    requests: int = 0
    queries: int = 0
    batches: int = 0
    largest_batch: int = 0
    errors: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return {
                "requests": self.requests,
                "queries": self.queries,
                "batches": self.batches,
                "largest_batch": self.largest_batch,
                "errors": self.errors,
            }


@dataclass
class _Pending:
    queries: list[str]
    topk: int
    future: Future[list[list[Hit]]] = field(default_factory=Future)


class QueryBatcher:
    """Merges queries submitted from many threads into ``search_batch`` calls on one thread."""

    def __init__(
        self,
        index: Searchable,
        stats: ServerStats,
        window_s: float = 0.002,
        max_batch_queries: int = 512,
    ) -> None:
        self.index = index
        self.stats = stats
        self.window_s = window_s
        self.max_batch_queries = max_batch_queries
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="retriever-batcher", daemon=True)
        self._thread.start()

    def submit(self, queries: list[str], topk: int) -> Future[list[list[Hit]]]:
        """The future hits of the queries (``topk`` best each), searched in the next batch; a
        future cancelled before its batch runs is left out of it."""
        pending = _Pending(queries, topk)
        self._queue.put(pending)
        return pending.future

    def search(self, queries: list[str], topk: int) -> list[list[Hit]]:
        """Block until the queries' hits are ready (``topk`` best each)."""
        return self.submit(queries, topk).result(timeout=SEARCH_TIMEOUT_S)

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        running = True
        while running:
            first = self._queue.get()
            if first is None:
                return
            batch, size = [first], len(first.queries)
            deadline = time.monotonic() + self.window_s
            while size < self.max_batch_queries:
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    running = False
                    break
                batch.append(item)
                size += len(item.queries)
            self._run([item for item in batch if item.future.set_running_or_notify_cancel()])

    def _run(self, batch: list[_Pending]) -> None:
        by_topk: dict[int, list[_Pending]] = {}
        for item in batch:
            by_topk.setdefault(item.topk, []).append(item)
        for topk, items in by_topk.items():
            unique = list(dict.fromkeys(q for item in items for q in item.queries))
            try:
                hits = dict(zip(unique, self.index.search_batch(unique, topk), strict=True))
            except Exception as error:  # answered as HTTP 500
                for item in items:
                    item.future.set_exception(error)
                continue
            with self.stats._lock:
                self.stats.batches += 1
                self.stats.largest_batch = max(self.stats.largest_batch, len(unique))
            for item in items:
                item.future.set_result([hits[q] for q in item.queries])


__all__ = ["SEARCH_TIMEOUT_S", "QueryBatcher", "ServerStats"]
