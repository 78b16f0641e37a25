"""Dense retrieval: a sentence-transformers encoder and a FAISS inner-product index.

Passages (``Document.contents``) and queries are embedded and L2-normalised, so the inner
product is the cosine similarity. As in Search-R1, e5 models get ``"query: "`` / ``"passage: "``
prefixes and bge models their query instruction; other models none (``default_prefixes``; both
can be set). The index is a flat (exact) ``IndexFlatIP``, moved to every GPU when FAISS sees one.

Passage embeddings are cached on disk beside the BM25 indexes, keyed by corpus id and model:
``<cache dir>/<corpus_id>.dense/<model>-<hash>/`` holds ``embeddings.npy`` (float32, one row
per document, written chunk by chunk) and ``dense_meta.json``. The hash covers the model (its
resolved path or hub name) and the passage prefix; replacing a model's files at the same path
does not invalidate the cache (delete the directory).

sentence-transformers, torch and faiss are optional (``pip install 'agentflow-env[dense]'``):
they are imported when dense retrieval is first used, and a missing one raises
``DenseUnavailableError`` naming the extra.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import re
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from agentflow_env.retrieval.bm25 import Hit
from agentflow_env.retrieval.corpus import Document, PathLike
from agentflow_env.retrieval.index_store import default_cache_dir

DEFAULT_DENSE_MODEL = "intfloat/e5-base-v2"
"""Search-R1's default retriever model (a hub name: it must be in the local Hugging Face cache)."""
DENSE_EXTRA = "dense"
FORMAT_VERSION = 1
EMBEDDINGS_FILE = "embeddings.npy"
META_FILE = "dense_meta.json"
BGE_QUERY_PREFIX = "Represent this sentence for searching relevant passages: "
MIN_DISK_CACHED_DOCS = 1000
"""``get_dense_index`` keeps smaller corpora's embeddings in memory only (a fresh synthetic
world per episode would otherwise leave one cache directory per world)."""
_ENCODE_CHUNK = 8192  # documents encoded and written per step (bounds memory on big corpora)
_ADD_CHUNK = 65536  # embeddings copied into FAISS per step (from a memory-mapped file)


class DenseUnavailableError(ImportError):
    """An optional package of dense retrieval is not installed."""


class DenseModelError(RuntimeError):
    """The encoder model cannot be loaded (not a local directory nor in the local hub cache)."""


def require_module(module: str, package: str) -> ModuleType:
    """Import an optional dependency, or raise ``DenseUnavailableError`` saying what to install."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise DenseUnavailableError(
            f"dense and hybrid retrieval need the {package!r} package, which cannot be imported "
            f"({error}); install the extra: pip install 'agentflow-env[{DENSE_EXTRA}]'"
        ) from error


def check_dense_dependencies() -> None:
    """Raise ``DenseUnavailableError`` unless faiss and sentence-transformers import."""
    require_module("faiss", "faiss-cpu")
    require_module("sentence_transformers", "sentence-transformers")


_E5 = re.compile(r"(?<![a-z0-9])e5(?![a-z0-9])")


def default_prefixes(model: str) -> tuple[str, str]:
    """``(query prefix, passage prefix)`` as Search-R1 picks them from the model's name."""
    name = model.lower()
    if _E5.search(name):
        return "query: ", "passage: "
    if "bge" in name:
        return BGE_QUERY_PREFIX, ""
    return "", ""


class DocumentSource(Protocol):
    """Numbered documents with a corpus id: a ``Corpus``, or a file index's document store
    (``file_index.CorpusFileIndex``), whose documents are read from disk on demand."""

    @property
    def corpus_id(self) -> str: ...

    @property
    def documents(self) -> Sequence[Document]: ...


class TextEncoder(Protocol):
    """Turns texts into L2-normalised float32 row vectors."""

    model_id: str
    """The model's identity: a resolved local path or a hub name (keys the embeddings cache)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class SentenceEncoder:
    """A sentence-transformers model, loaded from a local path or the local hub cache only.

    ``device`` defaults to sentence-transformers' choice (a GPU when torch sees one). Calls are
    serialised: one model object is shared by every thread of the process.
    """

    def __init__(self, model: str, *, device: str | None = None, batch_size: int = 64) -> None:
        st = require_module("sentence_transformers", "sentence-transformers")
        require_module("torch", "torch")
        path = Path(model).expanduser()
        self.model_id = str(path.resolve()) if path.exists() else model
        self.batch_size = batch_size
        try:
            self._model = st.SentenceTransformer(
                self.model_id, device=device, local_files_only=True
            )
        except Exception as error:  # OSError, ValueError, hub errors: all mean "no such model"
            raise DenseModelError(
                f"cannot load the dense model {model!r}: give a local sentence-transformers "
                f"directory, or a Hugging Face name already in the local cache "
                f"({type(error).__name__}: {error})"
            ) from error
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            vectors = self._model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)


_encoders: dict[str, SentenceEncoder] = {}
_encoders_lock = threading.Lock()


def get_encoder(model: str) -> SentenceEncoder:
    """The process-wide encoder for ``model`` (loaded once)."""
    with _encoders_lock:
        encoder = _encoders.get(model)
        if encoder is None:
            encoder = _encoders[model] = SentenceEncoder(model)
        return encoder


class DenseIndex:
    """Exact inner-product search over normalised passage embeddings (read-only, thread-safe).

    ``source`` says where the embeddings came from (``"built"``, ``"loaded"`` from the disk
    cache, or ``"given"``) and ``seconds`` how long that took.
    """

    kind = "dense"

    def __init__(
        self,
        corpus: DocumentSource,
        encoder: TextEncoder,
        embeddings: np.ndarray,
        *,
        query_prefix: str = "",
        source: str = "given",
        seconds: float = 0.0,
    ) -> None:
        self.documents = corpus.documents
        if embeddings.ndim != 2 or embeddings.shape[0] != len(self.documents):
            raise ValueError(
                f"expected one embedding row per document ({len(self.documents)}), "
                f"got {embeddings.shape}"
            )
        self._corpus_id = corpus.corpus_id
        self.encoder = encoder
        self.query_prefix = query_prefix
        self.dimension = int(embeddings.shape[1])
        self.source = source
        self.seconds = seconds
        self.on_gpu = False
        self._index: Any = None
        if len(self.documents):
            self._index, self.on_gpu = _faiss_index(embeddings)

    @property
    def corpus_id(self) -> str:
        return self._corpus_id

    @property
    def model(self) -> str:
        return self.encoder.model_id

    def __len__(self) -> int:
        return len(self.documents)

    def search(self, query: str, k: int) -> list[Hit]:
        """The top ``k`` documents by cosine similarity, best first."""
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """``search`` for many queries: one encoder call and one FAISS search."""
        k = min(k, len(self.documents))
        if self._index is None or k <= 0 or not queries:
            return [[] for _ in queries]
        vectors = self.encoder.encode([self.query_prefix + query for query in queries])
        scores, indices = self._index.search(vectors, k)
        documents = self.documents
        return [
            [
                (documents[int(index)], float(score))
                for index, score in zip(row_indices, row_scores, strict=True)
                if index >= 0
            ]
            for row_indices, row_scores in zip(indices, scores, strict=True)
        ]


def _faiss_index(embeddings: np.ndarray) -> tuple[Any, bool]:
    """A flat inner-product index of ``embeddings`` (added in chunks: it may be memory-mapped),
    copied to all GPUs when FAISS has any."""
    faiss = require_module("faiss", "faiss-cpu")
    index = faiss.IndexFlatIP(int(embeddings.shape[1]))
    for start in range(0, embeddings.shape[0], _ADD_CHUNK):
        chunk = embeddings[start : start + _ADD_CHUNK]
        index.add(np.ascontiguousarray(chunk, dtype=np.float32))
    get_num_gpus = getattr(faiss, "get_num_gpus", None)
    if get_num_gpus is None or get_num_gpus() <= 0:
        return index, False
    options = faiss.GpuMultipleClonerOptions()
    options.shard = True  # split a large index over the GPUs instead of copying it to each
    return faiss.index_cpu_to_all_gpus(index, co=options), True


# -- building, and the disk cache -----------------------------------------------------------------
def encode_corpus(
    documents: Sequence[Document],
    encoder: TextEncoder,
    passage_prefix: str = "",
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Every document's embedding, in order (written into ``out`` when given)."""
    for start in range(0, len(documents), _ENCODE_CHUNK):
        rows = range(start, min(start + _ENCODE_CHUNK, len(documents)))
        vectors = encoder.encode([passage_prefix + documents[row].contents for row in rows])
        if out is None:
            out = np.empty((len(documents), vectors.shape[1]), dtype=np.float32)
        out[start : start + len(rows)] = vectors
    return out if out is not None else np.zeros((0, 0), dtype=np.float32)


def embeddings_dir(
    corpus_id: str, model_id: str, passage_prefix: str = "", cache_dir: PathLike | None = None
) -> Path:
    """Where the embeddings of corpus ``corpus_id`` by ``model_id`` are cached: beside the BM25
    indexes, in ``<cache_dir>/<corpus_id>.dense/`` (default ``index_store.default_cache_dir()``)."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    digest = hashlib.sha256(f"{FORMAT_VERSION}\0{model_id}\0{passage_prefix}".encode()).hexdigest()
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model_id).name or model_id)[:60]
    return root / f"{corpus_id}.dense" / f"{name}-{digest[:12]}"


def load_or_build_dense_index(
    corpus: DocumentSource,
    model: str | TextEncoder = DEFAULT_DENSE_MODEL,
    *,
    cache_dir: PathLike | None = None,
    use_cache: bool = True,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
) -> DenseIndex:
    """A ``DenseIndex`` whose passage embeddings are read from the disk cache, else computed
    (and saved unless ``use_cache=False``). ``model`` is a model path or name, or an encoder;
    prefixes default to ``default_prefixes`` of its name."""
    encoder = get_encoder(model) if isinstance(model, str) else model
    default_query, default_passage = default_prefixes(encoder.model_id)
    query_prefix = default_query if query_prefix is None else query_prefix
    passage_prefix = default_passage if passage_prefix is None else passage_prefix
    started = time.perf_counter()
    directory = embeddings_dir(corpus.corpus_id, encoder.model_id, passage_prefix, cache_dir)
    meta = _metadata(corpus, encoder.model_id, passage_prefix)
    embeddings = _load_embeddings(directory, meta) if use_cache else None
    source = "loaded"
    if embeddings is None:
        source = "built"
        embeddings = _build_embeddings(corpus, encoder, passage_prefix, directory, meta, use_cache)
    return DenseIndex(
        corpus,
        encoder,
        embeddings,
        query_prefix=query_prefix,
        source=source,
        seconds=time.perf_counter() - started,
    )


def _metadata(corpus: DocumentSource, model_id: str, passage_prefix: str) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "corpus_id": corpus.corpus_id,
        "documents": len(corpus.documents),
        "model": model_id,
        "passage_prefix": passage_prefix,
    }


def _load_embeddings(directory: Path, meta: dict[str, Any]) -> np.ndarray | None:
    try:
        saved = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
        if not isinstance(saved, dict) or {k: saved.get(k) for k in meta} != meta:
            return None
        embeddings = np.load(directory / EMBEDDINGS_FILE, mmap_mode="r")
    except (OSError, ValueError):
        return None
    if embeddings.ndim != 2 or embeddings.shape[0] != meta["documents"]:
        return None
    return embeddings


def _build_embeddings(
    corpus: DocumentSource,
    encoder: TextEncoder,
    passage_prefix: str,
    directory: Path,
    meta: dict[str, Any],
    save: bool,
) -> np.ndarray:
    documents = corpus.documents
    if not save or not len(documents):
        return encode_corpus(documents, encoder, passage_prefix)
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    except OSError:  # a read-only cache still gives a working index
        return encode_corpus(documents, encoder, passage_prefix)
    try:
        staging.chmod(0o755)
        first = encoder.encode([passage_prefix + documents[0].contents])
        out = np.lib.format.open_memmap(
            staging / EMBEDDINGS_FILE,
            mode="w+",
            dtype=np.float32,
            shape=(len(documents), first.shape[1]),
        )
        encode_corpus(documents, encoder, passage_prefix, out)
        out.flush()
        del out
        saved = {**meta, "dimension": int(first.shape[1])}
        (staging / META_FILE).write_text(json.dumps(saved, indent=1), encoding="utf-8")
        if directory.exists():
            shutil.rmtree(directory)  # stale: its metadata did not match
        with contextlib.suppress(OSError):  # lost a race to another process: use ours anyway
            staging.rename(directory)
        if not staging.exists():
            loaded = _load_embeddings(directory, meta)
            if loaded is not None:
                return loaded
        loaded = _load_embeddings(staging, meta)
        if loaded is None:
            raise OSError(f"{staging}: embeddings just written cannot be read back")
        return np.array(loaded)  # off the mmap: the staging copy is deleted below
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# -- the process-wide cache ------------------------------------------------------------------------
_MAX_CACHED = 8
_indexes: OrderedDict[tuple[str, str, str, str], DenseIndex] = OrderedDict()
_indexes_lock = threading.Lock()
_build_locks: dict[tuple[str, str, str, str], threading.Lock] = {}


def get_dense_index(
    corpus: DocumentSource,
    model: str | None = None,
    *,
    cache_dir: PathLike | None = None,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
) -> DenseIndex:
    """The process-wide ``DenseIndex`` of ``corpus`` with ``model`` (default
    ``DEFAULT_DENSE_MODEL``), made at most once even under races (the last 8 are kept).
    Corpora of at least ``MIN_DISK_CACHED_DOCS`` documents use the disk cache."""
    name = model or DEFAULT_DENSE_MODEL
    key = (corpus.corpus_id, name, str(query_prefix), str(passage_prefix))
    with _indexes_lock:
        index = _cached(key)
        if index is not None:
            return index
        build_lock = _build_locks.setdefault(key, threading.Lock())
    with build_lock:
        with _indexes_lock:
            index = _cached(key)
            if index is not None:
                return index
        try:
            index = load_or_build_dense_index(
                corpus,
                name,
                cache_dir=cache_dir,
                use_cache=len(corpus.documents) >= MIN_DISK_CACHED_DOCS,
                query_prefix=query_prefix,
                passage_prefix=passage_prefix,
            )
            with _indexes_lock:
                _indexes[key] = index
                while len(_indexes) > _MAX_CACHED:
                    _indexes.popitem(last=False)
        finally:
            with _indexes_lock:
                if _build_locks.get(key) is build_lock:
                    del _build_locks[key]
    return index


def clear_dense_cache() -> None:
    """Drop every cached dense index and encoder (tests, or to free memory)."""
    with _indexes_lock:
        _indexes.clear()
    with _encoders_lock:
        _encoders.clear()


def _cached(key: tuple[str, str, str, str]) -> DenseIndex | None:
    index = _indexes.get(key)
    if index is not None:
        _indexes.move_to_end(key)
    return index


__all__ = [
    "DEFAULT_DENSE_MODEL",
    "DENSE_EXTRA",
    "MIN_DISK_CACHED_DOCS",
    "DenseIndex",
    "DenseModelError",
    "DocumentSource",
    "DenseUnavailableError",
    "SentenceEncoder",
    "TextEncoder",
    "check_dense_dependencies",
    "clear_dense_cache",
    "default_prefixes",
    "embeddings_dir",
    "encode_corpus",
    "get_dense_index",
    "get_encoder",
    "load_or_build_dense_index",
]
