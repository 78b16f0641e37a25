"""Recall@1 and @5 of BM25, dense and hybrid retrieval, where the gold documents are known.

    python bench/bench_recall.py --dense-model PATH [--questions 300] [--worlds 0,1]
    python bench/bench_recall.py --dense-model PATH --qa QA.jsonl --corpus CORPUS.jsonl

Synthetic world (default): a world's documents are its entities' (document id = entity key),
so each question's evidence is known. Three query sets:

- ``question -> first hop``: the question text as the query; gold: the documents of the
  entities the question names (one for a bridge question, two for a comparison).
- ``question -> all hops``: the same query; gold: every document the answer needs (later hops
  are named only in earlier documents, so no single query should reach them).
- ``sub-query -> its doc``: the gold plan's Search queries (what an expert asks, an entity name),
  each with its entity's document as gold.

Recall@k is the fraction of gold documents in the top k, averaged over queries.

Real QA (``--qa`` and ``--corpus``): gold documents are unknown, so recall@k is DPR's answer
recall, the fraction of questions with a gold answer (normalised as the EM score does) inside
one of the top k documents.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence

from agentflow_env.retrieval.bm25 import BM25Index, Searchable
from agentflow_env.retrieval.corpus import Corpus, Document, load_corpus_file
from agentflow_env.retrieval.dense import default_prefixes, get_encoder, load_or_build_dense_index
from agentflow_env.retrieval.hybrid import HybridIndex
from agentflow_env.tasks.base import Task
from agentflow_env.tasks.datasets import load_tasks
from agentflow_env.tasks.scoring import normalize_answer
from agentflow_env.tasks.synthetic import generate_tasks, generate_world
from agentflow_env.tasks.synthetic.sampling import walk
from agentflow_env.tasks.synthetic.solver import SEARCH_TOOL
from agentflow_env.tasks.synthetic.world import World

KS = (1, 5)
Query = tuple[str, frozenset[str]]  # the query and its gold document ids


def searchers(corpus: Corpus, model: str) -> dict[str, Searchable]:
    started = time.perf_counter()
    sparse = BM25Index(corpus)
    dense = load_or_build_dense_index(corpus, model, use_cache=False)
    print(f"  {len(corpus)} documents indexed in {time.perf_counter() - started:.1f} s")
    return {"bm25": sparse, "dense": dense, "hybrid": HybridIndex(sparse, dense)}


def world_queries(world: World, tasks: Sequence[Task]) -> dict[str, list[Query]]:
    sets: dict[str, list[Query]] = {"question -> first hop": [], "question -> all hops": []}
    sub_queries: list[Query] = []
    for task in tasks:
        chains = task.metadata["program"]["chains"]
        starts = [world.find(c["start"]["name"], c["start"]["type"]) for c in chains]
        holders: dict[str, None] = {}  # the documents the answer needs, in gold-plan order
        for start, chain in zip(starts, chains, strict=True):
            for entity in walk(world, start, tuple(chain["relations"])):
                holders.setdefault(entity.key)
        searches = [step.context for step in task.gold_plan if step.tool == SEARCH_TOOL]
        assert len(searches) == len(holders), task.task_id
        sets["question -> first hop"].append((task.question, frozenset(s.key for s in starts)))
        sets["question -> all hops"].append((task.question, frozenset(holders)))
        sub_queries += [
            (query, frozenset([key])) for key, query in zip(holders, searches, strict=True)
        ]
    sets["sub-query -> its doc"] = sub_queries
    return sets


def recall(searcher: Searchable, queries: Sequence[Query]) -> dict[int, float]:
    ranked = searcher.search_batch([q for q, _ in queries], max(KS))
    out = {}
    for k in KS:
        shares = [
            len(gold & {doc.doc_id for doc, _ in hits[:k]}) / len(gold)
            for (_, gold), hits in zip(queries, ranked, strict=True)
        ]
        out[k] = sum(shares) / len(shares)
    return out


def answer_recall(searcher: Searchable, tasks: Sequence[Task]) -> dict[int, float]:
    ranked = searcher.search_batch([t.question for t in tasks], max(KS))
    out = {}
    for k in KS:
        found = [
            any(_contains_answer(doc, task) for doc, _ in hits[:k])
            for task, hits in zip(tasks, ranked, strict=True)
        ]
        out[k] = sum(found) / len(found)
    return out


def _contains_answer(doc: Document, task: Task) -> bool:
    text = normalize_answer(doc.contents)
    return any(normalize_answer(a) and normalize_answer(a) in text for a in task.gold_answers)


def report(name: str, results: dict[str, dict[int, float]], count: int) -> None:
    cells = "  ".join(f"{kind} R@1 {r[1]:.3f} R@5 {r[5]:.3f}" for kind, r in results.items())
    print(f"  {name:<24} ({count:>4} queries)  {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dense-model", required=True, help="sentence-transformers model path")
    parser.add_argument("--questions", type=int, default=300, help="per world")
    parser.add_argument("--worlds", default="0", help="comma-separated world seeds")
    parser.add_argument("--qa", default=None, help="a QA file (FlashRAG JSONL, Search-R1 parquet)")
    parser.add_argument("--corpus", default=None, help="the QA file's corpus")
    args = parser.parse_args()
    model = get_encoder(args.dense_model).model_id
    print(f"dense model {model}, prefixes {default_prefixes(model)}")
    if args.qa:
        if not args.corpus:
            raise SystemExit("--qa needs --corpus")
        corpus = load_corpus_file(args.corpus)
        tasks = load_tasks(args.qa, corpus=corpus)
        print(f"{args.qa}: {len(tasks)} questions")
        indexes = searchers(corpus, args.dense_model)
        results = {kind: answer_recall(index, tasks) for kind, index in indexes.items()}
        report("answer in top k", results, len(tasks))
        return
    for seed in (int(s) for s in args.worlds.split(",")):
        world = generate_world(seed)
        tasks = generate_tasks(world)
        sample = random.Random(seed).sample(tasks, min(args.questions, len(tasks)))
        kinds = sorted({t.kind for t in sample})
        print(f"world {seed}: {len(sample)} of {len(tasks)} questions ({', '.join(kinds)})")
        indexes = searchers(world.corpus, args.dense_model)
        for name, queries in world_queries(world, sample).items():
            results = {kind: recall(index, queries) for kind, index in indexes.items()}
            report(name, results, len(queries))


if __name__ == "__main__":
    main()
