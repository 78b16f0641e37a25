"""Telling whether a corpus file is the one an index was built from, without reading all of it.

A file index records two identities of its corpus file:

- the **content hash** (SHA-256 of every byte, compressed bytes for ``.gz``), computed once
  while the index is built (the build reads every byte anyway). Its first 16 hex digits are the
  ``corpus_id``: two copies of one file share it, any change of content changes it.
- a **signature**: size, modification time (ns) and a hash of sampled chunks (the first and
  last 64 KiB and 14 evenly spaced ones, about 1 MiB of reads whatever the file's size).

Opening an index compares the signature only, so a server starts in well under a second on a
13 GB wiki-18 file. When the size or the sampled chunks differ, the file changed: rebuild. When
only the modification time differs (a copy, a re-download, ``touch``), the whole file is hashed
once and compared with the content hash: same content keeps the index (the new time is
remembered), different content rebuilds. The one change this misses is an edit that keeps the
size and every sampled chunk and also restores the old modification time (``touch -r``, or a
tool preserving times); pass ``verify=True`` to ``open_corpus_index`` to hash in full anyway.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentflow_env.base.errors import DatasetError

PathLike = str | os.PathLike[str]
SAMPLE_BYTES = 64 * 1024
SAMPLE_COUNT = 16
_READ_BYTES = 1 << 20


@dataclass(frozen=True)
class FileSignature:
    """A corpus file's size, modification time and sampled-chunk hash."""

    size: int
    mtime_ns: int
    sample_sha256: str

    def same_bytes_likely(self, other: FileSignature) -> bool:
        """Equal size and sampled chunks: the same content unless an edit avoided the samples."""
        return self.size == other.size and self.sample_sha256 == other.sample_sha256

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> FileSignature | None:
        """The signature stored in index metadata, or ``None`` if it is malformed."""
        if not isinstance(data, dict):
            return None
        size, mtime_ns, sample = data.get("size"), data.get("mtime_ns"), data.get("sample_sha256")
        if (
            not isinstance(size, int)
            or not isinstance(mtime_ns, int)
            or not isinstance(sample, str)
        ):
            return None
        return cls(size, mtime_ns, sample)


def file_signature(path: PathLike) -> FileSignature:
    """``path``'s signature: a stat and about 1 MiB of reads."""
    file = Path(path)
    try:
        with open(file, "rb") as handle:
            stat = os.fstat(handle.fileno())
            digest = hashlib.sha256(str(stat.st_size).encode())
            for offset in sample_offsets(stat.st_size):
                handle.seek(offset)
                digest.update(handle.read(SAMPLE_BYTES))
    except OSError as error:
        raise DatasetError(f"{file}: cannot read corpus ({error.strerror})") from error
    return FileSignature(stat.st_size, stat.st_mtime_ns, digest.hexdigest())


def sample_offsets(size: int) -> list[int]:
    """Where the sampled chunks start: the first, the last and evenly spaced ones between."""
    if size <= SAMPLE_BYTES * SAMPLE_COUNT:
        return list(range(0, size, SAMPLE_BYTES)) or [0]
    last = size - SAMPLE_BYTES
    return [last * i // (SAMPLE_COUNT - 1) for i in range(SAMPLE_COUNT)]


def content_sha256(path: PathLike) -> str:
    """SHA-256 of every byte of ``path`` (what ``corpus_id`` is cut from)."""
    file = Path(path)
    digest = hashlib.sha256()
    try:
        with open(file, "rb") as handle:
            while chunk := handle.read(_READ_BYTES):
                digest.update(chunk)
    except OSError as error:
        raise DatasetError(f"{file}: cannot read corpus ({error.strerror})") from error
    return digest.hexdigest()


def corpus_id_of(content_sha: str) -> str:
    """The ``corpus_id`` for a content hash."""
    return content_sha[:16]


def cache_key(signature: FileSignature) -> str:
    """The index directory name for a file: its size and sampled chunks, not its time or path.

    A copy of the file elsewhere (or with a new modification time) finds the same directory,
    and its content hash decides whether the index there is still its own.
    """
    key = f"{signature.size}:{signature.sample_sha256}".encode()
    return "f" + hashlib.sha256(key).hexdigest()[:15]


__all__ = [
    "FileSignature",
    "cache_key",
    "content_sha256",
    "corpus_id_of",
    "file_signature",
    "sample_offsets",
]
