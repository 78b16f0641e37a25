"""Episodes per second with LLM modules: one at a time vs. many concurrent sessions on one loop.

A scripted OpenAI-compatible server (``tests/fake_openai_server.py``, its own process so it does
not share our GIL) answers every request after ``--delay`` seconds. All four frozen modules are
LLM-backed and share one client; the expert plan drives synthetic-world episodes through the
async session API (``env.unwrapped.new_session(task)``, ``await session.start()``,
``await session.step(action)``).

    python bench/bench_llm_concurrency.py --episodes 64 --delay 0.1

The target: 64 concurrent episodes reach at least 40x the episodes per second of one at a time.
One at a time, an episode is almost all waiting (6 x 100 ms); concurrently, the client's CPU
work (a few ms per episode: `python -m bench` reports it with its profile) becomes the limit, so the
ratio drops when other processes compete for the cores.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import time

from fake_server import llm_module_env, sample_tasks

import agentflow_env  # noqa: F401 - registers the environments
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.llm import close_clients
from agentflow_env.tasks.base import Task
from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.session import Session


async def play(session: Session) -> float:
    """One expert episode; returns its reward."""
    await session.start()
    while True:
        step = session.task.gold_plan[min(session.turn, len(session.task.gold_plan) - 1)]
        action = format_planner_action("Follow the plan.", step.context, step.sub_goal, step.tool)
        outcome = await session.step(action)
        if outcome.terminated or outcome.truncated:
            return outcome.reward


async def measure(base: AgentFlowEnv, tasks: list[Task], sequential: int) -> tuple[float, float]:
    """Episodes per second one at a time, then all ``tasks`` at once, on the running loop."""
    await play(base.new_session(tasks[0]))  # warm up: connections, search index
    gc.collect()
    gc.freeze()  # like timeit: keep collector pauses over the long-lived world out of the timing
    started = time.perf_counter()
    for task in tasks[:sequential]:
        await play(base.new_session(task))
    one_at_a_time = sequential / (time.perf_counter() - started)
    started, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(play(base.new_session(task)) for task in tasks))
    concurrent = len(tasks) / (time.perf_counter() - started)
    cpu_ms = (time.process_time() - cpu) / len(tasks) * 1000
    print(f"client CPU per concurrent episode: {cpu_ms:.1f} ms (env + HTTP client, one core)")
    await close_clients()
    return one_at_a_time, concurrent


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64, help="concurrent episodes")
    parser.add_argument("--sequential", type=int, default=4, help="episodes run one at a time")
    parser.add_argument("--delay", type=float, default=0.1, help="server latency per request (s)")
    parser.add_argument("--hops", type=int, default=2, help="search steps per episode")
    args = parser.parse_args(argv)

    with llm_module_env(args.delay, args.hops, args.episodes, timeout_s=10.0) as base:
        tasks = sample_tasks(base, args.episodes)
        one, many = asyncio.run(measure(base, tasks, args.sequential))
    server_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    requests = (args.episodes + args.sequential + 1) * (2 + 2 * args.hops)
    server_ms = (server_cpu.ru_utime + server_cpu.ru_stime) / requests * 1000
    ratio = many / one
    calls = 2 + 2 * args.hops
    print(f"server delay {args.delay * 1000:.0f} ms, {calls} LLM calls per episode")
    print(f"one at a time:          {one:7.2f} episodes/s")
    print(f"{args.episodes} concurrent:          {many:7.2f} episodes/s")
    print(f"server CPU per request: {server_ms:.2f} ms (incl. its start-up)")
    print(f"speed-up:               {ratio:7.1f}x (target >= 40x)")
    return ratio


if __name__ == "__main__":
    main()
