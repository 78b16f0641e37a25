"""Documents and corpora: the text a search tool retrieves from, and corpus files.

A corpus file is wiki-18 style JSONL (``{"id", "contents": "title\\ntext"}`` or
``{"id", "title", "text"}`` per line) or DPR style TSV (``id<TAB>text<TAB>title`` with a header
row), optionally gzipped; ``corpus_reader`` reads them. Errors (``DatasetError``) name the file
and the line. A corpus too large for memory is served from disk instead (``file_index``).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agentflow_env.base.errors import DatasetError
from agentflow_env.retrieval.corpus_reader import iter_corpus_records

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
def iter_corpus_file(path: PathLike) -> Iterator[Document]:
    """The documents of a corpus file (JSONL or TSV, optionally gzipped), read lazily."""
    for doc_id, title, text in iter_corpus_records(path):
        yield Document(doc_id, title, text)


def load_corpus_file(path: PathLike, corpus_id: str = "") -> Corpus:
    """Read a whole corpus file into memory. A record without an id gets its 0-based index.

    A JSONL ``contents`` is split at its first newline into title and text, so
    ``Document.contents`` gives back the original string (when it has a newline).
    """
    return Corpus.from_documents(iter_corpus_file(path), corpus_id)


def load_corpus_jsonl(path: PathLike, corpus_id: str = "") -> Corpus:
    """``load_corpus_file`` under its old name: it reads every corpus layout, TSV included."""
    return load_corpus_file(path, corpus_id)


def resolve_corpus(corpus: Corpus | PathLike | None) -> Corpus | None:
    """A ``Corpus`` as is; a path loaded with ``load_corpus_file`` (cached per unchanged file)."""
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
    return load_corpus_file(path)
