"""Throughput of the shared retriever server with one client and with many concurrent clients.

    python bench/bench_retriever_server.py [--retriever bm25|dense|hybrid] [--dense-model PATH]
        [--docs 20000] [--clients 1,64] [--requests 2000] [--window-ms 2] [--workers 1]

The server runs as its own process (``agentflow-env serve-retriever`` on a generated corpus, as
env workers would share it; ``--workers N``: N server processes on its port); this process
sends single-query requests from N concurrent clients (asyncio, one ``RemoteRetriever``) and
reports queries/s per N, the ratio against one client, and how the server batched them
(``/health``; with several workers, the counters of the worker that answered). On few cores
the client's own HTTP work (aiohttp, ~0.25 ms CPU per request with 64 clients; httpx took
~2-3 ms) competes with the server for the CPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from agentflow_env.retrieval.remote import RemoteRetriever


def write_corpus(path: Path, n_docs: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(50_000)]
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n_docs):
            text = " ".join(rng.choices(words, k=100))
            handle.write(json.dumps({"id": str(i), "contents": f"Title {i}\n{text}"}) + "\n")


async def hammer(url: str, queries: list[str], clients: int) -> float:
    retriever = RemoteRetriever(url, timeout_s=120)
    semaphore = asyncio.Semaphore(clients)

    async def one(query: str) -> None:
        async with semaphore:
            await retriever.search(query, 3)

    await retriever.search("warm up", 3)
    started = time.perf_counter()
    await asyncio.gather(*(one(q) for q in queries))
    elapsed = time.perf_counter() - started
    await retriever.aclose()
    return elapsed


def random_queries(count: int, seed: int = 1) -> list[str]:
    """Two-word queries over ``write_corpus``'s vocabulary."""
    rng = random.Random(seed)
    return [f"w{rng.randrange(50_000)} w{rng.randrange(50_000)}" for _ in range(count)]


class ServerStartError(RuntimeError):
    """``serve-retriever`` did not print its address."""


@contextlib.contextmanager
def serving(corpus: Path, cache_dir: Path, *options: str) -> Iterator[tuple[str, str]]:
    """``agentflow-env serve-retriever`` on ``corpus`` (a free port), as its own process; yields
    its base URL and its second start-up line (the index it serves), and stops it after."""
    command = [sys.executable, "-m", "agentflow_env.cli", "serve-retriever", "--corpus"]
    command += [str(corpus), "--port", "0", "--cache-dir", str(cache_dir), *options]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if not line.startswith("serving "):
            raise ServerStartError(f"the retriever server did not start: {line!r}")
        url = line.split(" at ")[1].strip().removesuffix("/retrieve")
        yield url, server.stdout.readline().strip()
    finally:
        server.terminate()
        server.wait(timeout=30)


def health(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url + "/health", timeout=30) as response:
        return dict(json.loads(response.read()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--retriever", default="bm25", choices=("bm25", "dense", "hybrid"))
    parser.add_argument("--dense-model", default=None)
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--clients", default="1,64", help="comma-separated client counts")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--window-ms", type=float, default=2.0)
    parser.add_argument("--workers", type=int, default=1, help="server processes on the port")
    args = parser.parse_args()
    queries = random_queries(args.requests)
    options = ["--retriever", args.retriever, "--batch-window-ms", str(args.window_ms)]
    options += ["--workers", str(args.workers)]
    if args.dense_model:
        options += ["--dense-model", args.dense_model]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        write_corpus(corpus, args.docs)
        started = time.perf_counter()
        with serving(corpus, Path(tmp) / "cache", *options) as (url, index_line):
            print(index_line, f"(ready after {time.perf_counter() - started:.1f} s)")
            rates: dict[int, float] = {}
            for clients in (int(c) for c in args.clients.split(",")):
                before = health(url)
                elapsed = asyncio.run(hammer(url, queries, clients))
                after = health(url)
                rates[clients] = len(queries) / elapsed
                batches = int(after["batches"]) - int(before["batches"])  # type: ignore[call-overload]
                print(
                    f"{args.retriever}, {args.docs} docs, {clients:>3} clients: "
                    f"{rates[clients]:7.1f} queries/s ({batches} batches, "
                    f"{len(queries) / max(batches, 1):.1f} queries per batch; "
                    f"largest batch so far {after['largest_batch']})"
                )
            base = next(iter(rates.values()))
            print("ratio to the first:", {c: round(r / base, 2) for c, r in rates.items()})


if __name__ == "__main__":
    main()
