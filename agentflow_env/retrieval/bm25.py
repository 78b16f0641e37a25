"""In-memory BM25 retrieval over a ``Corpus``, with a shared, bounded, thread-safe index cache."""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import bm25s
import bm25s.selection
import numpy as np

from agentflow_env.retrieval.corpus import Corpus, Document

TOKEN_PATTERN = re.compile(r"\w+")
"""What ``tokenize_for_search`` finds in lowercased text (the streaming build uses it too)."""

Hit = tuple[Document, float]


class Searchable(Protocol):
    """What a search tool or the retriever server needs of an index, in memory or on disk."""

    @property
    def corpus_id(self) -> str: ...

    def __len__(self) -> int: ...

    def search(self, query: str, k: int) -> list[Hit]: ...

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]: ...


def tokenize_for_search(text: str) -> list[str]:
    """Lowercased Unicode word tokens; no stemming or stopwords (queries are often short names)."""
    return TOKEN_PATTERN.findall(text.lower())


class BM25Index:
    """A BM25 (bm25s, Lucene scoring) index over ``doc.contents`` of every document.

    Read-only after construction, so one instance can serve many threads and environments.
    """

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus
        self._vocab: dict[str, int] = {}
        token_ids: list[list[int]] = []
        for doc in corpus.documents:
            ids = []
            for token in tokenize_for_search(doc.contents):
                token_id = self._vocab.get(token)
                if token_id is None:
                    token_id = self._vocab[token] = len(self._vocab)
                ids.append(token_id)
            token_ids.append(ids)
        self._retriever: bm25s.BM25 | None = None
        if self._vocab:  # bm25s cannot index a corpus without a single token
            self._retriever = bm25s.BM25()
            self._retriever.index((token_ids, dict(self._vocab)), show_progress=False)

    @classmethod
    def from_parts(
        cls, corpus: Corpus, vocab: dict[str, int], retriever: bm25s.BM25 | None
    ) -> BM25Index:
        """An index from saved parts (see ``index_store``), without re-tokenizing the corpus."""
        index = cls.__new__(cls)
        index.corpus = corpus
        index._vocab = dict(vocab)
        index._retriever = retriever
        return index

    @property
    def vocab(self) -> dict[str, int]:
        """A copy of the token -> id vocabulary the bm25s index was built with."""
        return dict(self._vocab)

    @property
    def retriever(self) -> bm25s.BM25 | None:
        """The underlying bm25s index (``None`` for a corpus without a single token)."""
        return self._retriever

    @property
    def corpus_id(self) -> str:
        return self.corpus.corpus_id

    def __len__(self) -> int:
        return len(self.corpus)

    def search(self, query: str, k: int) -> list[Hit]:
        """The top ``k`` documents with a positive score, best first."""
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """``search`` for many queries with a single bm25s call."""
        documents = self.corpus.documents
        ranked = rank_rows(self._retriever, self._vocab, queries, k, len(documents))
        return [[(documents[row], score) for row, score in rows] for rows in ranked]


def rank_rows(
    retriever: bm25s.BM25 | None,
    vocab: Mapping[str, int],
    queries: Sequence[str],
    k: int,
    n_docs: int,
) -> list[list[tuple[int, float]]]:
    """The top ``k`` ``(row, score)`` pairs with a positive score per query, best first.

    Ties keep corpus order. bm25s must only see ids from its own vocabulary: query tokens
    outside ``vocab`` are dropped, and a query without any gets no hits.
    """
    results: list[list[tuple[int, float]]] = [[] for _ in queries]
    k = min(k, n_docs)
    if retriever is None or k <= 0:
        return results
    positions: list[int] = []
    query_ids: list[list[int]] = []
    for position, query in enumerate(queries):
        ids = [vocab[t] for t in tokenize_for_search(query) if t in vocab]
        if ids:
            positions.append(position)
            query_ids.append(ids)
    if not query_ids:
        return results
    for position, ids in zip(positions, query_ids, strict=True):
        row_scores, row_indices = _top_k(retriever, ids, k)
        hits = [
            (int(index), float(score))
            for index, score in zip(row_indices.tolist(), row_scores.tolist(), strict=True)
            if score > 0
        ]
        hits.sort(key=lambda hit: (-hit[1], hit[0]))  # ties keep corpus order
        results[position] = hits
    return results


def _top_k(retriever: bm25s.BM25, ids: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, rows)`` of the top ``k`` for one query of token ids: what
    ``retriever.retrieve([ids], k=k)`` gives, without its per-call overhead (argument checks, a
    progress bar, stacking the rows), which is most of a search of a small corpus.

    ``retrieve`` runs, per query on the numpy backend, exactly ``get_scores`` then
    ``bm25s.selection.topk``; so do we, for the same scores and, at a tie on the k-th score, the
    same rows. Anything else (the numba backend, an id ``retrieve`` would filter out) goes
    through ``retrieve`` itself.
    """
    known = getattr(retriever, "unique_token_ids_set", None)
    if retriever.backend != "numpy" or known is None or not known.issuperset(ids):
        indices, scores = retriever.retrieve([ids], k=k, show_progress=False)
        return scores[0], indices[0]
    scores = retriever.get_scores(ids)
    return bm25s.selection.topk(scores, k=k, backend="auto", sorted=True)


_DEFAULT_CACHE_SIZE = 256
_cache: OrderedDict[str, BM25Index] = OrderedDict()
_cache_size = _DEFAULT_CACHE_SIZE
_cache_lock = threading.Lock()
_build_locks: dict[str, threading.Lock] = {}


def get_index(corpus: Corpus, *, build: Callable[[Corpus], BM25Index] = BM25Index) -> BM25Index:
    """The process-wide index for ``corpus.corpus_id``, made at most once even under races.

    ``build`` makes a missing index (default: build it in memory; ``index_store`` loads it from
    disk instead). The cache is LRU-bounded (``set_index_cache_size``); an evicted index is made
    again on demand.
    """
    key = corpus.corpus_id
    with _cache_lock:
        index = _lookup(key)
        if index is not None:
            return index
        build_lock = _build_locks.setdefault(key, threading.Lock())
    with build_lock:
        with _cache_lock:
            index = _lookup(key)
            if index is not None:
                return index
        try:
            index = build(corpus)
            with _cache_lock:
                _cache[key] = index
                _evict()
        finally:
            with _cache_lock:
                if _build_locks.get(key) is build_lock:
                    del _build_locks[key]
    return index


def set_index_cache_size(size: int) -> None:
    """Keep at most ``size`` indexes (least recently used are dropped first)."""
    if size < 1:
        raise ValueError(f"index cache size must be >= 1, got {size}")
    global _cache_size
    with _cache_lock:
        _cache_size = size
        _evict()


def clear_index_cache() -> None:
    """Drop every cached index (tests, or to free memory)."""
    with _cache_lock:
        _cache.clear()


def cached_index_ids() -> list[str]:
    """Corpus ids currently cached, least recently used first."""
    with _cache_lock:
        return list(_cache)


def _lookup(key: str) -> BM25Index | None:
    index = _cache.get(key)
    if index is not None:
        _cache.move_to_end(key)
    return index


def _evict() -> None:
    while len(_cache) > _cache_size:
        _cache.popitem(last=False)


__all__ = [
    "BM25Index",
    "Hit",
    "Searchable",
    "TOKEN_PATTERN",
    "cached_index_ids",
    "clear_index_cache",
    "get_index",
    "rank_rows",
    "set_index_cache_size",
    "tokenize_for_search",
]
