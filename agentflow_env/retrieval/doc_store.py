"""An on-disk document store: read any document by its row, on demand, without a parse.

Two files: ``documents.bin`` holds every document's id, title and text as UTF-8, back to back;
``documents.offsets`` holds ``3 * n + 1`` little-endian int64 offsets into it (where each id,
title and text starts, then the end). The offsets are memory-mapped; a lookup reads its bytes
with one ``pread`` (thread-safe). Reading rather than mapping the data file keeps the pages it
touches in the kernel's page cache but out of the process: mapped, every scattered lookup would
also map its neighbours (fault-around) into the resident set. Lone surrogates (which JSON can
carry) survive the round trip.
"""

from __future__ import annotations

import itertools
import mmap
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from agentflow_env.retrieval.corpus import Document

PathLike = str | os.PathLike[str]
DATA_FILE = "documents.bin"
OFFSETS_FILE = "documents.offsets"
_OFFSET_DTYPE = np.dtype("<i8")
_FIELDS = 3


class DocStoreError(RuntimeError):
    """The store's files are missing or inconsistent with each other."""


class DocStoreWriter:
    """Appends documents to a new store in ``directory``; ``close()`` finishes it."""

    def __init__(self, directory: PathLike) -> None:
        self.directory = Path(directory)
        self._data: BinaryIO = open(self.directory / DATA_FILE, "wb")  # noqa: SIM115
        self._offsets: BinaryIO = open(self.directory / OFFSETS_FILE, "wb")  # noqa: SIM115
        self._position = 0
        self._offsets.write(np.zeros(1, _OFFSET_DTYPE).tobytes())
        self.count = 0

    def add(self, records: Sequence[tuple[str, str, str]]) -> None:
        """Append ``(doc_id, title, text)`` records."""
        parts = [field.encode("utf-8", "surrogatepass") for record in records for field in record]
        lengths = np.fromiter(map(len, parts), dtype=_OFFSET_DTYPE, count=len(parts))
        ends = np.cumsum(lengths) + self._position
        self._data.write(b"".join(parts))
        self._offsets.write(ends.astype(_OFFSET_DTYPE, copy=False).tobytes())
        if len(ends):
            self._position = int(ends[-1])
        self.count += len(records)

    def close(self) -> None:
        self._data.close()
        self._offsets.close()

    def __enter__(self) -> DocStoreWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DocStore(Sequence[Document]):
    """The documents of a store, read on demand: ``store[i]`` is the ``i``-th document."""

    def __init__(self, directory: PathLike, expected_count: int | None = None) -> None:
        self.directory = Path(directory)
        data_path, offsets_path = self.directory / DATA_FILE, self.directory / OFFSETS_FILE
        try:
            offsets_size = offsets_path.stat().st_size
            data_size = data_path.stat().st_size
        except OSError as error:
            raise DocStoreError(f"{self.directory}: document store missing ({error})") from error
        entries, remainder = divmod(offsets_size, _OFFSET_DTYPE.itemsize)
        if remainder or (entries - 1) % _FIELDS or entries < 1:
            raise DocStoreError(f"{offsets_path}: truncated ({offsets_size} bytes)")
        self._count = (entries - 1) // _FIELDS
        if expected_count is not None and self._count != expected_count:
            raise DocStoreError(
                f"{self.directory}: {self._count} documents stored, expected {expected_count}"
            )
        with open(offsets_path, "rb") as handle:  # a plain ndarray slices faster than np.memmap
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        self._offsets = np.frombuffer(mapped, dtype=_OFFSET_DTYPE)
        if int(self._offsets[0]) != 0 or int(self._offsets[-1]) != data_size:
            raise DocStoreError(
                f"{self.directory}: offsets end at {int(self._offsets[-1])}, "
                f"data has {data_size} bytes"
            )
        self._data = open(data_path, "rb")  # noqa: SIM115 - open while the store is used

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, row: int) -> Document:  # type: ignore[override]
        if not isinstance(row, int | np.integer):
            raise TypeError(f"document rows are integers, got {type(row).__name__}")
        if row < 0:
            row += self._count
        if not 0 <= row < self._count:
            raise IndexError(f"document row {row} out of range (0-{self._count - 1})")
        start = _FIELDS * int(row)
        bounds = self._offsets[start : start + _FIELDS + 1].tolist()
        record = os.pread(self._data.fileno(), bounds[-1] - bounds[0], bounds[0])
        cuts = [bound - bounds[0] for bound in bounds]
        doc_id, title, text = (
            record[a:b].decode("utf-8", "surrogatepass") for a, b in itertools.pairwise(cuts)
        )
        return Document(doc_id, title, text)

    def __iter__(self) -> Iterator[Document]:
        for row in range(self._count):
            yield self[row]

    def close(self) -> None:
        """Close the data file now rather than when the store is garbage-collected."""
        self._data.close()


__all__ = ["DATA_FILE", "OFFSETS_FILE", "DocStore", "DocStoreError", "DocStoreWriter"]
