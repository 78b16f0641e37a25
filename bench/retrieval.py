"""Retrieval figures: the Search tool vs bare bm25s vs rank-bm25, the retriever server's
queries/s with 1 vs 64 clients, and the Search call's cost as the corpus grows.

Corpora are generated in memory: ``words`` random words (of 50,000) per document, as in
``bench_retriever_server.py``; queries are two words of a random document. Per-query times
exclude building the index (reported apart). 1M documents do not fit this suite's time budget on
2 cores: that figure is read from ``bench_retrieval_scale.py``'s result when one exists.
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import bm25s
from bench_retriever_server import (
    ServerStartError,
    hammer,
    health,
    random_queries,
    serving,
    write_corpus,
)

from agentflow_env.retrieval.bm25 import clear_index_cache, tokenize_for_search
from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.tools.base import ToolContext
from agentflow_env.tools.search import SearchTool

from .report import Record, not_available, ratio

SCALE_RESULT = Path("runs/retrieval_scale/result_1000000.json")


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


def corpus_curve(tool_ms: dict[int, float], step_ms: float) -> Record:
    """Step cost as the corpus grows: the env step plus the Search call's growth over the smallest."""
    sizes = sorted(tool_ms)
    first = sizes[0]
    steps = [step_ms + tool_ms[n] - tool_ms[first] for n in sizes]
    return ratio(
        steps[-1],
        steps[0],
        what=f"estimated step ms at {_label(sizes[-1])} docs",
        against=f"at {_label(first)} docs",
        curve_documents=sizes,
        curve_step_ms=steps,
        curve_search_ms=[tool_ms[n] for n in sizes],
        method="structured step ms of the default env + (Search ms at N - Search ms at the smallest N)",
    )


def server_figure(n_docs: int, requests: int, clients: int = 64) -> Record:
    queries = random_queries(requests)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        write_corpus(corpus, n_docs)
        try:
            with serving(corpus, Path(tmp) / "cache") as (url, _):
                one = requests / asyncio.run(hammer(url, queries, 1))
                many = requests / asyncio.run(hammer(url, queries, clients))
                batches = health(url).get("batches")
        except ServerStartError as error:
            return not_available(str(error))
    return ratio(
        many,
        one,
        what=f"retriever server queries/s, {clients} clients ({_label(n_docs)} docs)",
        against="1 client",
        higher_is_better=True,
        batches=batches,
        requests=requests,
    )


def _label(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"
