"""Throughput of the retriever server with and without micro-batching.

    python bench/bench_retriever_server.py [--docs 20000] [--clients 64] [--requests 2000]

Many concurrent single-query requests (as many env workers send) hit one server; the batcher
merges those that arrive within the window into one ``search_batch`` call. The client runs in
this process too; on few cores its HTTP overhead (httpx, ~2-3 ms CPU per request) can dominate,
so also try the server alone: ``agentflow-env serve-retriever --corpus PATH --port 0``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

from agentflow_env.retrieval.bm25 import get_index
from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.retrieval.remote import RemoteRetriever
from agentflow_env.retrieval.server import start_retriever_server


def synthetic_corpus(n_docs: int, seed: int = 0) -> Corpus:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(50_000)]
    return Corpus.from_documents(
        Document(str(i), f"Title {i}", " ".join(rng.choices(words, k=100))) for i in range(n_docs)
    )


async def hammer(url: str, queries: list[str], clients: int) -> float:
    retriever = RemoteRetriever(url, timeout_s=30)
    semaphore = asyncio.Semaphore(clients)

    async def one(query: str) -> None:
        async with semaphore:
            await retriever.search(query, 3)

    started = time.perf_counter()
    await asyncio.gather(*(one(q) for q in queries))
    elapsed = time.perf_counter() - started
    await retriever.aclose()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    corpus = synthetic_corpus(args.docs)
    index = get_index(corpus)
    rng = random.Random(1)
    queries = [f"w{rng.randrange(50_000)} w{rng.randrange(50_000)}" for _ in range(args.requests)]
    for window_ms in (0.0, 2.0, 5.0):
        with start_retriever_server(index=index, batch_window_s=window_ms / 1000) as handle:
            elapsed = asyncio.run(hammer(handle.url, queries, args.clients))
            stats = handle.stats.as_dict()
        print(
            f"window {window_ms:>3.1f} ms: {args.requests / elapsed:7.0f} requests/s, "
            f"{stats['batches']} batches, largest {stats['largest_batch']} queries"
        )


if __name__ == "__main__":
    main()
