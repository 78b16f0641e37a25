"""Builds a bm25s index on disk from a stream of documents, in bounded memory.

``BM25Writer.add`` tokenizes a batch of documents (``tokenize_for_search``'s tokens, found in one
regex pass over the batch) and spills each document's distinct terms and their counts to disk;
``finish`` scores them and writes bm25s's own files (``data/indices/indptr.csc.index.npy``,
``vocab.index.json``, ``params.index.json``), loadable with ``bm25s.BM25.load(mmap=True)``.

The arrays are bit-identical to what ``bm25s.BM25().index((token_ids, vocab))`` makes for the
same documents with token ids numbered by first appearance (as ``BM25Index`` numbers them):
Lucene BM25 with bm25s's defaults, the same float64 arithmetic rounded to float32, postings in
document order. Scoring and the column sort run vectorized over term ranges whose postings fit
``memory_budget_bytes`` (8 bytes each), written to the files in order (``postings``), so memory
holds the vocabulary, two int32 per document and one range, never the corpus. The disk needs
room for the spilled postings (8 bytes each, twice over when partitioned) beside the index.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import bm25s
import numpy as np
import numpy.typing as npt

from agentflow_env.retrieval.bm25 import TOKEN_PATTERN
from agentflow_env.retrieval.postings import (
    Block,
    Int32s,
    Int64s,
    NpyWriter,
    StagedPostings,
    partition,
    run_starts,
    term_ranges,
)

PathLike = str | os.PathLike[str]
DATA_FILE = "data.csc.index.npy"
INDICES_FILE = "indices.csc.index.npy"
INDPTR_FILE = "indptr.csc.index.npy"
VOCAB_FILE = "vocab.index.json"
PARAMS_FILE = "params.index.json"
BM25S_FILES = (DATA_FILE, INDICES_FILE, INDPTR_FILE, VOCAB_FILE, PARAMS_FILE)
DEFAULT_MEMORY_BUDGET = 256 * 1024 * 1024

# Documents are joined with this token between them and tokenized in one pass: lowercased text
# never holds an uppercase letter, so the token cannot come from a document.
_SEPARATOR_TOKEN = "Q"
_SEPARATOR = f" {_SEPARATOR_TOKEN} "
_TERMS_FILE = "staged.terms.i32"
_COUNTS_FILE = "staged.counts.i32"


@dataclass(frozen=True)
class BM25Stats:
    """What an index holds: documents, distinct terms, tokens and (document, term) postings."""

    documents: int
    vocab_size: int
    tokens: int
    postings: int


class BM25Writer:
    """Streams documents into a bm25s index in ``directory`` (spill files go there too)."""

    def __init__(self, directory: PathLike, memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.memory_budget_bytes = memory_budget_bytes
        self._vocab: defaultdict[str, int] = defaultdict(itertools.count().__next__)
        self._vocab[_SEPARATOR_TOKEN] = -1
        self._doc_lengths: list[Int32s] = []
        self._doc_postings: list[Int32s] = []  # distinct terms per document
        self._doc_freqs = np.zeros(1024, dtype=np.int64)
        self._terms: BinaryIO = open(self.directory / _TERMS_FILE, "wb")  # noqa: SIM115
        self._counts: BinaryIO = open(self.directory / _COUNTS_FILE, "wb")  # noqa: SIM115
        self._postings = 0

    def add(self, contents: Sequence[str]) -> None:
        """Index the next documents (their ``Document.contents``), in corpus order."""
        n_docs = len(contents)
        if not n_docs:
            return
        tokens = TOKEN_PATTERN.findall(_SEPARATOR.join([text.lower() for text in contents]))
        ids = np.fromiter(map(self._vocab.__getitem__, tokens), np.int64, len(tokens))
        separators = ids < 0
        doc_of_token = np.cumsum(separators)[~separators]
        keys = (doc_of_token << 32) | ids[~separators]
        keys.sort()  # by document, then term
        starts = run_starts(keys)
        distinct = keys[starts]
        terms = (distinct & 0xFFFFFFFF).astype(np.int32)
        self._doc_lengths.append(np.bincount(doc_of_token, minlength=n_docs).astype(np.int32))
        self._doc_postings.append(np.bincount(distinct >> 32, minlength=n_docs).astype(np.int32))
        self._count_documents_per_term(terms)
        self._terms.write(terms.tobytes())
        self._counts.write(np.diff(starts, append=len(keys)).astype(np.int32).tobytes())
        self._postings += len(terms)

    def finish(self) -> BM25Stats:
        """Score the spilled postings, write bm25s's files, delete the spill files."""
        self._terms.close()
        self._counts.close()
        vocab_size = len(self._vocab) - 1
        lengths = _concat(self._doc_lengths)
        doc_postings = _concat(self._doc_postings)
        self._doc_lengths, self._doc_postings = [], []
        stats = BM25Stats(len(lengths), vocab_size, int(lengths.sum()), self._postings)
        try:
            if vocab_size:  # bm25s cannot index a corpus without a single token
                self._write_index(lengths, doc_postings, self._doc_freqs[:vocab_size], stats)
        finally:
            self._remove_spill()
        return stats

    def abort(self) -> None:
        """Close and delete the spill files (after an error)."""
        self._terms.close()
        self._counts.close()
        self._remove_spill()

    def _count_documents_per_term(self, terms: Int32s) -> None:
        needed = len(self._vocab) - 1
        if needed > len(self._doc_freqs):
            grown = np.zeros(max(needed, 2 * len(self._doc_freqs)), dtype=np.int64)
            grown[: len(self._doc_freqs)] = self._doc_freqs
            self._doc_freqs = grown
        self._doc_freqs[:needed] += np.bincount(terms, minlength=needed)

    def _write_index(
        self, lengths: Int32s, doc_postings: Int32s, doc_freqs: Int64s, stats: BM25Stats
    ) -> None:
        retriever = bm25s.BM25()  # its defaults: Lucene BM25, k1 1.5, b 0.75, float32 / int32
        idf = _lucene_idf(doc_freqs, stats.documents)
        k1, b = retriever.k1, retriever.b
        # bm25s: tf / (k1 * ((1 - b) + b * l_d / l_avg) + tf), in float64 per document
        length_norm = k1 * (
            (1 - b) + (b * lengths.astype(np.float64)) / (stats.tokens / stats.documents)
        )
        indptr = np.zeros(stats.vocab_size + 1, dtype=np.int64)
        np.cumsum(doc_freqs, out=indptr[1:])
        np.save(self.directory / INDPTR_FILE, indptr)
        spill = (self.directory / _TERMS_FILE, self.directory / _COUNTS_FILE)
        staged = StagedPostings(*spill, doc_postings)
        ranges = term_ranges(indptr, self.memory_budget_bytes // 8)
        sources: list[Iterable[Block]] = [staged.blocks()]
        if len(ranges) > 1:
            sources = [bucket.blocks() for bucket in partition(staged, ranges, self.directory)]
        with (
            NpyWriter(self.directory / DATA_FILE, np.float32, stats.postings) as data_out,
            NpyWriter(self.directory / INDICES_FILE, np.int32, stats.postings) as rows_out,
        ):
            for (low, high), blocks in zip(ranges, sources, strict=True):
                data, rows = _score_term_range(low, high, indptr, blocks, idf, length_norm)
                data_out.write(data)
                rows_out.write(rows)
        # bm25s's vocabulary: {token: id} in id order, then its empty token (the separator is
        # the first key; no document is added after this)
        del self._vocab[_SEPARATOR_TOKEN]
        self._vocab[""] = stats.vocab_size
        with open(self.directory / VOCAB_FILE, "w", encoding="utf-8") as out:
            json.dump(self._vocab, out, ensure_ascii=False)
        params = {
            "k1": retriever.k1,
            "b": retriever.b,
            "delta": retriever.delta,
            "method": retriever.method,
            "idf_method": retriever.idf_method,
            "dtype": retriever.dtype,
            "int_dtype": retriever.int_dtype,
            "num_docs": stats.documents,
            "version": bm25s.__version__,
            "backend": retriever.backend,
        }
        (self.directory / PARAMS_FILE).write_text(json.dumps(params, indent=4), encoding="utf-8")

    def _remove_spill(self) -> None:
        for name in (_TERMS_FILE, _COUNTS_FILE):
            (self.directory / name).unlink(missing_ok=True)
        for bucket in self.directory.glob("bucket.*.postings"):
            bucket.unlink()


def _score_term_range(
    low: int,
    high: int,
    indptr: Int64s,
    blocks: Iterable[Block],
    idf: npt.NDArray[np.float32],
    length_norm: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.float32], Int32s]:
    """The scores and rows of terms ``low`` to ``high - 1``, in bm25s's column order.

    A counting sort over postings in document order: each block's postings of these terms are
    scored, stably sorted by term and put after those of earlier blocks.
    """
    base = int(indptr[low])
    heads = indptr[low:high] - base  # where each term's next posting goes
    data = np.empty(int(indptr[high]) - base, dtype=np.float32)
    rows = np.empty(len(data), dtype=np.int32)
    for all_terms, all_counts, all_docs in blocks:
        selected = np.flatnonzero((all_terms >= low) & (all_terms < high))
        if not len(selected):
            continue
        terms, docs = all_terms[selected], all_docs[selected]
        tf = all_counts[selected].astype(np.float64)
        # bm25s: float32 idf times float64 tf / (tf + k1 * (...)), rounded to float32
        scores = idf[terms].astype(np.float64) * (tf / (length_norm[docs] + tf))
        order = np.argsort(terms, kind="stable")
        terms = terms[order] - low
        starts = run_starts(terms)
        run_lengths = np.diff(starts, append=len(terms))
        where = heads[terms] + np.arange(len(terms)) - np.repeat(starts, run_lengths)
        data[where] = scores[order]
        rows[where] = docs[order]
        heads[terms[starts]] += run_lengths
    return data, rows


def _lucene_idf(doc_freqs: Int64s, n_docs: int) -> npt.NDArray[np.float32]:
    """bm25s's Lucene idf, ``log(1 + (N - df + 0.5) / (df + 0.5))``, computed as it does (in
    Python floats, then float32), once per distinct document frequency."""
    distinct, inverse = np.unique(doc_freqs, return_inverse=True)
    values = [math.log(1 + (n_docs - df + 0.5) / (df + 0.5)) for df in distinct.tolist()]
    return np.asarray(values, dtype=np.float32)[inverse]


def _concat(parts: list[Int32s]) -> Int32s:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


__all__ = ["BM25S_FILES", "BM25Stats", "BM25Writer", "DEFAULT_MEMORY_BUDGET"]
