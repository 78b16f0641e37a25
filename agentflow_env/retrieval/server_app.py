"""The retriever server's HTTP side: Search-R1's protocol, and its peers' dialects, as an aiohttp
application.

``POST /retrieve`` with ``{"queries": [str], "topk": int, "return_scores": bool}`` (Search-R1)
answers ``{"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}``, or, without
scores, one list of ``{"id", "contents"}`` documents per query. The peers send one query:

- ``{"query": str, ...}`` in JSON (SkyRL-gym's and verl-agent's search tools) gets
  ``{"result": [[{"document": ..., "score": float}, ...]]}``: one list, for its one query, of
  ``{"document"}`` items (``"score"`` too with ``return_scores``), which their parser reads;
- the same object in MessagePack (GEM's search tool; a body whose first byte is a MessagePack
  map) gets ``{"result": [{"document": ..., "score": float}, ...]}`` in MessagePack: the list
  of items itself, as GEM reads it (needs the ``msgpack`` package, else HTTP 415).

A body with both ``queries`` and ``query`` is refused: the two answer in different shapes. As in
Search-R1's server, a ``topk`` that is missing, ``null`` or ``0`` means the server's default. Bad
requests get HTTP 400 with ``{"error": ...}`` (in JSON, whatever the request's encoding), as do a
POST without a length (411), a body over ``MAX_BODY_BYTES`` (413; aiohttp's own, in plain text,
for a chunked one), an unknown path (404) and another method (501). HTTP that aiohttp cannot
parse gets aiohttp's own 400.

``GET /health`` reports the index (``retriever``, ``model``, ``corpus_id``, ``documents``,
``index``: per part where it came from, ``"built"`` or ``"loaded"`` from the disk cache, and the
seconds it took; ``ready_at``: when serving began, UTC ISO 8601), ``default_topk``, ``uptime_s``,
the ``worker`` that answered (of ``workers`` sharing the port) and the counters of
``ServerStats``.

aiohttp's server runs on an event loop of its own thread and hands the queries to a
``QueryBatcher`` (its own thread), off the loop. aiohttp is imported when a server starts,
msgpack when a MessagePack body arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from agentflow_env.retrieval.batcher import SEARCH_TIMEOUT_S, QueryBatcher, ServerStats
from agentflow_env.retrieval.bm25 import Hit, Searchable, get_index
from agentflow_env.retrieval.corpus import Corpus
from agentflow_env.retrieval.hybrid import describe_searcher

if TYPE_CHECKING:
    from aiohttp import web

DEFAULT_TOPK = 3
MAX_TOPK = 1000
MAX_QUERIES_PER_REQUEST = 4096
MAX_BODY_BYTES = 16 * 1024 * 1024
_BACKLOG = 256
_SHUTDOWN_S = 1.0  # how long stop() lets the requests in flight finish
_LINGER_S = 1.0  # how long the rest of a refused body is read (and dropped) before closing


_JSON_TYPE = "application/json; charset=utf-8"
_MSGPACK_TYPE = "application/msgpack"
# The first byte of a MessagePack map (fixmap, map 16, map 32); no JSON text starts with one.
_MSGPACK_MAP_BYTES = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}

# How a request came, which is how its reply goes: Search-R1's ``queries`` list, one JSON
# ``query`` (SkyRL-gym, verl-agent), one MessagePack ``query`` (GEM).
Shape = Literal["queries", "query", "msgpack"]


class RequestError(ValueError):
    """A malformed ``/retrieve`` request (answered with HTTP ``status``, 400)."""

    status = 400


class UnsupportedBody(RequestError):
    """A MessagePack body without the ``msgpack`` package on the server (HTTP 415)."""

    status = 415


@dataclass(frozen=True)
class RetrieveRequest:
    """A valid ``/retrieve`` body: its queries, ``topk``, ``return_scores`` and its ``shape``."""

    queries: list[str]
    topk: int
    return_scores: bool
    shape: Shape = "queries"


def parse_request(body: bytes, default_topk: int) -> RetrieveRequest:
    """Validate a ``/retrieve`` body (JSON, or a MessagePack map); ``RequestError`` if bad."""
    packed = bool(body) and body[0] in _MSGPACK_MAP_BYTES
    request = _unpack(body) if packed else _load_json(body)
    if not isinstance(request, dict):
        raise RequestError("body must be a JSON object with a 'queries' list or a 'query'")
    queries, shape = _queries(request, packed)
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
    return RetrieveRequest(queries, topk, return_scores, shape)


def _queries(request: dict[Any, Any], packed: bool) -> tuple[list[str], Shape]:
    """The queries of a request (a MessagePack one when ``packed``) and its shape."""
    if "queries" in request and "query" in request:
        raise RequestError("give 'queries' (a list of strings) or 'query' (one string), not both")
    if "query" in request:
        query = request["query"]
        if not isinstance(query, str):
            raise RequestError(f"'query' must be a string, got {query!r:.60}")
        return [query], "msgpack" if packed else "query"
    if packed:
        raise RequestError("a MessagePack body (GEM's search tool) needs a 'query' string")
    queries = request.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise RequestError("'queries' must be a list of strings (or 'query' one string)")
    return queries, "queries"


def _load_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RequestError(f"body is not valid JSON: {error}") from None


def _unpack(body: bytes) -> Any:
    try:
        import msgpack
    except ImportError:
        raise UnsupportedBody(
            "a MessagePack body (GEM's search tool) needs the msgpack package on the server: "
            "pip install 'agentflow-env[gem]'"
        ) from None
    try:
        return msgpack.unpackb(body)
    except (ValueError, TypeError) as error:  # msgpack's errors are ValueErrors
        problem = str(error) or type(error).__name__
        raise RequestError(f"body is not valid MessagePack: {problem}") from None


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


def format_reply(request: RetrieveRequest, hits: Sequence[Sequence[Hit]]) -> tuple[bytes, str]:
    """The reply to ``request`` in the shape its client reads: the body and its Content-Type."""
    if request.shape == "queries":
        return _to_json(format_result(hits, request.return_scores)), _JSON_TYPE
    (query_hits,) = hits
    items: list[dict[str, Any]] = []
    for doc, score in query_hits:
        item: dict[str, Any] = {"document": {"id": doc.doc_id, "contents": doc.contents}}
        if request.return_scores:
            item["score"] = float(score)
        items.append(item)
    if request.shape == "query":
        return _to_json({"result": [items]}), _JSON_TYPE
    import msgpack  # parse_request found it

    return msgpack.packb({"result": items}), _MSGPACK_TYPE


def _to_json(payload: Mapping[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


class _Service:
    """What one server answers from (the index, the batcher, counters) and its handlers."""

    def __init__(
        self,
        index: Searchable,
        topk: int,
        batcher: QueryBatcher,
        index_facts: Mapping[str, Any],
        worker: tuple[int, int],
    ) -> None:
        self.index = index
        self.default_topk = topk
        self.batcher = batcher
        self.stats = batcher.stats
        self.index_facts = dict(index_facts)
        self.worker, self.workers = worker
        self.started = time.monotonic()
        self.ready_at = datetime.now(timezone.utc).isoformat(timespec="seconds")

    def application(self) -> web.Application:
        from aiohttp import web

        # Larger bodies sent without a Content-Length (chunked) get aiohttp's own 413.
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/health", self.health, allow_head=False)
        app.router.add_post("/retrieve", self.retrieve)
        app.router.add_route("*", "/{path:.*}", self.elsewhere)
        return app

    async def health(self, request: web.Request) -> web.Response:
        kind, model = describe_searcher(self.index)
        return _reply(
            200,
            {
                "status": "ok",
                "retriever": kind,
                "model": model,
                "corpus_id": self.index.corpus_id,
                "documents": len(self.index),
                "index": self.index_facts,
                "ready_at": self.ready_at,
                "uptime_s": round(time.monotonic() - self.started, 3),
                "default_topk": self.default_topk,
                "worker": self.worker,
                "workers": self.workers,
                **self.stats.as_dict(),
            },
        )

    async def retrieve(self, request: web.Request) -> web.Response:
        length = request.content_length
        if length is None and "chunked" not in request.headers.get("Transfer-Encoding", "").lower():
            return _reply(411, {"error": "a Content-Length header is required"}, close=True)
        if length is not None and length > MAX_BODY_BYTES:  # refused before it is read
            return _reply(413, {"error": f"body larger than {MAX_BODY_BYTES} bytes"}, close=True)
        stats = self.stats
        try:
            parsed = parse_request(await request.read(), self.default_topk)
        except RequestError as error:
            with stats._lock:
                stats.errors += 1
            return _reply(error.status, {"error": str(error)})
        with stats._lock:
            stats.requests += 1
            stats.queries += len(parsed.queries)
        if not parsed.queries:
            return _reply(200, format_result([], parsed.return_scores))
        future = self.batcher.submit(parsed.queries, parsed.topk)
        try:
            hits = await asyncio.wait_for(asyncio.wrap_future(future), SEARCH_TIMEOUT_S)
        except Exception as error:
            with stats._lock:
                stats.errors += 1
            return _reply(500, {"error": f"search failed: {type(error).__name__}: {error}"})
        return _respond(200, *format_reply(parsed, hits))

    async def elsewhere(self, request: web.Request) -> web.Response:
        if request.method in ("GET", "POST"):
            return _reply(404, {"error": f"no such endpoint: {request.method} {request.raw_path}"})
        return _reply(501, {"error": f"unsupported method {request.method[:20]!r}"}, close=True)


def _reply(status: int, payload: dict[str, Any], close: bool = False) -> web.Response:
    return _respond(status, _to_json(payload), _JSON_TYPE, close)


def _respond(status: int, body: bytes, content_type: str, close: bool = False) -> web.Response:
    from aiohttp import web

    response = web.Response(status=status, body=body, headers={"Content-Type": content_type})
    if close:
        response.force_close()
    return response


class RetrieverServerHandle:
    """A server running on a background thread. ``url`` is its base URL; ``stop()`` ends it."""

    def __init__(self, service: _Service, host: str, port: int, reuse_port: bool) -> None:
        self._service = service
        self._batcher = service.batcher
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="retriever-server", daemon=True)
        self._thread.start()
        self._stopped = False
        try:
            listening = self._listen(host, port, reuse_port)
            self._runner, address = asyncio.run_coroutine_threadsafe(listening, self._loop).result()
        except BaseException:
            self._end_loop()
            raise
        self.host = str(address[0])
        self.port = int(address[1])
        self.url = f"http://{f'[{self.host}]' if ':' in self.host else self.host}:{self.port}"

    async def _listen(self, host: str, port: int, reuse_port: bool) -> tuple[web.AppRunner, Any]:
        from aiohttp import web

        runner = web.AppRunner(
            self._service.application(),
            access_log=None,
            shutdown_timeout=_SHUTDOWN_S,
            lingering_time=_LINGER_S,
        )
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=_BACKLOG, reuse_port=reuse_port or None)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        return runner, runner.addresses[0]

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def _end_loop(self) -> None:
        with contextlib.suppress(RuntimeError):  # already closed
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._batcher.stop()

    @property
    def stats(self) -> ServerStats:
        return self._service.stats

    def stop(self) -> None:
        """Stop accepting requests, answer those in flight (for up to a second), close the
        connections and release the port (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(RuntimeError, FutureTimeout):  # the loop is gone or stuck
            cleanup = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            cleanup.result(timeout=2 * _SHUTDOWN_S + 5)
        self._end_loop()

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
    reuse_port: bool = False,
    worker: tuple[int, int] = (0, 1),
) -> RetrieverServerHandle:
    """Serve ``corpus`` (in-memory BM25) or a ready ``index`` (BM25, dense or hybrid) on
    ``host:port``; ``port=0`` picks a free port. ``index_facts`` is ``/health``'s ``index``
    (``open_index`` makes it). ``reuse_port`` lets other servers (processes) listen on the
    same port (``SO_REUSEPORT``); ``worker`` is ``(this server's number, how many share the
    port)``, for ``/health``."""
    if index is None:
        if corpus is None:
            raise ValueError("give a corpus or an index")
        started = time.perf_counter()
        index = get_index(corpus)
        built = {"source": "built", "seconds": round(time.perf_counter() - started, 3)}
        index_facts = index_facts or {"bm25": built}
    if not 1 <= topk <= MAX_TOPK:
        raise ValueError(f"topk must be from 1 to {MAX_TOPK}, got {topk}")
    batcher = QueryBatcher(index, ServerStats(), batch_window_s, max_batch_queries)
    service = _Service(index, topk, batcher, index_facts or {}, worker)
    return RetrieverServerHandle(service, host, port, reuse_port)


__all__ = [
    "DEFAULT_TOPK",
    "MAX_BODY_BYTES",
    "MAX_QUERIES_PER_REQUEST",
    "MAX_TOPK",
    "RequestError",
    "RetrieveRequest",
    "RetrieverServerHandle",
    "Shape",
    "UnsupportedBody",
    "format_reply",
    "format_result",
    "parse_request",
    "start_retriever_server",
]
