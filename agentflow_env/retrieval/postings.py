"""Postings spilled to disk while a BM25 index is built, read back in bounded blocks.

A posting is one (term, count, document) triple. ``StagedPostings`` are the build's first
spill, in document order, with documents implied by a per-document posting count. Writing the
index needs them by term: when one term range's postings do not fit the memory budget,
``partition`` copies them once into one bucket file per term range (still in document order),
so each range reads only its own postings. Total I/O stays linear in the postings, not in
postings times ranges.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

Int32s = npt.NDArray[np.int32]
Int64s = npt.NDArray[np.int64]
Block = tuple[Int32s, Int32s, Int32s]
"""``(terms, counts, docs)`` of some postings."""
BLOCK_POSTINGS = 1_000_000  # postings per block (~50 MB of numpy temporaries downstream)
MAX_BUCKETS = 256  # open files while partitioning; ranges grow past the budget beyond it
_RECORD = np.dtype([("term", "<i4"), ("count", "<i4"), ("doc", "<i4")])


class StagedPostings:
    """The build's spill: terms and counts files, documents given by postings per document."""

    def __init__(self, terms: Path, counts: Path, doc_postings: Int32s) -> None:
        self.terms = terms
        self.counts = counts
        self.doc_postings = doc_postings
        self.doc_starts = np.zeros(len(doc_postings) + 1, dtype=np.int64)
        np.cumsum(doc_postings, out=self.doc_starts[1:])

    def blocks(self) -> Iterator[Block]:
        """All postings in document order, in blocks of whole documents."""
        n_docs = len(self.doc_postings)
        with open(self.terms, "rb") as terms, open(self.counts, "rb") as counts:
            first = 0
            while first < n_docs:
                target = self.doc_starts[first] + BLOCK_POSTINGS
                last = int(np.searchsorted(self.doc_starts, target, side="right")) - 1
                last = min(max(last, first + 1), n_docs)
                low, high = int(self.doc_starts[first]), int(self.doc_starts[last])
                rows = np.arange(first, last, dtype=np.int32)
                docs = np.repeat(rows, self.doc_postings[first:last])
                yield _read(terms, np.int32, low, high), _read(counts, np.int32, low, high), docs
                first = last


class Bucket:
    """One term range's postings, in document order, from a bucket file."""

    def __init__(self, path: Path, total: int) -> None:
        self.path = path
        self.total = total

    def blocks(self) -> Iterator[Block]:
        with open(self.path, "rb") as file:
            for start in range(0, self.total, BLOCK_POSTINGS):
                end = min(start + BLOCK_POSTINGS, self.total)
                records = _read(file, _RECORD, start, end)
                yield records["term"].copy(), records["count"].copy(), records["doc"].copy()


def _read(file: BinaryIO, dtype: npt.DTypeLike, start: int, end: int) -> np.ndarray:
    """Items ``start`` to ``end - 1`` of a raw array file, read (not mapped: mapped pages of the
    spill would swell the resident set by its whole size)."""
    size = np.dtype(dtype).itemsize
    data = os.pread(file.fileno(), (end - start) * size, start * size)
    if len(data) != (end - start) * size:
        raise OSError(f"{file.name}: shorter than expected")
    return np.frombuffer(data, dtype=dtype)


def term_ranges(indptr: Int64s, max_postings: int) -> list[tuple[int, int]]:
    """Consecutive term ranges of at most ``max_postings`` postings (or one term) each, and at
    most ``MAX_BUCKETS`` ranges."""
    n_terms = len(indptr) - 1
    limit = max(1, max_postings, -(-int(indptr[-1]) // MAX_BUCKETS))
    ranges = []
    low = 0
    while low < n_terms:
        high = int(np.searchsorted(indptr, indptr[low] + limit, side="right")) - 1
        high = min(max(high, low + 1), n_terms)
        ranges.append((low, high))
        low = high
    return ranges


def partition(
    staged: StagedPostings, ranges: list[tuple[int, int]], directory: Path
) -> list[Bucket]:
    """Copy the staged postings into one bucket file per term range."""
    bounds = np.array([low for low, _ in ranges[1:]], dtype=np.int64)
    paths = [directory / f"bucket.{i}.postings" for i in range(len(ranges))]
    totals = [0] * len(ranges)
    files: list[BinaryIO] = []
    try:
        for path in paths:
            files.append(open(path, "wb"))  # noqa: SIM115 - closed below
        for terms, counts, docs in staged.blocks():
            bucket = np.searchsorted(bounds, terms, side="right")
            order = np.argsort(bucket, kind="stable")
            records = np.empty(len(order), dtype=_RECORD)
            records["term"], records["count"], records["doc"] = (
                terms[order],
                counts[order],
                docs[order],
            )
            sorted_buckets = bucket[order]
            starts = run_starts(sorted_buckets)
            ends = np.append(starts[1:], len(order))
            for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
                index = int(sorted_buckets[start])
                files[index].write(records[start:end].tobytes())
                totals[index] += end - start
    finally:
        for file in files:
            file.close()
    return [Bucket(path, total) for path, total in zip(paths, totals, strict=True)]


def run_starts(values: np.ndarray) -> Int64s:
    """Where each run of equal values starts, in a sorted array."""
    first = np.empty(len(values), dtype=bool)
    first[:1] = True
    np.not_equal(values[1:], values[:-1], out=first[1:])
    return np.flatnonzero(first)


class NpyWriter:
    """Writes a 1-D ``.npy`` file of known length piece by piece."""

    def __init__(self, path: Path, dtype: type[np.generic], length: int) -> None:
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed by __exit__
        self._dtype = np.dtype(dtype)
        header = {"descr": np.lib.format.dtype_to_descr(self._dtype), "fortran_order": False}
        np.lib.format.write_array_header_1_0(self._file, {**header, "shape": (length,)})
        self._left = length

    def write(self, values: np.ndarray) -> None:
        if len(values) > self._left:
            raise ValueError("more values than the header announced")
        self._file.write(values.astype(self._dtype, copy=False).tobytes())
        self._left -= len(values)

    def __enter__(self) -> NpyWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()
        if self._left and exc[0] is None:
            raise ValueError(f"{self._left} values missing from a .npy file")


__all__ = [
    "BLOCK_POSTINGS",
    "Block",
    "Bucket",
    "NpyWriter",
    "StagedPostings",
    "partition",
    "run_starts",
    "term_ranges",
]
