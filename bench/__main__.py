"""``python -m bench [--quick] [--out runs/bench/results.json]``: every figure of the suite.

Prints one table line per figure and writes them all to JSON (see ``bench.report`` for the
record format). ``--quick`` shrinks every size for a CI smoke run; its ratios are not figures.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .client_instructions import instruction_figures
from .concurrency import concurrency_figures
from .env_figures import episode_memory_figures, growth_figures, memory_figures, step_vs_tokenize
from .fork_cost import fork_cost_figures
from .loop_blocking import loop_blocking_figures
from .report import Record, machine, not_available, print_table, write_json
from .retrieval import corpus_step_figures, library_figures, server_figure
from .service import service_figures

DEFAULT_OUT = Path("runs/bench/results.json")


@dataclass(frozen=True)
class Sizes:
    episodes: int
    turns: int
    envs: tuple[int, ...]
    levels: tuple[int, ...]
    sequential: int
    delay_s: float
    loop_levels: tuple[int, ...]
    corpus_sizes: tuple[int, ...]
    queries: int
    server_docs: int
    server_requests: int


FULL = Sizes(
    30,
    30,
    (1, 64, 256),
    (1, 2, 4, 8, 16, 32, 64, 128, 256),
    8,
    0.1,
    (64, 256),
    (1000, 10_000, 200_000),
    100,
    20_000,
    2000,
)
QUICK = Sizes(
    2, 30, (1, 64, 256), (1, 8, 64, 256), 2, 0.02, (64, 256), (1000, 10_000), 10, 1000, 100
)


def run_suite(
    sizes: Sizes, quick: bool, loaded: bool = True
) -> tuple[dict[str, Record], dict[str, float]]:
    figures: dict[str, Record] = {}
    timings: dict[str, float] = {}
    repeats = 1 if quick else 3  # concurrency runs per level, the median kept

    def stage(name: str, produce: Callable[[], dict[str, Record]]) -> None:
        print(f"[bench] {name} ...", flush=True)
        started = time.perf_counter()
        figures.update(produce())
        timings[name] = time.perf_counter() - started

    stage(
        "step vs tokenization floor",
        lambda: {
            f"step_vs_tokenize.{mode}": step_vs_tokenize(mode, sizes.episodes)
            for mode in ("structured", "flat")
        },
    )
    stage("flat growth and turn curve", lambda: growth_figures(sizes.episodes, sizes.turns))
    stage("memory of many envs", lambda: memory_figures(list(sizes.envs)))
    stage("memory of one episode", lambda: episode_memory_figures([1, 10, sizes.turns]))
    stage(
        "LLM-module concurrency",
        lambda: concurrency_figures(
            list(sizes.levels), sizes.sequential, sizes.delay_s, repeats=repeats
        ),
    )
    stage("client instructions per episode (callgrind)", lambda: instruction_figures())
    stage(
        "LLM-module concurrency on uvloop",
        lambda: concurrency_figures(
            [1, 64, 256], sizes.sequential, sizes.delay_s, repeats=repeats, loop="uvloop"
        ),
    )
    if loaded:
        stage(
            "LLM-module concurrency under one busy core",
            lambda: concurrency_figures(
                list(sizes.levels), sizes.sequential, sizes.delay_s, repeats=repeats, loaded=True
            ),
        )
    else:
        for n in (64, 256):
            figures[f"concurrency.episodes_per_s_{n}_vs_1_loaded"] = not_available(
                "--no-load skips the figures under background load"
            )
    stage("event-loop blocking", lambda: loop_blocking_figures(list(sizes.loop_levels)))
    stage("fork cost", lambda: fork_cost_figures(sizes.turns, 10 if quick else 100))

    def retrieval() -> dict[str, Record]:
        found, _ = library_figures(list(sizes.corpus_sizes), sizes.queries)
        for label in ("10k", "200k"):
            for key in (
                f"retrieval.tool_vs_bm25s_{label}",
                f"retrieval.rank_bm25_vs_bm25s_{label}",
            ):
                found.setdefault(key, not_available("--quick limits the corpus sizes"))
        steps = (1000, 20_000, 200_000) if not quick else (1000, 10_000)
        found.update(corpus_step_figures(list(steps), *((1, 3) if quick else ())))
        found["retriever_server.qps_64_vs_1"] = server_figure(
            sizes.server_docs, sizes.server_requests
        )
        return found

    stage("retrieval", retrieval)
    stage("env as a service", lambda: service_figures(quick))
    return figures, timings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a CI smoke run")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"JSON path (default {DEFAULT_OUT})"
    )
    parser.add_argument(
        "--no-load",
        action="store_true",
        help="skip the concurrency figures under background load (one busy core)",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    sizes = QUICK if args.quick else FULL
    figures, timings = run_suite(sizes, args.quick, loaded=not args.no_load)
    print_table(figures)
    elapsed = time.perf_counter() - started
    write_json(
        args.out,
        {
            "quick": args.quick,
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "elapsed_s": elapsed,
            "stage_s": timings,
            "machine": machine(),
            "sizes": sizes.__dict__,
            "figures": figures,
        },
    )
    print(f"\n{len(figures)} figures in {elapsed:.0f} s, written to {args.out}")


if __name__ == "__main__":
    main()
