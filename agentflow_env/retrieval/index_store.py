"""BM25 indexes cached on disk: a corpus is indexed once and loaded by every later process.

An index lives in ``<cache_dir>/<corpus_id>``: bm25s's own files (``BM25.save``; its vocabulary
is ours plus bm25s's empty token) and ``agentflow_index.json`` (format, corpus id, document
count, a tokenizer signature). A directory whose metadata does not match the corpus is rebuilt.
The default cache dir is ``$AGENTFLOW_ENV_CACHE/indexes``, else
``~/.cache/agentflow_env/indexes``. Writes go to a temporary directory renamed into place, so
processes racing to build the same index never see a half-written one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import bm25s

from agentflow_env.base.settings import read_env_var
from agentflow_env.retrieval.bm25 import BM25Index, get_index, tokenize_for_search
from agentflow_env.retrieval.corpus import Corpus, load_corpus_jsonl

PathLike = str | os.PathLike[str]
FORMAT_VERSION = 1
META_FILE = "agentflow_index.json"
CACHE_ENV_VAR = "AGENTFLOW_ENV_CACHE"
_EMPTY_TOKEN = ""  # bm25s adds it to the vocabulary; our tokenizer never produces it
_TOKENIZER_PROBE = "Zürich's Eiffel-Tower, 1889! the RUNNING naïve_café x2 Ωmega"


class IndexStoreError(RuntimeError):
    """A directory does not hold a usable index for the corpus."""


def default_cache_dir() -> Path:
    """``$AGENTFLOW_ENV_CACHE/indexes``, else ``~/.cache/agentflow_env/indexes``."""
    root = read_env_var(CACHE_ENV_VAR)
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "agentflow_env"
    return base / "indexes"


def index_dir(corpus: Corpus, cache_dir: PathLike | None = None) -> Path:
    """Where ``corpus``'s index lives under ``cache_dir`` (default: ``default_cache_dir()``)."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return root / corpus.corpus_id


def save_index(index: BM25Index, directory: PathLike) -> Path:
    """Write ``index`` to ``directory`` atomically; an existing valid copy is kept as is."""
    target = Path(directory)
    meta = _metadata(index.corpus, vocab_size=len(index.vocab))
    if _read_metadata(target) == meta:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would hide a shared cache from other users
    try:
        retriever = index.retriever
        if retriever is not None:
            retriever.save(staging, show_progress=False)
        (staging / META_FILE).write_text(json.dumps(meta, indent=1), encoding="utf-8")
        if target.exists() and _read_metadata(target) != meta:
            shutil.rmtree(target)  # stale or broken: replace it
        try:
            staging.rename(target)
        except OSError:
            if _read_metadata(target) != meta:  # lost a race to a process writing junk?
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def load_index(corpus: Corpus, directory: PathLike, *, mmap: bool = False) -> BM25Index:
    """The index saved in ``directory`` for ``corpus``; raises ``IndexStoreError`` if unusable.

    ``mmap=True`` maps the score arrays instead of reading them (huge corpora, many processes).
    """
    source = Path(directory)
    meta = _read_metadata(source)
    if meta is None:
        raise IndexStoreError(f"{source}: no index metadata ({META_FILE})")
    vocab_size = meta.get("vocab_size")
    if not isinstance(vocab_size, int):
        raise IndexStoreError(f"{source}: index metadata has no vocabulary size")
    expected = _metadata(corpus, vocab_size=vocab_size)
    if meta != expected:
        mismatched = sorted(k for k in expected if meta.get(k) != expected[k])
        raise IndexStoreError(f"{source}: index does not match the corpus ({mismatched} differ)")
    vocab: dict[str, int] = {}
    retriever: bm25s.BM25 | None = None
    if vocab_size > 0:
        try:
            retriever = bm25s.BM25.load(source, mmap=mmap, load_vocab=True, show_progress=False)
        except (OSError, ValueError) as error:
            raise IndexStoreError(f"{source}: cannot load the bm25s index ({error})") from error
        vocab = {t: i for t, i in retriever.vocab_dict.items() if t != _EMPTY_TOKEN}
        if len(vocab) != vocab_size:
            raise IndexStoreError(f"{source}: vocabulary size differs from the metadata")
    return BM25Index.from_parts(corpus, vocab, retriever)


def load_or_build_index(
    corpus: Corpus, cache_dir: PathLike | None = None, *, mmap: bool = False
) -> BM25Index:
    """The process-wide index for ``corpus`` (as ``get_index``), loaded from disk when cached.

    Otherwise it is built and saved under ``cache_dir`` for later processes. The result also
    lands in ``get_index``'s in-process cache, so every env and tool of the process shares it.
    """
    directory = index_dir(corpus, cache_dir)
    return get_index(corpus, build=lambda c: _load_or_build(c, directory, mmap))


def build_index(
    corpus: Corpus, cache_dir: PathLike | None = None, *, force: bool = False
) -> tuple[Path, bool]:
    """Build and save ``corpus``'s index unless a valid one is cached; ``(directory, built)``."""
    directory = index_dir(corpus, cache_dir)
    if not force:
        try:
            load_index(corpus, directory)
            return directory, False
        except IndexStoreError:
            pass
    elif directory.exists():
        shutil.rmtree(directory)
    save_index(BM25Index(corpus), directory)
    return directory, True


def build_index_command(corpus_path: PathLike, out: PathLike | None, force: bool = False) -> int:
    """``agentflow-env build-index``: load the corpus file, build or reuse its index, report."""
    started = time.perf_counter()
    corpus = load_corpus_jsonl(corpus_path)
    loaded = time.perf_counter()
    directory, built = build_index(corpus, out, force=force)
    action = "built" if built else "already cached"
    print(
        f"{action}: {directory}  ({len(corpus)} documents, corpus_id {corpus.corpus_id}; "
        f"read {loaded - started:.1f} s, index {time.perf_counter() - loaded:.1f} s)"
    )
    return 0


def _load_or_build(corpus: Corpus, directory: Path, mmap: bool) -> BM25Index:
    try:
        return load_index(corpus, directory, mmap=mmap)
    except IndexStoreError:
        index = BM25Index(corpus)
        with contextlib.suppress(OSError):  # a read-only cache still gives a working index
            save_index(index, directory)
        return index


def _metadata(corpus: Corpus, vocab_size: int) -> dict[str, object]:
    return {
        "format": FORMAT_VERSION,
        "corpus_id": corpus.corpus_id,
        "documents": len(corpus),
        "vocab_size": vocab_size,
        "tokenizer": tokenizer_signature(),
    }


def _read_metadata(directory: Path) -> dict[str, object] | None:
    try:
        meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def tokenizer_signature() -> str:
    """Changes when ``tokenize_for_search`` changes behaviour, which invalidates saved indexes."""
    tokens = "\x00".join(tokenize_for_search(_TOKENIZER_PROBE))
    return hashlib.sha256(tokens.encode("utf-8")).hexdigest()[:12]


__all__ = [
    "CACHE_ENV_VAR",
    "IndexStoreError",
    "build_index",
    "default_cache_dir",
    "index_dir",
    "load_index",
    "load_or_build_index",
    "save_index",
    "tokenizer_signature",
]
