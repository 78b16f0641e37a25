"""Documents and corpora: the text a search tool retrieves from, and corpus files.

A corpus file is wiki-18 style JSONL, optionally gzipped: ``{"id", "contents": "title\\ntext"}``
or ``{"id", "title", "text"}`` per line. Errors (``DatasetError``) name the file and the line.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentflow_env.base.errors import DatasetError
from agentflow_env.base.jsonl import read_jsonl

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class Document:
    """One retrievable document. ``contents`` is the wiki-18 style ``"title\\ntext"``."""

    doc_id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        return f"{self.title}\n{self.text}"


@dataclass(frozen=True)
class Corpus:
    """An immutable collection of documents with a stable fingerprint.

    ``corpus_id`` identifies the corpus across envs and processes, so an index built for it can
    be shared (see ``agentflow_env.retrieval.bm25.get_index``).
    """

    documents: tuple[Document, ...]
    corpus_id: str = field(default="")

    def __post_init__(self) -> None:
        if not self.corpus_id:
            object.__setattr__(self, "corpus_id", fingerprint(self.documents))

    @classmethod
    def from_documents(cls, documents: Iterable[Document], corpus_id: str = "") -> Corpus:
        return cls(tuple(documents), corpus_id)

    def __len__(self) -> int:
        return len(self.documents)


def fingerprint(documents: Iterable[Document]) -> str:
    """A content hash of the documents, in order."""
    digest = hashlib.sha256()
    for doc in documents:
        for part in (doc.doc_id, doc.title, doc.text):
            digest.update(part.encode("utf-8", "surrogatepass"))  # JSON may hold lone ones
            digest.update(b"\x00")
    return digest.hexdigest()[:16]


def format_documents(documents: Iterable[Document]) -> str:
    """Render retrieved documents as tool output: ``[rank] title`` then the text, blank-line separated.

    ``parse_documents`` is its inverse; readers of search results must use it rather than
    re-implementing the format.
    """
    blocks = [f"[{rank}] {doc.title}\n{doc.text}" for rank, doc in enumerate(documents, start=1)]
    return "\n\n".join(blocks) if blocks else "No results."


_HEADER = "["


def parse_documents(output: str) -> list[tuple[str, str]]:
    """Split ``format_documents`` output back into ``(title, text)`` pairs.

    Tolerates shortened text (a view may cut old outputs) and returns ``[]`` for anything else.
    """
    pairs: list[tuple[str, str]] = []
    title: str | None = None
    body: list[str] = []
    for line in output.split("\n"):
        header = _parse_header(line)
        if header is not None:
            if title is not None:
                pairs.append((title, "\n".join(body).strip()))
            title, body = header, []
        elif title is not None:
            body.append(line)
    if title is not None:
        pairs.append((title, "\n".join(body).strip()))
    return pairs


def _parse_header(line: str) -> str | None:
    if not line.startswith(_HEADER):
        return None
    close = line.find("] ")
    if close < 2 or not line[1:close].isdigit():
        return None
    return line[close + 2 :].strip()


# -- corpus files ---------------------------------------------------------------------------------
def load_corpus_jsonl(path: PathLike, corpus_id: str = "") -> Corpus:
    """Read a wiki-18 style corpus. A record without an id gets its 0-based index as id.

    ``contents`` is split at its first newline into title and text, so ``Document.contents``
    gives back the original string (when it has a newline).
    """
    file = Path(path)
    documents: list[Document] = []
    for index, (where, record) in enumerate(read_jsonl(file)):
        documents.append(_to_document(record, file, where, index))
    return Corpus.from_documents(documents, corpus_id)


def resolve_corpus(corpus: Corpus | PathLike | None) -> Corpus | None:
    """A ``Corpus`` as is; a path loaded with ``load_corpus_jsonl`` (cached per unchanged file)."""
    if corpus is None or isinstance(corpus, Corpus):
        return corpus
    file = Path(corpus).resolve()
    try:
        stat = file.stat()
    except OSError as error:
        raise DatasetError(f"{file}: cannot read corpus ({error.strerror})") from error
    return _cached_corpus(str(file), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _cached_corpus(path: str, mtime_ns: int, size: int) -> Corpus:
    return load_corpus_jsonl(path)


def _to_document(record: Mapping[str, Any], file: Path, where: str, index: int) -> Document:
    doc_id = next((record[k] for k in ("id", "doc_id", "_id") if record.get(k) is not None), index)
    if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
        raise DatasetError(f"{file}, {where}: 'id' must be a string or an integer, got {doc_id!r}")
    contents = record.get("contents")
    if contents is not None:
        if not isinstance(contents, str):
            raise DatasetError(f"{file}, {where}: 'contents' must be a string")
        head, _, body = contents.partition("\n")
        return Document(str(doc_id), head, body)
    title, text = record.get("title") or "", record.get("text")
    if not isinstance(text, str) or not isinstance(title, str):
        raise DatasetError(f"{file}, {where}: expected 'contents' or 'title' and 'text' strings")
    return Document(str(doc_id), title, text)
