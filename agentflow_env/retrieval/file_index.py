"""BM25 over a corpus FILE at Wikipedia scale: built in one streaming pass, served memory-mapped.

``open_corpus_index(path)`` gives a searchable index for a corpus file (JSONL or DPR TSV,
optionally gzipped). The first call builds it into ``<cache_dir>/<key>/``; every later one,
in any process, maps the cached files and starts in seconds without reading the corpus:

- bm25s's own index files (``bm25s.BM25.load(mmap=True)`` reads only the vocabulary), written
  by ``BM25Writer`` from a stream of documents in bounded memory;
- the documents, in a ``DocStore`` (one UTF-8 data file and an offsets array, read on demand);
- ``agentflow_index.json``: format, the corpus file's identity (``file_identity``: content hash,
  computed while building, and a signature checked at every open), counts, tokenizer signature,
  and the size and edge hashes of every file, so a truncated or overwritten cache is rebuilt.

Builds go to a temporary directory renamed into place, under an exclusive lock on the cache
directory, so processes racing to open an unbuilt index build it once and never see half of it.
``get_index``/``index_store`` remain the path for small in-process ``Corpus`` objects.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import bm25s

from agentflow_env.base.errors import DatasetError
from agentflow_env.retrieval.bm25 import Hit, rank_rows
from agentflow_env.retrieval.bm25_writer import (
    BM25S_FILES,
    DEFAULT_MEMORY_BUDGET,
    BM25Stats,
    BM25Writer,
)
from agentflow_env.retrieval.corpus_reader import iter_corpus_records
from agentflow_env.retrieval.doc_store import (
    DATA_FILE,
    OFFSETS_FILE,
    DocStore,
    DocStoreError,
    DocStoreWriter,
)
from agentflow_env.retrieval.file_identity import (
    FileSignature,
    cache_key,
    content_sha256,
    corpus_id_of,
    file_signature,
)
from agentflow_env.retrieval.index_store import (
    META_FILE,
    IndexStoreError,
    default_cache_dir,
    tokenizer_signature,
)

PathLike = str | os.PathLike[str]
FORMAT = "agentflow-file-index"
FORMAT_VERSION = 1
BUILD_BATCH_DOCS = 4096
_EDGE_BYTES = 4096
_MAX_REMEMBERED_MTIMES = 8


class CorpusFileIndex:
    """A BM25 index and document store mapped from a cache directory; thread-safe reads.

    Offers what ``BM25Index`` offers searchers (``Searchable``): ``corpus_id``, ``len``,
    ``search`` and ``search_batch``, with ``Hit`` results in the same order and scores.
    """

    def __init__(self, directory: Path, meta: dict[str, Any]) -> None:
        self.directory = directory
        self.meta = meta
        self._retriever: bm25s.BM25 | None = None
        self._vocab: dict[str, int] = {}
        if meta["vocab_size"]:
            try:
                self._retriever = bm25s.BM25.load(
                    directory, mmap=True, load_vocab=True, show_progress=False
                )
            except (OSError, ValueError) as error:
                raise IndexStoreError(
                    f"{directory}: cannot load the bm25s index ({error})"
                ) from error
            self._vocab = self._retriever.vocab_dict
            _check_bm25s(directory, self._retriever, meta)
        try:
            self.documents = DocStore(directory, expected_count=meta["documents"])
        except DocStoreError as error:
            raise IndexStoreError(str(error)) from error

    @property
    def corpus_id(self) -> str:
        return str(self.meta["corpus_id"])

    def __len__(self) -> int:
        return len(self.documents)

    def search(self, query: str, k: int) -> list[Hit]:
        """The top ``k`` documents with a positive score, best first."""
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """``search`` for many queries with a single bm25s call."""
        ranked = rank_rows(self._retriever, self._vocab, queries, k, len(self.documents))
        return [[(self.documents[row], score) for row, score in rows] for rows in ranked]

    def facts(self) -> dict[str, Any]:
        """What a ``/health`` answer can report about the index."""
        return {
            "kind": "bm25",
            "storage": "memory-mapped files",
            "corpus_id": self.corpus_id,
            "documents": self.meta["documents"],
            "vocab_size": self.meta["vocab_size"],
            "tokens": self.meta["tokens"],
            "postings": self.meta["postings"],
            "index_dir": str(self.directory),
            "corpus_file": self.meta["source"]["path"],
        }


# -- opening -----------------------------------------------------------------------------------
_opened: dict[tuple[str, str], tuple[tuple[int, int, int], CorpusFileIndex]] = {}
_opened_lock = threading.Lock()


def open_corpus_index(
    corpus_path: PathLike,
    cache_dir: PathLike | None = None,
    *,
    verify: bool = False,
    build: bool = True,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
) -> CorpusFileIndex:
    """The index of a corpus file, from the cache (built there first if missing or stale).

    One instance per file and cache dir is shared in-process while the file is unchanged.
    ``verify=True`` hashes the whole corpus file to confirm the cached index is its own (see
    ``file_identity`` for what the default check can miss); ``build=False`` raises
    ``IndexStoreError`` instead of building. ``cache_dir`` defaults to ``default_cache_dir()``.
    """
    file = Path(corpus_path).resolve()
    root = _cache_root(cache_dir)
    key = (str(file), str(root))
    stat = _stat(file)
    with _opened_lock:
        cached = _opened.get(key)
        if cached is not None and cached[0] == stat and not verify:
            return cached[1]
        directory, _ = _ensure_built(file, root, verify, build, memory_budget_bytes)
        index = load_corpus_index(directory)
        _opened[key] = (stat, index)
        return index


def load_corpus_index(directory: PathLike) -> CorpusFileIndex:
    """The index in ``directory`` as it stands, without the corpus file (it is not read)."""
    source = Path(directory)
    meta = _read_meta(source)
    if meta is None:
        raise IndexStoreError(f"{source}: no usable file index metadata ({META_FILE})")
    _check_files(source, meta)
    return CorpusFileIndex(source, meta)


def build_corpus_index(
    corpus_path: PathLike,
    cache_dir: PathLike | None = None,
    *,
    force: bool = False,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
) -> tuple[Path, bool]:
    """Build the file's index unless a valid one is cached: ``(directory, built)``."""
    file = Path(corpus_path).resolve()
    _stat(file)
    return _ensure_built(file, _cache_root(cache_dir), False, True, memory_budget_bytes, force)


def build_corpus_index_command(
    corpus_path: PathLike, out: PathLike | None, force: bool = False
) -> int:
    """``agentflow-env build-index`` on a corpus file: stream it into the cache, report."""
    started = time.perf_counter()
    directory, built = build_corpus_index(corpus_path, out, force=force)
    meta = _read_meta(directory) or {}
    print(
        f"{'built' if built else 'already cached'}: {directory}  ({meta.get('documents')} "
        f"documents, corpus_id {meta.get('corpus_id')}; {time.perf_counter() - started:.1f} s)"
    )
    return 0


def corpus_index_dir(corpus_path: PathLike, cache_dir: PathLike | None = None) -> Path:
    """Where the index of ``corpus_path`` lives (by its size and sampled content)."""
    return _cache_root(cache_dir) / cache_key(file_signature(corpus_path))


def _ensure_built(
    file: Path,
    root: Path,
    verify: bool,
    build: bool,
    memory_budget_bytes: int,
    force: bool = False,
) -> tuple[Path, bool]:
    signature = file_signature(file)
    directory = root / cache_key(signature)
    if not force and _usable(directory, file, signature, verify):
        return directory, False
    if not build:
        raise IndexStoreError(f"{directory}: no valid index of {file} cached")
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root):
        if not force and _usable(directory, file, signature, verify):
            return directory, False  # another process built it while we waited
        _build(file, directory, memory_budget_bytes)
    return directory, True


def _usable(directory: Path, file: Path, signature: FileSignature, verify: bool) -> bool:
    meta = _read_meta(directory)
    if meta is None:
        return False
    stored = FileSignature.from_dict(meta["source"])
    if stored is None or not signature.same_bytes_likely(stored):
        return False
    try:
        _check_files(directory, meta)
    except IndexStoreError:
        return False
    known = meta.get("verified_mtimes_ns", [])
    if not verify and (signature.mtime_ns == stored.mtime_ns or signature.mtime_ns in known):
        return True
    if content_sha256(file) != meta["content_sha256"]:
        return False
    _remember_mtime(directory, meta, signature.mtime_ns)
    return True


# -- building ----------------------------------------------------------------------------------
def _build(file: Path, target: Path, memory_budget_bytes: int) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would hide a shared cache from other users
    try:
        before = file_signature(file)
        digest = hashlib.sha256()
        stats = _write_index(file, staging, digest, memory_budget_bytes)
        if file_signature(file) != before:
            raise DatasetError(f"{file}: changed while it was being indexed; try again")
        meta = _metadata(file, before, digest.hexdigest(), stats, staging)
        _write_meta(staging, meta)
        if target.exists():
            shutil.rmtree(target)  # stale or broken: replace it
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_index(file: Path, staging: Path, digest: Any, memory_budget_bytes: int) -> BM25Stats:
    writer = BM25Writer(staging, memory_budget_bytes)
    try:
        with DocStoreWriter(staging) as store:
            records = iter_corpus_records(file, digest=digest)
            while batch := list(itertools.islice(records, BUILD_BATCH_DOCS)):
                store.add(batch)
                writer.add([f"{title}\n{text}" for _, title, text in batch])
    except BaseException:
        writer.abort()
        raise
    return writer.finish()


def _metadata(
    file: Path, signature: FileSignature, content_sha: str, stats: BM25Stats, directory: Path
) -> dict[str, Any]:
    names = [DATA_FILE, OFFSETS_FILE] + [n for n in BM25S_FILES if (directory / n).exists()]
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "corpus_id": corpus_id_of(content_sha),
        "content_sha256": content_sha,
        "source": {**signature.as_dict(), "path": str(file)},
        "verified_mtimes_ns": [],
        "documents": stats.documents,
        "vocab_size": stats.vocab_size,
        "tokens": stats.tokens,
        "postings": stats.postings,
        "tokenizer": tokenizer_signature(),
        "bm25s_version": bm25s.__version__,
        "files": {name: _file_facts(directory / name) for name in names},
    }


# -- checking ----------------------------------------------------------------------------------
def _read_meta(directory: Path) -> dict[str, Any] | None:
    """The metadata if it is a current file index's, else ``None`` (missing, old or junk)."""
    try:
        meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    if (
        meta.get("format_version") != FORMAT_VERSION
        or meta.get("tokenizer") != tokenizer_signature()
    ):
        return None
    fields = ("corpus_id", "content_sha256", "source", "documents", "vocab_size", "files")
    if any(name not in meta for name in fields) or not isinstance(meta["files"], dict):
        return None
    return meta


def _check_files(directory: Path, meta: dict[str, Any]) -> None:
    """Every file there, with its recorded size and first and last bytes (cheap: ~8 KiB each)."""
    for name, facts in meta["files"].items():
        try:
            actual = _file_facts(directory / name)
        except OSError as error:
            raise IndexStoreError(f"{directory / name}: unreadable ({error})") from error
        if actual != facts:
            raise IndexStoreError(f"{directory / name}: changed since the index was built")


def _check_bm25s(directory: Path, retriever: bm25s.BM25, meta: dict[str, Any]) -> None:
    scores = retriever.scores
    consistent = (
        scores["num_docs"] == meta["documents"]
        and len(retriever.vocab_dict) == meta["vocab_size"] + 1  # bm25s's empty token
        and len(scores["indptr"]) == meta["vocab_size"] + 1
        and int(scores["indptr"][-1]) == len(scores["data"]) == len(scores["indices"])
    )
    if not consistent:
        raise IndexStoreError(f"{directory}: bm25s files disagree with the metadata")


def _file_facts(path: Path) -> dict[str, Any]:
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        edges = hashlib.sha256(handle.read(_EDGE_BYTES))
        handle.seek(max(0, size - _EDGE_BYTES))
        edges.update(handle.read(_EDGE_BYTES))
    return {"size": size, "edges_sha256": edges.hexdigest()[:32]}


def _remember_mtime(directory: Path, meta: dict[str, Any], mtime_ns: int) -> None:
    """Record a modification time whose content was verified, so it is not hashed again."""
    known = [t for t in meta.get("verified_mtimes_ns", []) if t != mtime_ns]
    meta["verified_mtimes_ns"] = [*known, mtime_ns][-_MAX_REMEMBERED_MTIMES:]
    with contextlib.suppress(OSError):  # a read-only cache: verify again next time
        _write_meta(directory, meta)


def _write_meta(directory: Path, meta: dict[str, Any]) -> None:
    temporary = directory / f".{META_FILE}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(meta, indent=1), encoding="utf-8")
    os.replace(temporary, directory / META_FILE)


# -- helpers -----------------------------------------------------------------------------------
def _cache_root(cache_dir: PathLike | None) -> Path:
    return (
        Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    ).resolve()


def _stat(file: Path) -> tuple[int, int, int]:
    try:
        stat = file.stat()
    except OSError as error:
        raise DatasetError(f"{file}: cannot read corpus ({error.strerror})") from error
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


@contextlib.contextmanager
def _exclusive(root: Path) -> Iterator[None]:
    """Hold an exclusive lock on the cache directory (across processes) while building."""
    fd = os.open(root, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def clear_opened_indexes() -> None:
    """Forget the indexes ``open_corpus_index`` shares in-process (tests, or to free memory)."""
    with _opened_lock:
        _opened.clear()


__all__ = [
    "FORMAT",
    "CorpusFileIndex",
    "build_corpus_index",
    "build_corpus_index_command",
    "clear_opened_indexes",
    "corpus_index_dir",
    "load_corpus_index",
    "open_corpus_index",
]
