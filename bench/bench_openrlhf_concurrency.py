"""Concurrent OpenRLHF trajectories in one event loop, as in a vLLM Ray actor.

OpenRLHF's ``MultiTurnAgentExecutor.execute`` drives our ``AgentExecutor`` against a fake engine
that sleeps ``--latency-ms`` per generate call (standing in for vLLM) and answers with the
task's gold plan. If env work never blocks the loop, N trajectories take about as long as one
plus the env's own CPU time, far less than N times one trajectory.

  python bench/bench_openrlhf_concurrency.py --trajectories 32 --latency-ms 50
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer
from agentflow_env.rollout.labels.spec import TaskSpec, synthetic_specs
from agentflow_env.workflow.actions import format_planner_action

AGENT_FUNC = Path(__file__).resolve().parents[1] / "adapters" / "openrlhf" / "agent_func.py"


@dataclass
class SamplingParams:
    max_tokens: int | None = None
    logprobs: int | None = None


@dataclass
class Completion:
    token_ids: list[int]
    text: str
    finish_reason: str
    logprobs: None = None


@dataclass
class Output:
    outputs: list[Completion]


class SleepyEngine:
    """OpenRLHF's engine interface; plays the task's gold plan after ``latency_s``."""

    def __init__(self, spec: TaskSpec, env: Any, latency_s: float) -> None:
        task = spec.resolve(env.task_source)
        self.plan = [
            format_planner_action(s.justification or "next", s.context, s.sub_goal, s.tool)
            for s in task.gold_plan
        ]
        self.tok = load_default_tokenizer()
        self.latency_s = latency_s
        self.calls = 0

    async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
        await asyncio.sleep(self.latency_s)
        text = self.plan[min(self.calls, len(self.plan) - 1)]
        self.calls += 1
        ids = (self.tok.encode(text) + [self.tok.eos_token_id])[: sampling_params.max_tokens]
        return Output([Completion(ids, text, "stop")])


def load_agent_func() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_module", AGENT_FUNC)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def run_one(executor: Any, spec: TaskSpec, env: Any, latency_s: float, hf: Any) -> dict:
    engine = SleepyEngine(spec, env, latency_s)
    result = await executor.execute(
        prompt="",
        label=spec.to_json(),
        sampling_params=SamplingParams(),
        max_length=16384,
        hf_tokenizer=hf,
        llm_engine=engine,
    )
    result["calls"] = engine.calls
    return result


async def bench(n: int, latency_s: float, hops: int) -> None:
    agent_func = load_agent_func()
    executor = agent_func.AgentExecutor()
    hf = to_hf_tokenizer(load_default_tokenizer())
    specs = [s for s, _ in synthetic_specs(n, split="train", hops=hops, seed=1)]
    env = agent_func.shared_envs().env(specs[0])
    await run_one(executor, specs[0], env, latency_s, hf)  # warm-up: builds the shared env

    singles = []
    for spec in specs[:3]:
        start = time.perf_counter()
        one = await run_one(executor, spec, env, latency_s, hf)
        singles.append(time.perf_counter() - start)
    single = statistics.median(singles)

    start = time.perf_counter()
    results = await asyncio.gather(*(run_one(executor, s, env, latency_s, hf) for s in specs))
    wall = time.perf_counter() - start

    calls = sum(r["calls"] for r in results)
    successes = sum(r["reward"] for r in results)
    print(f"engine latency {latency_s * 1000:.0f} ms per generate call, {hops}-hop tasks")
    print(f"one trajectory: {single * 1000:.0f} ms ({one['calls']} turns; median of 3)")
    print(
        f"{n} concurrent: {wall * 1000:.0f} ms wall, {calls} generate calls, {successes:.0f}/{n} ok"
    )
    print(f"{n} x one trajectory would be {n * single * 1000:.0f} ms")
    print(
        f"speed-up over sequential: {n * single / wall:.1f}x (concurrent / one = {wall / single:.1f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--trajectories", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--hops", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(bench(args.trajectories, args.latency_ms / 1000, args.hops))


if __name__ == "__main__":
    main()
