"""Hybrid retrieval (reciprocal-rank fusion of BM25 and dense), and the choice of retriever.

Reciprocal-rank fusion (Cormack et al., 2009) scores a document ``sum(1 / (k + rank))`` over
the rankings it appears in (ranks from 1, ``k = 60``); a document missing from a ranking gets
nothing from it. ``HybridIndex`` fuses the top ``max(k, depth)`` (default depth 100) of each
retriever and keeps the best ``k``. Ties (equal fused scores) go to the document with the
better single rank, then to the one BM25 ranked.

``BM25Index``, ``file_index.CorpusFileIndex``, ``DenseIndex`` and ``HybridIndex`` are all
``bm25.Searchable`` (``corpus_id``, ``len``, ``search``, ``search_batch``); ``get_searcher``
makes the process-wide one for a corpus and a ``RetrieverKind``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Literal, TypeVar, get_args

from agentflow_env.retrieval.bm25 import BM25Index, Hit, Searchable, get_index
from agentflow_env.retrieval.corpus import Corpus, Document, PathLike
from agentflow_env.retrieval.dense import DenseIndex, get_dense_index
from agentflow_env.retrieval.file_index import CorpusFileIndex

RetrieverKind = Literal["bm25", "dense", "hybrid"]
RETRIEVER_KINDS: tuple[str, ...] = get_args(RetrieverKind)
RRF_K = 60
FUSION_DEPTH = 100

T = TypeVar("T", bound=Hashable)


def reciprocal_rank_fusion(
    rankings: Iterable[Sequence[T]], k: int = RRF_K
) -> list[tuple[T, float]]:
    """Items of all ``rankings`` (each best first) by fused score, best first, with the score.

    An item repeated within one ranking counts at its first rank only.
    """
    scores: dict[T, float] = {}
    first_seen: dict[T, tuple[int, int]] = {}  # (best rank, ranking index): the tie-break
    for which, ranking in enumerate(rankings):
        seen: set[T] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            first_seen[item] = min(first_seen.get(item, (rank, which)), (rank, which))
    order = sorted(scores, key=lambda item: (-scores[item], first_seen[item]))
    return [(item, scores[item]) for item in order]


class HybridIndex:
    """BM25 and dense rankings fused by reciprocal rank (see the module docstring)."""

    kind = "hybrid"

    def __init__(
        self,
        sparse: Searchable,
        dense: Searchable,
        *,
        rrf_k: int = RRF_K,
        depth: int = FUSION_DEPTH,
    ) -> None:
        if len(sparse) != len(dense) or sparse.corpus_id != dense.corpus_id:
            raise ValueError("the BM25 and dense indexes must cover the same corpus")
        if rrf_k < 0 or depth < 1:
            raise ValueError(f"rrf_k must be >= 0 and depth >= 1, got {rrf_k} and {depth}")
        self.sparse = sparse
        self.dense = dense
        self.rrf_k = rrf_k
        self.depth = depth

    @property
    def corpus_id(self) -> str:
        return self.sparse.corpus_id

    @property
    def model(self) -> str | None:
        return getattr(self.dense, "model", None)

    def __len__(self) -> int:
        return len(self.sparse)

    def search(self, query: str, k: int) -> list[Hit]:
        """The top ``k`` documents by fused score (the score is the RRF score)."""
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        if k <= 0 or not queries:
            return [[] for _ in queries]
        depth = max(k, self.depth)
        sparse = self.sparse.search_batch(queries, depth)
        dense = self.dense.search_batch(queries, depth)
        results: list[list[Hit]] = []
        for sparse_hits, dense_hits in zip(sparse, dense, strict=True):
            rankings: list[list[Document]] = [
                [doc for doc, _ in sparse_hits],
                [doc for doc, _ in dense_hits],
            ]
            results.append(reciprocal_rank_fusion(rankings, self.rrf_k)[:k])
        return results


def get_searcher(
    corpus: Corpus,
    retriever: str = "bm25",
    dense_model: str | None = None,
    *,
    cache_dir: PathLike | None = None,
) -> Searchable:
    """The process-wide index of ``corpus`` for ``retriever`` (one of ``RETRIEVER_KINDS``).

    BM25 indexes come from ``get_index``, dense ones from ``get_dense_index`` (``dense_model``,
    default ``DEFAULT_DENSE_MODEL``; ``cache_dir`` for the embeddings), so every tool and env of
    the process shares them.
    """
    check_retriever(retriever)
    if retriever == "bm25":
        return get_index(corpus)
    dense = get_dense_index(corpus, dense_model, cache_dir=cache_dir)
    if retriever == "dense":
        return dense
    return HybridIndex(get_index(corpus), dense)


def check_retriever(retriever: str) -> None:
    """Raise ``ValueError`` unless ``retriever`` is one of ``RETRIEVER_KINDS``."""
    if retriever not in RETRIEVER_KINDS:
        raise ValueError(f"retriever must be one of {list(RETRIEVER_KINDS)}, got {retriever!r}")


def describe_searcher(searcher: Searchable) -> tuple[str, str | None]:
    """``(retriever kind, dense model or None)`` of an index."""
    if isinstance(searcher, BM25Index | CorpusFileIndex):
        return "bm25", None
    if isinstance(searcher, DenseIndex | HybridIndex):
        return searcher.kind, searcher.model
    return type(searcher).__name__, getattr(searcher, "model", None)


__all__ = [
    "FUSION_DEPTH",
    "RETRIEVER_KINDS",
    "RRF_K",
    "HybridIndex",
    "RetrieverKind",
    "check_retriever",
    "describe_searcher",
    "get_searcher",
    "reciprocal_rank_fusion",
]
