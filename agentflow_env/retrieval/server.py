"""A retriever server speaking Search-R1's protocol over a BM25, dense or hybrid index.

``POST /retrieve`` with ``{"queries": [str], "topk": int, "return_scores": bool}`` answers
``{"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}``, or, without
scores, one list of ``{"id", "contents"}`` documents per query. As in Search-R1's server, a
``topk`` that is missing, ``null`` or ``0`` means the server's default. Bad requests get HTTP 400
with ``{"error": ...}``.

``GET /health`` reports the index (``retriever``, ``model``, ``corpus_id``, ``documents``,
``index``: per part where it came from, ``"built"`` or ``"loaded"`` from the disk cache, and the
seconds it took; ``ready_at``: when serving began, UTC ISO 8601), ``default_topk``, ``uptime_s``
and the counters of ``ServerStats``.

Standard library only: a ``ThreadingHTTPServer`` whose handler threads hand their queries to one
batching thread; requests arriving within ``batch_window_s`` are merged into one
``search_batch`` call (identical queries searched once), so many environment processes can share
one index without each holding a copy of it.
"""

from __future__ import annotations

import json
import queue
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agentflow_env.retrieval.bm25 import Hit, Searchable, get_index
from agentflow_env.retrieval.corpus import Corpus, PathLike, load_corpus_file
from agentflow_env.retrieval.dense import (
    DEFAULT_DENSE_MODEL,
    DocumentSource,
    load_or_build_dense_index,
)
from agentflow_env.retrieval.file_index import build_corpus_index, open_corpus_index
from agentflow_env.retrieval.hybrid import HybridIndex, check_retriever, describe_searcher
from agentflow_env.retrieval.index_store import index_dir, load_or_build_index

DEFAULT_TOPK = 3
MAX_TOPK = 1000
MAX_QUERIES_PER_REQUEST = 4096
MAX_BODY_BYTES = 16 * 1024 * 1024
_SEARCH_TIMEOUT_S = 300.0


class RequestError(ValueError):
    """A malformed ``/retrieve`` request (answered with HTTP 400)."""


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

    def search(self, queries: list[str], topk: int) -> list[list[Hit]]:
        """Block until the queries' hits are ready (``topk`` best each)."""
        pending = _Pending(queries, topk)
        self._queue.put(pending)
        return pending.future.result(timeout=_SEARCH_TIMEOUT_S)

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
            self._run(batch)

    def _run(self, batch: list[_Pending]) -> None:
        by_topk: dict[int, list[_Pending]] = {}
        for item in batch:
            by_topk.setdefault(item.topk, []).append(item)
        for topk, items in by_topk.items():
            unique = list(dict.fromkeys(q for item in items for q in item.queries))
            try:
                hits = dict(zip(unique, self.index.search_batch(unique, topk), strict=True))
            except Exception as error:  # answered as HTTP 500 by the handler
                for item in items:
                    item.future.set_exception(error)
                continue
            with self.stats._lock:
                self.stats.batches += 1
                self.stats.largest_batch = max(self.stats.largest_batch, len(unique))
            for item in items:
                item.future.set_result([hits[q] for q in item.queries])


def parse_request(body: bytes, default_topk: int) -> tuple[list[str], int, bool]:
    """Validate a ``/retrieve`` body; ``(queries, topk, return_scores)`` or ``RequestError``."""
    try:
        request = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RequestError(f"body is not valid JSON: {error}") from None
    if not isinstance(request, dict):
        raise RequestError("body must be a JSON object with a 'queries' list")
    queries = request.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise RequestError("'queries' must be a list of strings")
    if len(queries) > MAX_QUERIES_PER_REQUEST:
        raise RequestError(f"at most {MAX_QUERIES_PER_REQUEST} queries per request")
    topk = request.get("topk")
    if isinstance(topk, bool) or not isinstance(topk, int | None):
        raise RequestError(f"'topk' must be an integer from 0 to {MAX_TOPK}, got {topk!r}")
    if not topk:  # Search-R1: a missing, null or 0 topk means the server's default
        topk = default_topk
    if not 1 <= topk <= MAX_TOPK:
        raise RequestError(f"'topk' must be an integer from 0 to {MAX_TOPK}, got {topk!r}")
    return_scores = request.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise RequestError(f"'return_scores' must be true or false, got {return_scores!r}")
    return queries, topk, return_scores


def format_result(hits: Sequence[Sequence[Hit]], return_scores: bool) -> dict[str, Any]:
    """Search-R1's response body for the hits of each query."""
    result: list[list[Any]] = []
    for query_hits in hits:
        documents = [{"id": doc.doc_id, "contents": doc.contents} for doc, _ in query_hits]
        if return_scores:
            scores = [score for _, score in query_hits]
            pairs = zip(documents, scores, strict=True)
            result.append([{"document": d, "score": s} for d, s in pairs])
        else:
            result.append(documents)
    return {"result": result}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(
        self,
        address: tuple[str, int],
        index: Searchable,
        topk: int,
        batcher: QueryBatcher,
        index_facts: Mapping[str, Any],
    ):
        super().__init__(address, _Handler)
        self.index = index
        self.default_topk = topk
        self.batcher = batcher
        self.stats = batcher.stats
        self.index_facts = dict(index_facts)
        self.started = time.monotonic()
        self.ready_at = datetime.now(timezone.utc).isoformat(timespec="seconds")

    def health(self) -> dict[str, Any]:
        """The ``GET /health`` body."""
        kind, model = describe_searcher(self.index)
        return {
            "status": "ok",
            "retriever": kind,
            "model": model,
            "corpus_id": self.index.corpus_id,
            "documents": len(self.index),
            "index": self.index_facts,
            "ready_at": self.ready_at,
            "uptime_s": round(time.monotonic() - self.started, 3),
            "default_topk": self.default_topk,
            **self.stats.as_dict(),
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse their connections
    disable_nagle_algorithm = True  # else headers and body as two writes cost ~40 ms each
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - the http.server naming
        if self.path.split("?")[0] != "/health":
            self._reply(404, {"error": f"no such endpoint: GET {self.path}"})
            return
        self._reply(200, self.server.health())

    def do_POST(self) -> None:  # noqa: N802 - the http.server naming
        body = self._read_body()
        if body is None:
            return
        if self.path.split("?")[0] != "/retrieve":
            self._reply(404, {"error": f"no such endpoint: POST {self.path}"})
            return
        stats = self.server.stats
        try:
            queries, topk, return_scores = parse_request(body, self.server.default_topk)
        except RequestError as error:
            with stats._lock:
                stats.errors += 1
            self._reply(400, {"error": str(error)})
            return
        with stats._lock:
            stats.requests += 1
            stats.queries += len(queries)
        try:
            hits = self.server.batcher.search(queries, topk) if queries else []
        except Exception as error:
            with stats._lock:
                stats.errors += 1
            self._reply(500, {"error": f"search failed: {type(error).__name__}: {error}"})
            return
        self._reply(200, format_result(hits, return_scores))

    def _read_body(self) -> bytes | None:
        length_header = self.headers.get("Content-Length")
        try:
            length = int(length_header) if length_header is not None else -1
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            self._reply(411, {"error": "a Content-Length header is required"})
            return None
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._reply(413, {"error": f"body larger than {MAX_BODY_BYTES} bytes"})
            return None
        return self.rfile.read(length)

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request
        pass


class RetrieverServerHandle:
    """A server running on a background thread. ``url`` is its base URL; ``stop()`` ends it."""

    def __init__(self, server: _Server, batcher: QueryBatcher) -> None:
        self._server = server
        self._batcher = batcher
        host, port = server.server_address[:2]
        self.host = str(host)
        self.port = int(port)
        self.url = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        self._stopped = False

    @property
    def stats(self) -> ServerStats:
        return self._server.stats

    def stop(self) -> None:
        """Stop accepting requests and release the port (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        self._server.shutdown()
        self._server.server_close()
        self._batcher.stop()
        self._thread.join(timeout=5)

    def wait(self) -> None:
        """Block until ``stop()`` is called from another thread (or a KeyboardInterrupt)."""
        while self._thread.is_alive():
            self._thread.join(timeout=0.5)

    def __enter__(self) -> RetrieverServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_retriever_server(
    corpus: Corpus | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    index: Searchable | None = None,
    topk: int = DEFAULT_TOPK,
    batch_window_s: float = 0.002,
    max_batch_queries: int = 512,
    index_facts: Mapping[str, Any] | None = None,
) -> RetrieverServerHandle:
    """Serve ``corpus`` (in-memory BM25) or a ready ``index`` (BM25, dense or hybrid) on
    ``host:port``; ``port=0`` picks a free port. ``index_facts`` is ``/health``'s ``index``
    (``open_index`` makes it)."""
    if index is None:
        if corpus is None:
            raise ValueError("give a corpus or an index")
        started = time.perf_counter()
        index = get_index(corpus)
        index_facts = index_facts or {"bm25": _fact("built", started)}
    if not 1 <= topk <= MAX_TOPK:
        raise ValueError(f"topk must be from 1 to {MAX_TOPK}, got {topk}")
    batcher = QueryBatcher(index, ServerStats(), batch_window_s, max_batch_queries)
    try:
        server = _Server((host, port), index, topk, batcher, index_facts or {})
    except OSError:
        batcher.stop()
        raise
    return RetrieverServerHandle(server, batcher)


def open_index(
    source: Corpus | PathLike,
    retriever: str = "bm25",
    *,
    dense_model: str | None = None,
    cache_dir: PathLike | None = None,
    use_cache: bool = True,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
) -> tuple[Searchable, dict[str, Any]]:
    """The index a server answers from, and its facts for ``/health``: per part (``bm25``,
    ``dense``), ``source`` (``"built"`` or ``"loaded"`` from the disk cache) and ``seconds``.

    ``source`` is a ``Corpus`` (BM25 in memory, cached by ``index_store``) or a corpus file:
    with ``use_cache`` its memory-mapped ``file_index`` (built once into the cache, documents
    read on demand; dense retrieval reads its documents there too), else it is loaded into
    memory. Dense embeddings are cached under ``cache_dir`` unless ``use_cache=False``.
    """
    check_retriever(retriever)
    facts: dict[str, Any] = {}
    sparse: Searchable | None = None
    documents: DocumentSource
    if retriever == "dense" and (isinstance(source, Corpus) or not use_cache):
        documents = source if isinstance(source, Corpus) else load_corpus_file(source)
    else:
        started = time.perf_counter()
        sparse, documents, bm25_facts = _open_bm25(source, cache_dir, use_cache)
        bm25_facts["seconds"] = round(time.perf_counter() - started, 3)
        if retriever != "dense":
            facts["bm25"] = bm25_facts
        if retriever == "bm25":
            return sparse, facts
    dense = load_or_build_dense_index(
        documents,
        dense_model or DEFAULT_DENSE_MODEL,
        cache_dir=cache_dir,
        use_cache=use_cache,
        query_prefix=query_prefix,
        passage_prefix=passage_prefix,
    )
    facts["dense"] = {
        "source": dense.source,
        "seconds": round(dense.seconds, 3),
        "dimension": dense.dimension,
        "gpu": dense.on_gpu,
    }
    if retriever == "dense" or sparse is None:
        return dense, facts
    return HybridIndex(sparse, dense), facts


def _open_bm25(
    source: Corpus | PathLike, cache_dir: PathLike | None, use_cache: bool
) -> tuple[Searchable, DocumentSource, dict[str, Any]]:
    """The BM25 index of ``source``, where its documents are, and facts about it."""
    if not isinstance(source, Corpus) and use_cache:
        _, built = build_corpus_index(source, cache_dir)
        file_index = open_corpus_index(source, cache_dir)
        facts = {key: v for key, v in file_index.facts().items() if key != "kind"}
        return file_index, file_index, {"source": "built" if built else "loaded", **facts}
    corpus = source if isinstance(source, Corpus) else load_corpus_file(source)
    if not use_cache:
        return get_index(corpus), corpus, {"source": "built", "storage": "memory"}
    directory = index_dir(corpus, cache_dir)
    before = _identity(directory)
    index = load_or_build_index(corpus, cache_dir)
    # A (re)built index is renamed into place: a new directory.
    loaded = before is not None and _identity(directory) == before
    return index, corpus, {"source": "loaded" if loaded else "built", "storage": "memory"}


def _identity(directory: Path) -> tuple[int, int] | None:
    try:
        stat = directory.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def _describe_index(index: Searchable, facts: Mapping[str, Any]) -> str:
    """One line: ``retriever: dense (model); dense built in 1.2 s``."""
    kind, model = describe_searcher(index)
    parts = [f"{name} {fact['source']} in {fact['seconds']:.1f} s" for name, fact in facts.items()]
    return f"retriever: {kind}" + f" ({model})" * bool(model) + "".join(f"; {p}" for p in parts)


def _fact(source: str, started: float) -> dict[str, Any]:
    return {"source": source, "seconds": round(time.perf_counter() - started, 3)}


def serve_corpus_file(
    corpus_path: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    topk: int = DEFAULT_TOPK,
    cache_dir: str | None = None,
    use_cache: bool = True,
    batch_window_s: float = 0.002,
    retriever: str = "bm25",
    dense_model: str | None = None,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
) -> int:
    """``agentflow-env serve-retriever``: serve a corpus file until Ctrl-C or SIGTERM."""
    check_retriever(retriever)
    index, facts = open_index(
        corpus_path,
        retriever,
        dense_model=dense_model,
        cache_dir=cache_dir,
        use_cache=use_cache,
        query_prefix=query_prefix,
        passage_prefix=passage_prefix,
    )
    handle = start_retriever_server(
        host=host,
        port=port,
        index=index,
        topk=topk,
        batch_window_s=batch_window_s,
        index_facts=facts,
    )
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: handle.stop())
    print(f"serving {len(index)} documents at {handle.url}/retrieve", flush=True)
    print(_describe_index(index, facts), flush=True)
    try:
        handle.wait()
    except KeyboardInterrupt:
        pass
    finally:
        handle.stop()
    return 0


__all__ = [
    "DEFAULT_TOPK",
    "MAX_TOPK",
    "QueryBatcher",
    "RequestError",
    "RetrieverServerHandle",
    "ServerStats",
    "format_result",
    "open_index",
    "parse_request",
    "serve_corpus_file",
    "start_retriever_server",
]
