"""A retriever server speaking Search-R1's protocol (and the dialects of SkyRL-gym's, verl-agent's
and GEM's search tools) over a BM25, dense or hybrid index.

The protocol and the HTTP side (an aiohttp application) are in ``server_app``, the batching of
concurrent requests' queries into one ``search_batch`` call in ``batcher``; this module opens
the index a server answers from (``open_index``) and runs ``agentflow-env serve-retriever``
(``serve_corpus_file``). ``serve_corpus_file(..., workers=N)`` (``--workers N``) runs N server
processes on one port (``SO_REUSEPORT``: the kernel spreads the connections over them), each
opening the same memory-mapped index from the disk cache; ``/health`` then names the ``worker``
that answered, and its counters are that worker's.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from agentflow_env.retrieval.batcher import QueryBatcher, ServerStats
from agentflow_env.retrieval.bm25 import Searchable, get_index
from agentflow_env.retrieval.corpus import Corpus, PathLike, load_corpus_file
from agentflow_env.retrieval.dense import (
    DEFAULT_DENSE_MODEL,
    DocumentSource,
    load_or_build_dense_index,
)
from agentflow_env.retrieval.file_index import build_corpus_index, open_corpus_index
from agentflow_env.retrieval.hybrid import HybridIndex, check_retriever, describe_searcher
from agentflow_env.retrieval.index_store import index_dir, load_or_build_index
from agentflow_env.retrieval.server_app import (
    DEFAULT_TOPK,
    MAX_TOPK,
    RequestError,
    RetrieveRequest,
    RetrieverServerHandle,
    format_reply,
    format_result,
    parse_request,
    start_retriever_server,
)


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
    workers: int = 1,
) -> int:
    """``agentflow-env serve-retriever``: serve a corpus file until Ctrl-C or SIGTERM.

    ``workers`` > 1 starts that many server processes on one port (``SO_REUSEPORT``, Linux):
    this one opens (or builds) the index first, then each other worker opens it from the disk
    cache; memory-mapped parts (the BM25 arrays, the document store) are shared through the
    page cache, the rest (the BM25 vocabulary, a dense encoder) is each worker's own.
    """
    check_retriever(retriever)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    options: dict[str, Any] = {
        "retriever": retriever,
        "dense_model": dense_model,
        "cache_dir": cache_dir,
        "use_cache": use_cache,
        "query_prefix": query_prefix,
        "passage_prefix": passage_prefix,
    }
    handle, index, facts = _open_and_serve(
        corpus_path, options, (host, port, topk, batch_window_s), (0, workers)
    )
    serve = (handle.host, handle.port, topk, batch_window_s)
    others: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []
    try:
        others = _start_workers(workers, corpus_path, options, serve)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: handle.stop())
        print(f"serving {len(index)} documents at {handle.url}/retrieve", flush=True)
        print(_describe_index(index, facts) + f"; {workers} workers" * (workers > 1), flush=True)
        handle.wait()
    except KeyboardInterrupt:
        pass
    finally:
        handle.stop()
        _stop_workers(others)
    return 0


def _open_and_serve(
    corpus_path: str,
    options: Mapping[str, Any],
    serve: tuple[str, int, int, float],
    worker: tuple[int, int],
) -> tuple[RetrieverServerHandle, Searchable, dict[str, Any]]:
    """Open the corpus's index and serve it as worker ``worker`` (number, of how many) at
    ``serve`` (host, port, topk, batch window); several workers share the port."""
    host, port, topk, batch_window_s = serve
    index, facts = open_index(corpus_path, **options)
    handle = start_retriever_server(
        host=host,
        port=port,
        index=index,
        topk=topk,
        batch_window_s=batch_window_s,
        index_facts=facts,
        reuse_port=worker[1] > 1,
        worker=worker,
    )
    return handle, index, facts


def _start_workers(
    workers: int,
    corpus_path: str,
    options: Mapping[str, Any],
    serve: tuple[str, int, int, float],
) -> list[tuple[multiprocessing.process.BaseProcess, Connection]]:
    """Workers 1..``workers - 1``, each its own process, started and ready to answer."""
    context = multiprocessing.get_context("spawn")
    started: list[tuple[multiprocessing.process.BaseProcess, Connection]] = []
    try:
        for number in range(1, workers):
            ours, theirs = context.Pipe()
            process = context.Process(
                target=_worker_main,
                args=(theirs, corpus_path, dict(options), serve, (number, workers)),
                name=f"retriever-worker-{number}",
                daemon=True,
            )
            process.start()
            theirs.close()
            started.append((process, ours))
        for number, (_, pipe) in enumerate(started, start=1):
            try:
                problem = pipe.recv()
            except EOFError:
                problem = "it exited"
            if problem is not None:
                raise RuntimeError(f"retriever worker {number} did not start: {problem}")
    except BaseException:
        _stop_workers(started)
        raise
    return started


def _stop_workers(workers: list[tuple[multiprocessing.process.BaseProcess, Connection]]) -> None:
    for _, pipe in workers:
        with contextlib.suppress(OSError):  # it has exited already
            pipe.send("stop")
        pipe.close()
    for process, _ in workers:
        process.join(timeout=10)
        if process.is_alive():
            process.terminate()
            process.join(timeout=5)


def _worker_main(
    pipe: Connection,
    corpus_path: str,
    options: dict[str, Any],
    serve: tuple[str, int, int, float],
    worker: tuple[int, int],
) -> None:
    """One more worker (its own process): serve until the first worker says stop or exits."""
    try:
        handle, _, _ = _open_and_serve(corpus_path, options, serve, worker)
    except Exception as error:
        pipe.send(f"{type(error).__name__}: {error}")
        return
    try:
        pipe.send(None)
        pipe.recv()  # "stop", or EOFError when the first worker is gone
    except (EOFError, OSError, KeyboardInterrupt):
        pass
    finally:
        handle.stop()


__all__ = [
    "DEFAULT_TOPK",
    "MAX_TOPK",
    "QueryBatcher",
    "RequestError",
    "RetrieveRequest",
    "RetrieverServerHandle",
    "ServerStats",
    "format_reply",
    "format_result",
    "open_index",
    "parse_request",
    "serve_corpus_file",
    "start_retriever_server",
]
