"""Episodes/s of LLM-module episodes, 1 / 8 / 64 / 256 at once, and the client's CPU profile.

A scripted OpenAI-compatible server (``tests/fake_openai_server.py``) answers every request
after ``delay`` seconds in its own process; all four frozen modules are LLM-backed and share one
client; the expert plan drives episodes through the async session API (the loop of
``bench_llm_concurrency.py``). The baseline is one episode at a time in the same run. Each level
runs ``repeats`` times on fresh tasks and reports the median run (one run of 64 episodes varies
by about 15 % on a shared machine). Client CPU per episode is this process's CPU time over a
concurrent run; its breakdown comes from a cProfile of one concurrent run, each function's own
time put in a category (a C function's in its caller's category), scaled to the unprofiled CPU
time.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import pstats
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from bench_llm_concurrency import play
from fake_server import llm_module_env, sample_tasks

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.llm import close_clients
from agentflow_env.tasks.base import Task

from .report import Record, not_available, ratio

TARGETS = {64: 60.0, 256: 180.0}
"""Episodes/s at N concurrent over one at a time, on a quiet machine."""
LOADED_TARGETS = {64: 50.0, 256: 100.0}
"""The same under the suite's background load (``background_load``: one busy core)."""
REFERENCE_CPU_MS = 5.3
"""Client CPU ms per episode (64 concurrent) at the second performance pass's starting commit,
measured with this suite on the 2-core development machine the day the pass was measured (an
earlier, quieter day gave 3.4 ms for the same code); the target is half of it."""
# (category, substrings of a profiled function's file or name); the first match wins.
CATEGORIES = (
    ("tokenization", ("tokenizers", "base/tokens.py", "base/hf_tokens.py")),
    (
        "prompt rendering",
        (
            "prompts.py",
            "observations.py",
            "untrusted.py",
            "workflow/memory.py",
            "jinja2",
            "agentflow_format.py",
        ),
    ),
    (
        "parsing",
        (
            "actions.py",
            "action_input.py",
            "json/",
            "modules/llm.py",
            "agentflow_llm.py",
            "re/",
            "sre_",
        ),
    ),
    (
        "HTTP",
        (
            "aiohttp",
            "yarl",
            "multidict",
            "llm/client.py",
            "socket",
            "selector_events.py",
            "streams.py",
        ),
    ),
    ("event loop", ("asyncio", "loop_runner.py")),
    ("other env", ("agentflow_env",)),
)


def _category(filename: str, name: str) -> str | None:
    where = f"{filename}:{name}"
    for category, marks in CATEGORIES:
        if any(mark in where for mark in marks):
            return category
    return None


def _resolve(stats: dict[Any, Any], key: tuple[str, int, str]) -> str | None:
    """``key``'s category, or (library and C functions) that of its heaviest callers, up the
    stack a few levels."""
    for _ in range(6):
        category = _category(key[0], key[2])
        callers = stats.get(key, (0, 0, 0, 0, {}))[4]
        if category is not None or not callers:
            return category
        key = max(callers, key=lambda c: callers[c][3])
    return None


def breakdown(profile: cProfile.Profile) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Share of own time per category, and the top functions by own time."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    own: dict[str, float] = defaultdict(float)
    for key, (_, _, tottime, _, _) in stats.items():
        own[_resolve(stats, key) or "other"] += tottime
    total = sum(own.values()) or 1.0
    top = sorted(stats.items(), key=lambda item: -item[1][2])[:25]
    functions = [
        {"function": f"{f}:{line}({name})", "own_s": tt, "cumulative_s": ct, "calls": nc}
        for (f, line, name), (_, nc, tt, ct, _) in top
    ]
    return {k: v / total for k, v in sorted(own.items(), key=lambda kv: -kv[1])}, functions


BUSY_LOOP = "import os, sys; os.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


@contextmanager
def background_load(core: int = 0) -> Iterator[None]:
    """One process spinning on ``core`` for the duration: a fixed, repeatable competitor for the
    CPU (a trainer's other work on the same machine), so loaded figures compare across runs."""
    process = subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(core)])
    try:
        time.sleep(0.2)  # let it start spinning
        yield
    finally:
        process.kill()
        process.wait(timeout=10)


async def _concurrent(base: AgentFlowEnv, tasks: list[Task]) -> tuple[float, float]:
    """Wall and CPU seconds of running every task's episode at once."""
    gc.collect()
    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(play(base.new_session(task)) for task in tasks))
    return time.perf_counter() - started, time.process_time() - cpu


async def _measure(
    base: AgentFlowEnv, tasks: list[Task], levels: list[int], sequential: int, repeats: int
) -> dict[str, Any]:
    # Every run gets tasks of its own: a repeat of the same tasks soon after would find the
    # tokenizer's memory of recent prompt pieces warm and understate the cost.
    fresh = iter(tasks)
    await play(base.new_session(next(fresh)))  # warm up: connections, index
    gc.freeze()  # keep collector passes over the long-lived world out of the timing
    started = time.perf_counter()
    for _ in range(sequential):
        await play(base.new_session(next(fresh)))
    one_at_a_time = sequential / (time.perf_counter() - started)
    rates, cpu_ms = {}, {}
    for n in levels:
        runs = [await _concurrent(base, [next(fresh) for _ in range(n)]) for _ in range(repeats)]
        rates[n] = statistics.median(n / wall for wall, _ in runs)
        cpu_ms[n] = statistics.median(1000 * cpu / n for _, cpu in runs)
    profiled = max(n for n in levels if n <= 64)
    profile = cProfile.Profile(time.process_time)  # CPU, not waiting
    profile.enable()
    await _concurrent(base, [next(fresh) for _ in range(profiled)])
    profile.disable()
    await close_clients()
    return {
        "one_at_a_time": one_at_a_time,
        "rates": rates,
        "cpu_ms": cpu_ms,
        "profiled": profiled,
        "profile": profile,
    }


def concurrency_figures(
    levels: list[int],
    sequential: int,
    delay: float,
    hops: int = 2,
    *,
    repeats: int = 3,
    loaded: bool = False,
    loop: str = "asyncio",
) -> dict[str, Record]:
    """Episodes/s at each of ``levels`` against one at a time, the curve over the levels, and
    the client CPU per episode with its profile, each level the median of ``repeats`` runs;
    ``loop="uvloop"``: on uvloop's event loop instead (names start ``concurrency_uvloop.``, no
    targets: those are for asyncio's loop); ``loaded``: all of it under
    ``background_load`` (figure names end in ``_loaded``, and the fake server shares the other
    core with this process)."""
    if loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            return {
                "concurrency_uvloop.client_cpu_per_episode": not_available(
                    "uvloop is not installed (pip install uvloop)"
                )
            }
        figures = _figures(levels, sequential, delay, hops, repeats, {}, uvloop.new_event_loop)
        return {key.replace("concurrency.", "concurrency_uvloop."): v for key, v in figures.items()}
    if loaded:
        with background_load():
            figures = _figures(levels, sequential, delay, hops, repeats, LOADED_TARGETS)
        return {f"{key}_loaded": value for key, value in figures.items()}
    return _figures(levels, sequential, delay, hops, repeats, TARGETS)


def _figures(
    levels: list[int],
    sequential: int,
    delay: float,
    hops: int,
    repeats: int,
    targets: dict[int, float],
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> dict[str, Record]:
    with llm_module_env(delay, hops, max(levels), timeout_s=30.0) as base:
        needed = 1 + sequential + repeats * sum(levels) + max(n for n in levels if n <= 64)
        tasks = sample_tasks(base, needed)
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            result = runner.run(_measure(base, tasks, levels, sequential, repeats))
    shares, functions = breakdown(result["profile"])
    profiled = result["profiled"]
    cpu_ms = result["cpu_ms"][profiled]
    figures: dict[str, Record] = {}
    named = [n for n in levels if n in (1, 8, 64, 256)]
    for n in named:
        figures[f"concurrency.episodes_per_s_{n}_vs_1"] = ratio(
            result["rates"][n],
            result["one_at_a_time"],
            what=f"episodes/s with {n} concurrent",
            against="one at a time",
            target=targets.get(n),
            higher_is_better=True,
            ideal=float(n),
            client_cpu_ms_per_episode=result["cpu_ms"][n],
            runs=repeats,
            server_delay_s=delay,
            llm_calls_per_episode=2 + 2 * hops,
        )
    top = max(levels)
    figures["concurrency.curve"] = ratio(
        result["rates"][top],
        result["one_at_a_time"],
        what=f"episodes/s with {top} concurrent (the curve: every level)",
        against="one at a time",
        curve_concurrency=levels,
        curve_episodes_per_s=[result["rates"][n] for n in levels],
        curve_ratio=[result["rates"][n] / result["one_at_a_time"] for n in levels],
        curve_client_cpu_ms_per_episode=[result["cpu_ms"][n] for n in levels],
    )
    figures["concurrency.client_cpu_per_episode"] = ratio(
        cpu_ms,
        REFERENCE_CPU_MS,
        what=f"client CPU ms per episode ({profiled} concurrent, median of {repeats} runs)",
        against="the same before the second performance pass (ms, quiet)",
        target=0.5 if targets else None,
        one_llm_call_ms=1000 * delay,
        breakdown_ms={k: share * cpu_ms for k, share in shares.items()},
        breakdown_share=shares,
        top_functions=functions,
    )
    return figures
