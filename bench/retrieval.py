"""Retrieval figures: the Search tool vs bare bm25s vs rank-bm25, the retriever server's
queries/s with 1 vs 64 clients, and the env step's cost as the corpus grows.

Corpora are generated in memory: ``words`` random words (of 50,000) per document, as in
``bench_retriever_server.py``; queries are two words of a random document. Per-query times
exclude building the index (reported apart). 1M documents do not fit this suite's time budget on
2 cores: that figure is read from ``bench_retrieval_scale.py``'s result when one exists.

``corpus_step_figures`` steps real envs (the dataset variant, its corpus a file of N documents
written by ``bench_retriever_server.write_corpus``) and keeps the corpus files and their BM25
indexes under ``runs/bench/corpora``, so only the first run builds them (200k: about a minute).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bm25s
import gymnasium as gym
from bench_retriever_server import (
    ServerStartError,
    hammer,
    health,
    random_queries,
    serving,
    write_corpus,
)

import agentflow_env  # noqa: F401 - registers the environments
from agentflow_env.retrieval.bm25 import clear_index_cache, tokenize_for_search
from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.tools.base import ToolContext
from agentflow_env.tools.search import SearchTool
from agentflow_env.workflow.actions import format_planner_action

from .report import Record, not_available, ratio

SCALE_RESULT = Path("runs/retrieval_scale/result_1000000.json")
CORPORA = Path("runs/bench/corpora")


def make_corpus(n_docs: int, words: int = 60, seed: int = 0) -> tuple[Corpus, list[str]]:
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(50_000)]
    documents = []
    for i in range(n_docs):
        text = " ".join(rng.choices(vocabulary, k=words))
        documents.append(Document(str(i), f"Title {i}", text))
    queries = []
    for _ in range(200):
        picked = rng.choice(documents).text.split()
        queries.append(" ".join(rng.sample(picked, 2)))
    return Corpus.from_documents(documents, corpus_id=f"bench-{n_docs}-{seed}"), queries


def _per_query_ms(search: Any, queries: list[str]) -> float:
    search(queries[0])
    started = time.perf_counter()
    for query in queries:
        search(query)
    return 1000 * (time.perf_counter() - started) / len(queries)


def time_libraries(n_docs: int, queries_per_lib: int) -> dict[str, Any]:
    """Per-query ms (and build s) of the Search tool, bare bm25s and rank-bm25 on one corpus."""
    corpus, queries = make_corpus(n_docs)
    queries = queries[:queries_per_lib]
    tool, context = SearchTool(), ToolContext(corpus=corpus)
    result: dict[str, Any] = {"documents": n_docs}

    async def tool_calls(qs: list[str]) -> None:
        for q in qs:
            assert (await tool.run({"query": q}, context)).ok

    started = time.perf_counter()
    asyncio.run(tool_calls(queries[:1]))
    result["tool_build_s"] = time.perf_counter() - started
    started = time.perf_counter()
    asyncio.run(tool_calls(queries))
    result["tool_ms"] = 1000 * (time.perf_counter() - started) / len(queries)
    clear_index_cache()

    started = time.perf_counter()
    tokens = [tokenize_for_search(d.contents) for d in corpus.documents]
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    result["bm25s_build_s"] = time.perf_counter() - started
    result["bm25s_ms"] = _per_query_ms(
        lambda q: retriever.retrieve([tokenize_for_search(q)], k=3, show_progress=False), queries
    )
    try:
        from rank_bm25 import BM25Okapi
    except ImportError:
        result["rank_bm25"] = "rank-bm25 is not installed (pip install rank-bm25)"
        return result
    started = time.perf_counter()
    okapi = BM25Okapi(tokens)
    result["rank_bm25_build_s"] = time.perf_counter() - started
    few = queries[: max(3, queries_per_lib // 10)]  # rank-bm25 scores every document per query
    result["rank_bm25_ms"] = _per_query_ms(
        lambda q: okapi.get_top_n(tokenize_for_search(q), corpus.documents, n=3), few
    )
    return result


def library_figures(sizes: list[int], queries: int) -> tuple[dict[str, Record], dict[int, float]]:
    figures: dict[str, Record] = {}
    tool_ms: dict[int, float] = {}
    for n in sizes:
        timed = time_libraries(n, queries)
        tool_ms[n] = timed["tool_ms"]
        label = _label(n)
        figures[f"retrieval.tool_vs_bm25s_{label}"] = ratio(
            timed["tool_ms"],
            timed["bm25s_ms"],
            what=f"Search tool ms/query ({label} docs)",
            against="bare bm25s ms/query",
            detail=timed,
        )
        if "rank_bm25_ms" in timed:
            figures[f"retrieval.rank_bm25_vs_bm25s_{label}"] = ratio(
                timed["rank_bm25_ms"],
                timed["bm25s_ms"],
                what=f"rank-bm25 ms/query ({label} docs)",
                against="bare bm25s ms/query",
                detail=timed,
            )
        else:
            figures[f"retrieval.rank_bm25_vs_bm25s_{label}"] = not_available(timed["rank_bm25"])
    figures.update(_million())
    return figures, tool_ms


def _million() -> dict[str, Record]:
    reason = (
        "1M documents do not fit this suite's 10-minute budget on 2 cores; run "
        "`python bench/bench_retrieval_scale.py` (minutes) and rerun: its result is read from "
        f"{SCALE_RESULT}"
    )
    if not SCALE_RESULT.exists():
        return {
            "retrieval.tool_vs_bm25s_1M": not_available(reason),
            "retrieval.rank_bm25_vs_bm25s_1M": not_available(
                "rank-bm25 scores every document in Python per query: minutes per 100 queries at 1M"
            ),
        }
    scale = json.loads(SCALE_RESULT.read_text(encoding="utf-8"))
    ours, bare = scale["ours-serve"], scale["bare-serve"]
    return {
        "retrieval.tool_vs_bm25s_1M": ratio(
            ours["latency_ms_median"],
            bare["latency_ms_median"],
            what="file index single query ms (1M passages, from bench_retrieval_scale)",
            against="bare bm25s (mmap) single query ms",
            source=str(SCALE_RESULT),
        ),
        "retrieval.rank_bm25_vs_bm25s_1M": not_available(
            "rank-bm25 scores every document in Python per query: minutes per 100 queries at 1M"
        ),
    }


def _bench_corpus(n_docs: int) -> Path:
    """``write_corpus``'s corpus of ``n_docs`` documents under ``CORPORA``, written once."""
    path = CORPORA / f"corpus_{n_docs}.jsonl"
    if not path.exists():
        CORPORA.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        write_corpus(partial, n_docs)
        partial.replace(path)
    return path


def _bench_questions() -> Path:
    """A few questions whose answer no document holds (episodes run to their turn limit)."""
    path = CORPORA / "questions.jsonl"
    rows = [
        {
            "id": f"q{i}",
            "question": f"Which passage has w{i} next to w{i + 7}?",
            "golden_answers": ["none"],
        }
        for i in range(8)
    ]
    CORPORA.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def corpus_step_ms(n_docs: int, episodes: int, turns: int) -> dict[str, Any]:
    """Median ``env.step`` ms of Search turns in an env whose corpus has ``n_docs`` documents,
    and of the Search call alone on the same queries; with the env's start-up seconds."""
    corpus_path, questions = _bench_corpus(n_docs), _bench_questions()
    started = time.perf_counter()
    env = gym.make(
        "AgentFlow-Search-v0",
        dataset=str(questions),
        corpus=str(corpus_path),
        index_cache_dir=str(CORPORA / "indexes"),
        max_turns=turns + 1,
    )
    start_s = time.perf_counter() - started
    rng = random.Random(n_docs)
    queries: list[str] = []
    step_s: list[float] = []
    try:
        for episode in range(episodes + 1):  # episode 0 warms up
            env.reset(seed=episode)
            for _ in range(turns):  # the limit is one turn beyond: no timed turn ends it
                query = f"w{rng.randrange(50_000)} w{rng.randrange(50_000)}"
                action = format_planner_action("Look it up.", query, "Find the passage.", "Search")
                began = time.perf_counter()
                _, _, terminated, truncated, info = env.step(action)
                if episode:
                    step_s.append(time.perf_counter() - began)
                    queries.append(query)
                if not info.get("tool_ok", True):
                    raise RuntimeError(f"the Search call failed: {info}")
                if terminated or truncated:
                    break
        corpus = env.unwrapped.task.corpus
        tool = next(t for t in env.unwrapped.tools if t.name == "Search")
        context = ToolContext(corpus=corpus)

        async def searches() -> list[float]:
            times = []
            for query in queries:
                began = time.perf_counter()
                assert (await tool.run({"query": query}, context)).ok
                times.append(time.perf_counter() - began)
            return times

        search_s = asyncio.run(searches())
    finally:
        env.close()
    return {
        "documents": n_docs,
        "steps": len(step_s),
        "step_ms": 1000 * statistics.median(step_s),
        "search_ms": 1000 * statistics.median(search_s),
        "env_start_s": start_s,
    }


def corpus_step_figures(sizes: list[int], episodes: int = 10, turns: int = 8) -> dict[str, Record]:
    """``step_cost.corpus_growth``: measured ``env.step`` ms (Search turns) with the largest
    corpus against the smallest, and the curve over ``sizes``. Each size runs in its own child
    process (``python -m bench.retrieval corpus-step N EPISODES TURNS``): a large corpus left in
    memory would slow the next size's steps (its objects weigh on every garbage collection)."""
    timed = []
    for n in sorted(sizes):
        command = [sys.executable, "-m", "bench.retrieval", "corpus-step"]
        command += [str(n), str(episodes), str(turns)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            reason = f"the {_label(n)} run failed: {done.stderr.strip()[-500:]}"
            return {"step_cost.corpus_growth": not_available(reason)}
        timed.append(json.loads(done.stdout.splitlines()[-1]))
    first, last = timed[0], timed[-1]
    steps = [t["step_ms"] for t in timed]
    return {
        "step_cost.corpus_growth": ratio(
            last["step_ms"],
            first["step_ms"],
            what=f"env.step ms, Search over {_label(last['documents'])} docs",
            against=f"over {_label(first['documents'])} docs",
            curve_documents=[t["documents"] for t in timed],
            curve_step_ms=steps,
            curve_ratio=[ms / steps[0] for ms in steps],
            curve_search_ms=[t["search_ms"] for t in timed],
            curve_env_start_s=[t["env_start_s"] for t in timed],
            steps_per_size=first["steps"],
            method="median env.step of Search turns (dataset env, rule modules, corpus of N "
            "generated 100-word documents); search_ms: the Search call alone on the same queries",
        )
    }


def server_figure(n_docs: int, requests: int, clients: int = 64, workers: int = 1) -> Record:
    """Queries/s of ``serve-retriever`` (``workers`` processes) with ``clients`` concurrent
    clients against one client, single-query requests through ``RemoteRetriever``."""
    queries = random_queries(requests)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        write_corpus(corpus, n_docs)
        try:
            with serving(corpus, Path(tmp) / "cache", "--workers", str(workers)) as (url, _):
                one = requests / asyncio.run(hammer(url, queries, 1))
                many = requests / asyncio.run(hammer(url, queries, clients))
                answered = health(url)
        except ServerStartError as error:
            return not_available(str(error))
    return ratio(
        many,
        one,
        what=f"retriever server queries/s, {clients} clients ({_label(n_docs)} docs)",
        against="1 client",
        target=3.0,
        higher_is_better=True,
        batches=answered.get("batches"),
        largest_batch=answered.get("largest_batch"),
        workers=workers,
        requests=requests,
    )


def _label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


if __name__ == "__main__":
    if sys.argv[1:2] == ["corpus-step"]:
        documents, episodes, turns = (int(arg) for arg in sys.argv[2:5])
        print(json.dumps(corpus_step_ms(documents, episodes, turns)))
