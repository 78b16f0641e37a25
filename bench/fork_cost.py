"""What forking an episode costs as its history grows, against starting a fresh session.

For each observation mode an episode of the embedded default (``AgentFlow-Search-v0``) is
stepped with searches that never answer, up to ``turns`` turns; after each turn
``Session.fork()`` is timed (median of ``repeats`` forks) and the bytes a fork allocates and
keeps are measured with ``tracemalloc`` (least of three). The baseline is a fresh session's
``start()`` for a task of the same env (initializer and first prompt), measured the same way.
A fork shares its history, so its time and bytes should stay about flat in the history length
(one pointer per turn record, memory entry and event is all that grows).

Run alone: ``python -m bench.fork_cost [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import gymnasium as gym

import agentflow_env  # noqa: F401 - registers the environments
from agentflow_env.envs.env import AgentFlowEnv, unwrap_agentflow
from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.session import Session

from .report import Record, ratio

ENV_ID = "AgentFlow-Search-v0"
MODES = ("structured", "flat")


def median_ms(call: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def kept_bytes(call: Callable[[], Any]) -> int:
    """Bytes ``call()`` allocates and its result keeps (least of three tries, after a warm-up)."""
    call()
    sizes = []
    for _ in range(3):
        tracemalloc.start()
        try:
            result = call()
            sizes.append(tracemalloc.get_traced_memory()[0])
        finally:
            tracemalloc.stop()
        del result
    return min(sizes)


def fork_curve(mode: str, turns: int, repeats: int) -> dict[str, list[float]]:
    """Fork ms and bytes after each of ``turns`` turns of one episode."""
    env = gym.make(ENV_ID, observation_mode=mode, max_turns=turns + 1, hops=3)
    env.reset(seed=0)
    base = unwrap_agentflow(env)
    curve: dict[str, list[float]] = {"fork_ms": [], "fork_bytes": [], "prompt_tokens": []}
    for turn in range(turns):
        action = format_planner_action(
            "Look for more evidence.", f"unrelated words {turn}", "Gather evidence.", "Search"
        )
        env.step(action)
        session = base.session
        assert session is not None and not session.done
        curve["fork_ms"].append(median_ms(session.fork, repeats))
        curve["fork_bytes"].append(kept_bytes(session.fork))
        curve["prompt_tokens"].append(len(session.observation.token_ids))  # type: ignore[union-attr]
    env.close()
    return curve


def fresh_start(repeats: int) -> tuple[float, int]:
    """Median ms and bytes of a fresh session's ``start()`` (tasks of seeds 0..repeats-1)."""
    env = gym.make(ENV_ID, hops=3)
    base: AgentFlowEnv = unwrap_agentflow(env)
    tasks = [base.task_source.sample(base.np_random) for _ in range(repeats)]

    def start(index: int) -> Session:
        session = base.new_session(tasks[index % repeats], seed=index)
        base.run_async(session.start())
        return session

    start(0)  # warm up (index, prompt-prefix cache)
    counter = iter(range(10**9))
    started_ms = median_ms(lambda: start(next(counter)), repeats)
    started_bytes = kept_bytes(lambda: start(next(counter)))
    env.close()
    return started_ms, started_bytes


def fork_cost_figures(turns: int, repeats: int) -> dict[str, Record]:
    """Fork time and bytes at history length ``turns`` (vs a fresh start, vs 1 turn)."""
    curves = {mode: fork_curve(mode, turns, repeats) for mode in MODES}
    start_ms, start_bytes = fresh_start(repeats)
    worst_ms = max(curves[mode]["fork_ms"][-1] for mode in MODES)
    growth = {
        mode: curves[mode]["fork_bytes"][-1] / curves[mode]["fork_bytes"][0] for mode in MODES
    }
    worst_growth = max(MODES, key=growth.__getitem__)
    shared = {
        "history_turns": list(range(1, turns + 1)),
        "fresh_start_ms": start_ms,
        "fresh_start_bytes": start_bytes,
        **{f"curve_fork_ms_{mode}": curves[mode]["fork_ms"] for mode in MODES},
        **{f"curve_fork_bytes_{mode}": curves[mode]["fork_bytes"] for mode in MODES},
        **{f"curve_prompt_tokens_{mode}": curves[mode]["prompt_tokens"] for mode in MODES},
    }
    return {
        "fork_cost.vs_history_length": ratio(
            worst_ms,
            start_ms,
            what=f"Session.fork() ms after {turns} turns (slower mode)",
            against="a fresh session's start() (ms)",
            **shared,
        ),
        "fork_cost.bytes_vs_history_length": ratio(
            curves[worst_growth]["fork_bytes"][-1],
            curves[worst_growth]["fork_bytes"][0],
            what=f"bytes a fork keeps after {turns} turns ({worst_growth})",
            against="after 1 turn",
            fork_bytes_vs_fresh_start=curves[worst_growth]["fork_bytes"][-1] / start_bytes,
            growth_bytes_per_turn=(
                curves[worst_growth]["fork_bytes"][-1] - curves[worst_growth]["fork_bytes"][0]
            )
            / max(turns - 1, 1),
        ),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fork_cost", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args(argv)
    figures = fork_cost_figures(30, 10 if args.quick else 100)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
