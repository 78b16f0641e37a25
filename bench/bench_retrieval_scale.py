"""BM25 at Wikipedia scale: streaming build and memory-mapped serving vs. bare bm25s.

    python bench/bench_retrieval_scale.py                   # 1,000,000 passages (minutes)
    python bench/bench_retrieval_scale.py --quick           # 20,000 passages, a smoke run
    python bench/bench_retrieval_scale.py --passages 300000 --out runs/retrieval_scale

A generated DPR-style TSV corpus (``id<TAB>text<TAB>title``, header row) of ~100-word passages
whose words are a Zipf draw (s = 1) over a generated list of a million word-like strings, with
capitalised titles and numbers, is kept under ``--out`` and reused by later runs. Each stage
runs in a fresh child process, so peak memory (``VmHWM``) is that stage's own:

- ours: ``build_corpus_index`` (read, tokenize, write bm25s's files and the document store)
  then, in a new process, ``open_corpus_index`` from the cache (mmap) and queries;
- bare bm25s on the same tokens (``tokenize_for_search``, interned): ``bm25s.BM25().index``
  (the time excludes reading and tokenizing, reported apart) and ``save``; then, in a new
  process, ``bm25s.BM25.load(mmap=True)`` and ``retrieve``. Bare bm25s returns row numbers,
  ours documents read from the store.

Start time is from spawning the serving process to its first answered query (interpreter and
imports included; the page cache is warm, as on a server restarted after a build). Queries are
2-5 words of a random passage; single-query latency is the median over ``--single`` queries,
batched throughput one ``search_batch`` / ``retrieve`` call over ``--queries`` queries.
Targets: build within 1.5x of bare bm25s, serving RSS under 1.5 GB, start under 10 s.
The result is printed as a table and written to ``<out>/result_<passages>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import bm25s
import numpy as np

from agentflow_env.retrieval.bm25 import tokenize_for_search
from agentflow_env.retrieval.corpus_reader import iter_corpus_records
from agentflow_env.retrieval.doc_store import DATA_FILE, OFFSETS_FILE
from agentflow_env.retrieval.file_index import (
    build_corpus_index,
    load_corpus_index,
    open_corpus_index,
)

VOCABULARY = 1_000_000
MEAN_WORDS = 100
TARGETS = {"build_ratio": 1.5, "serve_rss_mb": 1536.0, "start_s": 10.0}
_LETTERS = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
_LETTER_WEIGHTS = "127 91 82 75 70 67 63 61 60 43 40 28 28 24 24 22 20 20 19 15 10 8 2 2 1 1"


# -- the corpus --------------------------------------------------------------------------------
def word_list(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` distinct word-like strings, shortest (most frequent) first."""
    words: dict[str, None] = {}
    weights = np.array(_LETTER_WEIGHTS.split(), dtype=float)
    p = weights / weights.sum()
    while len(words) < n:
        lengths = rng.integers(2, 12, size=n)
        letters = rng.choice(_LETTERS, size=int(lengths.sum()), p=p)
        ends = np.cumsum(lengths)
        flat = "".join(letters.tolist())
        for start, end in zip((ends - lengths).tolist(), ends.tolist(), strict=True):
            words[flat[start:end]] = None
    return sorted(list(words)[:n], key=len)


def write_corpus(path: Path, passages: int, seed: int) -> list[str]:
    """Write the TSV corpus; returns queries drawn from its passages."""
    rng = np.random.default_rng(seed)
    words = np.array(word_list(VOCABULARY, rng), dtype=object)
    cdf = np.cumsum(1.0 / np.arange(1, len(words) + 1))
    cdf /= cdf[-1]
    picker = random.Random(seed)
    queries: list[str] = []
    query_every = max(1, passages // 4000)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        out.write("id\ttext\ttitle\n")
        for first in range(0, passages, 10_000):
            count = min(10_000, passages - first)
            lengths = np.clip(rng.normal(MEAN_WORDS, 12, size=count).astype(int), 40, 160)
            drawn = words[np.searchsorted(cdf, rng.random(int(lengths.sum())))]
            ends = np.cumsum(lengths)
            lines = []
            for row, (start, end) in enumerate(
                zip((ends - lengths).tolist(), ends.tolist(), strict=True)
            ):
                tokens = drawn[start:end].tolist()
                tokens[0] = tokens[0].capitalize()
                for position in range(9, len(tokens), 17):
                    tokens[position] += picker.choice(
                        (",", ".", " in", " (" + str(1800 + position * 7) + ")")
                    )
                title = " ".join(
                    w.capitalize() for w in drawn[start : start + 1 + row % 3].tolist()
                )
                text = " ".join(tokens)
                lines.append(f"{first + row + 1}\t{text}\t{title}\n")
                if (first + row) % query_every == 0:
                    picked = picker.sample(tokens, picker.randint(2, 5))
                    queries.append(" ".join(picked))
            out.writelines(lines)
    tmp.rename(path)
    return queries


# -- children: each prints one JSON object --------------------------------------------------------
def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    """This process's peak resident memory (``VmHWM``: unlike ``ru_maxrss``, not inherited
    across ``exec`` from the parent that generated the corpus)."""
    return _status_mb("VmHWM")


def current_rss_mb() -> float:
    return _status_mb("VmRSS")


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def child_ours_build(corpus: Path, work: Path) -> dict[str, Any]:
    started = time.perf_counter()
    directory, _ = build_corpus_index(corpus, work / "cache", force=True)
    build_s = time.perf_counter() - started
    meta = load_corpus_index(directory).meta
    return {
        "build_s": build_s,
        "peak_rss_mb": peak_rss_mb(),
        "disk_bytes": dir_bytes(directory),
        "docstore_bytes": sum((directory / n).stat().st_size for n in (DATA_FILE, OFFSETS_FILE)),
        "index_dir": str(directory),
        "documents": meta["documents"],
        "vocab_size": meta["vocab_size"],
        "tokens": meta["tokens"],
        "postings": meta["postings"],
    }


def child_bare_build(corpus: Path, work: Path) -> dict[str, Any]:
    started = time.perf_counter()
    canonical: dict[str, str] = {}
    tokens = [
        [canonical.setdefault(t, t) for t in tokenize_for_search(f"{title}\n{text}")]
        for _, title, text in iter_corpus_records(corpus)
    ]
    tokenize_s = time.perf_counter() - started
    rss_tokens_mb = current_rss_mb()
    started = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    index_s = time.perf_counter() - started
    target = work / "bare"
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    retriever.save(target, show_progress=False)
    save_s = time.perf_counter() - started
    return {
        "build_s": index_s,
        "read_tokenize_s": tokenize_s,
        "save_s": save_s,
        "rss_with_tokens_mb": rss_tokens_mb,
        "peak_rss_mb": peak_rss_mb(),
        "disk_bytes": dir_bytes(target),
    }


def child_serve(
    kind: str, corpus: Path, work: Path, queries_path: Path, single: int
) -> dict[str, Any]:
    """Open the index from the cache, answer one query (then the parent's clock stops), measure."""
    queries: list[str] = json.loads(queries_path.read_text(encoding="utf-8"))
    started = time.perf_counter()
    if kind == "ours":
        index = open_corpus_index(corpus, work / "cache", build=False)

        def one(query: str) -> list[tuple[str, float]]:
            return [(doc.doc_id, score) for doc, score in index.search(query, 10)]

        def batch(qs: list[str]) -> int:
            return len(index.search_batch(qs, 10))
    else:
        retriever = bm25s.BM25.load(work / "bare", mmap=True, show_progress=False)

        def one(query: str) -> list[tuple[str, float]]:
            rows, scores = retriever.retrieve(
                [tokenize_for_search(query)], k=10, show_progress=False
            )
            return [
                (str(r + 1), float(s))
                for r, s in zip(rows[0].tolist(), scores[0].tolist(), strict=True)
                if s > 0
            ]

        def batch(qs: list[str]) -> int:
            tokens = [tokenize_for_search(q) for q in qs]
            return len(retriever.retrieve(tokens, k=10, show_progress=False)[0])

    open_s = time.perf_counter() - started
    first = one(queries[0])
    print(json.dumps({"ready": True}), flush=True)
    rss_open_mb = current_rss_mb()
    latencies, answers = [], []
    for query in queries[:single]:
        tick = time.perf_counter()
        answers.append(one(query))
        latencies.append(time.perf_counter() - tick)
    tick = time.perf_counter()
    assert batch(queries) == len(queries)
    batch_s = time.perf_counter() - tick
    return {
        "open_s": open_s,
        "rss_after_open_mb": rss_open_mb,
        "rss_mb": current_rss_mb(),
        "rss_anon_mb": _status_mb("RssAnon"),
        "rss_file_mb": _status_mb("RssFile"),
        "peak_rss_mb": peak_rss_mb(),
        "latency_ms_median": 1000 * float(np.median(latencies)),
        "latency_ms_p90": 1000 * float(np.percentile(latencies, 90)),
        "batched_qps": len(queries) / batch_s,
        "first": first,
        "answers": answers,
    }


# -- the parent ----------------------------------------------------------------------------------
def run_child(args: list[str], *, timed_ready: bool = False) -> dict[str, Any]:
    command = [sys.executable, __file__, *args]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    ready_s = None
    lines = []
    for line in process.stdout:
        if timed_ready and ready_s is None and line.startswith('{"ready"'):
            ready_s = time.perf_counter() - started
            continue
        lines.append(line)
    if process.wait() != 0:
        raise SystemExit(f"child {args[:2]} failed with status {process.returncode}")
    result: dict[str, Any] = json.loads(lines[-1])
    if timed_ready:
        result["start_s"] = ready_s
    return result


def agreement(ours: list[list[Any]], bare: list[list[Any]]) -> float:
    """Share of queries with the same top-10 (ids and scores; equal scores in id order)."""

    def canonical(hits: list[Any]) -> list[tuple[float, int]]:
        return sorted((-round(score, 4), int(doc_id)) for doc_id, score in hits)

    same = sum(canonical(a) == canonical(b) for a, b in zip(ours, bare, strict=True))
    return same / max(1, len(ours))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--passages", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="20,000 passages: a smoke run")
    parser.add_argument("--out", type=Path, default=Path("runs/retrieval_scale"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--queries", type=int, default=1000, help="batched queries")
    parser.add_argument("--single", type=int, default=200, help="queries timed one at a time")
    parser.add_argument("--child", choices=["ours-build", "bare-build", "ours-serve", "bare-serve"])
    parser.add_argument("--corpus", type=Path)
    args = parser.parse_args()
    passages = 20_000 if args.quick else args.passages
    work = args.out / f"work_{passages}"
    if args.child:
        corpus, queries_path = args.corpus, work / "queries.json"
        if args.child == "ours-build":
            result = child_ours_build(corpus, work)
        elif args.child == "bare-build":
            result = child_bare_build(corpus, work)
        else:
            result = child_serve(args.child.split("-")[0], corpus, work, queries_path, args.single)
        print(json.dumps(result))
        return

    work.mkdir(parents=True, exist_ok=True)
    corpus = args.out / f"corpus_{passages}.tsv"
    queries_path = work / "queries.json"
    if not corpus.exists() or not queries_path.exists():
        print(f"generating {passages} passages -> {corpus}", flush=True)
        started = time.perf_counter()
        queries = write_corpus(corpus, passages, args.seed)
        random.Random(args.seed).shuffle(queries)
        queries_path.write_text(json.dumps(queries[: args.queries]), encoding="utf-8")
        print(f"  generated in {time.perf_counter() - started:.0f} s", flush=True)
    common = ["--corpus", str(corpus), "--out", str(args.out), "--passages", str(passages)]
    common += ["--single", str(args.single)]
    stages = {}
    for stage in ("ours-build", "bare-build", "ours-serve", "bare-serve"):
        print(f"running {stage} ...", flush=True)
        stages[stage] = run_child(["--child", stage, *common], timed_ready=stage.endswith("serve"))
    ours, bare = stages["ours-serve"], stages["bare-serve"]
    result = {
        "passages": passages,
        "corpus_bytes": corpus.stat().st_size,
        "cpu_count": os.cpu_count(),
        "topk_agreement": agreement(ours.pop("answers"), bare.pop("answers")),
        **{stage: value for stage, value in stages.items()},
    }
    result["rows"] = table_rows(stages)
    result["targets_met"] = {
        "build_within_1.5x": stages["ours-build"]["build_s"]
        <= TARGETS["build_ratio"] * stages["bare-build"]["build_s"],
        "serve_rss_under_1.5GB": ours["rss_mb"] < TARGETS["serve_rss_mb"],
        "start_under_10s": ours["start_s"] < TARGETS["start_s"],
    }
    out = args.out / f"result_{passages}.json"
    out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print_table(result)
    print(f"written to {out}")


def table_rows(stages: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    ob, bb, os_, bs = (stages[s] for s in ("ours-build", "bare-build", "ours-serve", "bare-serve"))
    mb = 1024 * 1024
    rows = [
        ("build time (s)", ob["build_s"], bb["build_s"]),
        ("build peak RSS (MB)", ob["peak_rss_mb"], bb["peak_rss_mb"]),
        ("on-disk size (MB)", ob["disk_bytes"] / mb, bb["disk_bytes"] / mb),
        ("serve start (s)", os_["start_s"], bs["start_s"]),
        ("serve RSS after queries (MB)", os_["rss_mb"], bs["rss_mb"]),
        ("single query, median (ms)", os_["latency_ms_median"], bs["latency_ms_median"]),
        ("single query, p90 (ms)", os_["latency_ms_p90"], bs["latency_ms_p90"]),
        ("batched queries/s", os_["batched_qps"], bs["batched_qps"]),
    ]
    return [
        {"measure": m, "ours": a, "bare_bm25s": b, "ratio": a / b if b else None}
        for m, a, b in rows
    ]


def print_table(result: dict[str, Any]) -> None:
    print(f"\n{result['passages']:,} passages, corpus {result['corpus_bytes'] / 2**20:,.0f} MB")
    print(f"{'measure':<30}{'ours':>12}{'bare bm25s':>12}{'ours/bare':>11}")
    for row in result["rows"]:
        ratio = f"{row['ratio']:.2f}" if row["ratio"] is not None else "-"
        print(f"{row['measure']:<30}{row['ours']:>12.2f}{row['bare_bm25s']:>12.2f}{ratio:>11}")
    bare = result["bare-build"]
    print(
        f"bare bm25s also spent {bare['read_tokenize_s']:.1f} s reading and tokenizing "
        f"(RSS {bare['rss_with_tokens_mb']:.0f} MB holding the tokens) and {bare['save_s']:.1f} s saving"
    )
    ours_build, serve = result["ours-build"], result["ours-serve"]
    print(
        f"ours on disk: {ours_build['docstore_bytes'] / 2**20:.0f} MB of it the document store "
        f"(bare bm25s keeps no documents); serving RSS {serve['rss_anon_mb']:.0f} MB private + "
        f"{serve['rss_file_mb']:.0f} MB mapped file pages (shared, reclaimable)"
    )
    print(
        f"top-10 agreement (ids and scores) on the single queries: {result['topk_agreement']:.1%}"
    )
    print("targets met:", result["targets_met"])


if __name__ == "__main__":
    main()
