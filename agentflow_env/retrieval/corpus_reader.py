"""Streaming readers for corpus files: one ``(doc_id, title, text)`` record at a time.

Two layouts, each optionally gzipped (``.gz``), with or without a UTF-8 byte-order mark:

- JSONL (wiki-18 as FlashRAG ships it): ``{"id", "contents": "title\\ntext"}`` or
  ``{"id", "title", "text"}`` per line. A record without an id gets its 0-based index.
- TSV (DPR's ``psgs_w100.tsv``): ``id<TAB>text<TAB>title`` with a header row naming the columns
  (any order; ``contents`` instead of text and title also works). Fields follow CSV quoting, as
  DPR writes and reads them (``"a ""quoted"" word"``). Without a header the columns are taken as
  ``id, text, title``.

The layout comes from the suffix (``.tsv``/``.tab`` vs ``.jsonl``/``.json``/``.ndjson``), else
from the first character (``{`` means JSONL). Errors (``DatasetError``) name the file and line.
Records are plain tuples so a million of them cost no more than their strings.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal, Protocol, cast

from agentflow_env.base.errors import DatasetError
from agentflow_env.base.jsonl import jsonl_objects

PathLike = str | os.PathLike[str]
CorpusRecord = tuple[str, str, str]
"""``(doc_id, title, text)``."""
CorpusFormat = Literal["jsonl", "tsv"]

_TSV_SUFFIXES = frozenset({".tsv", ".tab"})
_JSONL_SUFFIXES = frozenset({".jsonl", ".json", ".ndjson"})
_ID_COLUMNS = ("id", "doc_id", "docid", "_id")
_CSV_FIELD_LIMIT = 2**31 - 1  # csv's default (128 KiB per field) is too small for long documents


class ByteDigest(Protocol):
    """What ``hashlib`` objects offer: fed every raw byte of the file as it is read."""

    def update(self, data: bytes, /) -> None: ...


def corpus_format(path: PathLike) -> CorpusFormat:
    """``"tsv"`` or ``"jsonl"``: by suffix (under ``.gz``), else by the first character."""
    file = Path(path)
    suffix = Path(file.stem).suffix if file.suffix == ".gz" else file.suffix
    if suffix.lower() in _TSV_SUFFIXES:
        return "tsv"
    if suffix.lower() in _JSONL_SUFFIXES:
        return "jsonl"
    with _open_text(file, None, newline="") as text:
        for line in text:
            if line.strip():
                return "jsonl" if line.lstrip().startswith("{") else "tsv"
    return "jsonl"


def iter_corpus_records(
    path: PathLike, *, digest: ByteDigest | None = None
) -> Iterator[CorpusRecord]:
    """Every record of a corpus file, in order, read lazily.

    ``digest`` (e.g. ``hashlib.sha256()``) sees every byte of the file as stored (compressed for
    ``.gz``) once the iterator is exhausted: a content hash at no extra read.
    """
    file = Path(path)
    layout = corpus_format(file)
    with _open_text(file, digest, newline="" if layout == "tsv" else None) as text:
        if layout == "tsv":
            yield from _tsv_records(text, file)
        else:
            yield from _jsonl_records(text, file)
        _drain(text)


# -- JSONL -----------------------------------------------------------------------------------------
def _jsonl_records(lines: IO[str], file: Path) -> Iterator[CorpusRecord]:
    for index, (where, record) in enumerate(jsonl_objects(lines, file)):
        yield record_from_mapping(record, file, where, index)


def record_from_mapping(
    record: Mapping[str, Any], file: PathLike, where: str, index: int
) -> CorpusRecord:
    """A JSON corpus record as ``(doc_id, title, text)``; ``contents`` splits at its first newline."""
    doc_id = next((record[k] for k in _ID_COLUMNS if record.get(k) is not None), index)
    if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
        raise DatasetError(f"{file}, {where}: 'id' must be a string or an integer, got {doc_id!r}")
    contents = record.get("contents")
    if contents is not None:
        if not isinstance(contents, str):
            raise DatasetError(f"{file}, {where}: 'contents' must be a string")
        head, _, body = contents.partition("\n")
        return str(doc_id), head, body
    title, text = record.get("title") or "", record.get("text")
    if not isinstance(text, str) or not isinstance(title, str):
        raise DatasetError(f"{file}, {where}: expected 'contents' or 'title' and 'text' strings")
    return str(doc_id), title, text


# -- TSV -------------------------------------------------------------------------------------------
def _tsv_records(text: IO[str], file: Path) -> Iterator[CorpusRecord]:
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)
    rows = csv.reader(text, delimiter="\t", quotechar='"', doublequote=True, strict=False)
    columns: _Columns | None = None
    index = 0
    try:
        for row in rows:
            if not row or row == [""]:
                continue
            if columns is None:
                columns = _Columns.from_header(row)
                if columns.header:
                    continue
            yield columns.record(row, file, f"line {rows.line_num}", index)
            index += 1
    except csv.Error as error:
        raise DatasetError(f"{file}, line {rows.line_num}: malformed TSV ({error})") from None
    except UnicodeDecodeError as error:
        raise DatasetError(f"{file}, line {rows.line_num + 1}: not UTF-8 text ({error})") from None


class _Columns:
    """Which TSV column holds what, from the header row (or DPR's order when there is none)."""

    def __init__(
        self, header: bool, doc_id: int | None, title: int | None, text: int, contents: bool
    ) -> None:
        self.header = header
        self.doc_id = doc_id
        self.title = title
        self.text = text
        self.contents = contents
        self.width = 1 + max(i for i in (doc_id, title, text) if i is not None)

    @classmethod
    def from_header(cls, row: list[str]) -> _Columns:
        names = [name.strip().lower() for name in row]
        if "text" not in names and "contents" not in names:
            return cls(header=False, doc_id=0, title=2, text=1, contents=False)
        doc_id = next((names.index(n) for n in _ID_COLUMNS if n in names), None)
        title = names.index("title") if "title" in names else None
        if "text" in names:
            return cls(True, doc_id, title, names.index("text"), contents=False)
        return cls(True, doc_id, title, names.index("contents"), contents=True)

    def record(self, row: list[str], file: Path, where: str, index: int) -> CorpusRecord:
        if len(row) < self.width:
            raise DatasetError(
                f"{file}, {where}: expected {self.width} tab-separated columns, got {len(row)}"
            )
        doc_id = row[self.doc_id] if self.doc_id is not None else str(index)
        text = row[self.text]
        if self.contents:
            head, _, body = text.partition("\n")
            return doc_id, head, body
        return doc_id, row[self.title] if self.title is not None else "", text


# -- opening ---------------------------------------------------------------------------------------
class _HashingReader(io.RawIOBase):
    """A raw binary stream that feeds everything read through it to ``digest``."""

    def __init__(self, raw: io.BufferedIOBase, digest: ByteDigest) -> None:
        self._raw = raw
        self._digest = digest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._raw.read(len(view))
        view[: len(data)] = data
        self._digest.update(data)
        return len(data)


@contextlib.contextmanager
def _open_text(file: Path, digest: ByteDigest | None, newline: str | None) -> Iterator[IO[str]]:
    """``file`` as UTF-8 text (a leading BOM dropped), through gzip for ``.gz``."""
    with contextlib.ExitStack() as stack:
        try:
            raw: io.BufferedIOBase = stack.enter_context(open(file, "rb"))
        except OSError as error:
            raise DatasetError(f"{file}: cannot open ({error.strerror})") from error
        if digest is not None:
            raw = io.BufferedReader(_HashingReader(raw, digest), buffer_size=1 << 20)
        if file.suffix == ".gz":
            raw = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb"))
        binary = cast(BinaryIO, raw)  # typeshed: GzipFile and BufferedReader both qualify
        yield stack.enter_context(io.TextIOWrapper(binary, encoding="utf-8-sig", newline=newline))


def _drain(text: IO[str]) -> None:
    """Read what the parser left (trailing bytes, a gzip trailer) so a digest sees all of it."""
    buffer = getattr(text, "buffer", None)
    if buffer is not None:
        while buffer.read(1 << 20):
            pass


__all__ = [
    "ByteDigest",
    "CorpusFormat",
    "CorpusRecord",
    "corpus_format",
    "iter_corpus_records",
    "record_from_mapping",
]
