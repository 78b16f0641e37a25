"""How long the env holds a trainer's event loop per turn, with many trajectories on one loop.

OpenRLHF runs every trajectory's ``step`` on the vLLM actor's own loop, so env CPU work there
stalls generation for all trajectories. Here N sessions of the embedded default share one loop;
each turn a trajectory "generates" (``asyncio.sleep(latency)``, as the engine would await) and
then awaits ``session.step``. Every callback the loop runs is timed (``Handle._run``, the hook
asyncio's debug mode uses for slow-callback logging); the generation sleeps cost next to
nothing, so the time is the env's. A probe task that sleeps 1 ms reports the lag a generation
coroutine would see (its p99 at 256 trajectories has a target: under 20 ms; sessions take turns
at the loop between their CPU phases, ``agentflow_env.base.loop_runner.yield_to_loop``). The
baseline is tokenizing one observation, measured in the same run. The longest hold can be a
collection of the garbage collector's oldest generation (its longest pause rides along).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gymnasium as gym
import numpy as np

from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.session import Session

from .report import Record, ratio

PROBE_S = 0.001
TARGET_P99_LAG_MS = 20.0


@contextmanager
def gc_timer(pauses: list[float]) -> Iterator[None]:
    """Record the duration of every garbage collection inside the block."""
    started = [0.0]

    def timed(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - started[0])

    gc.callbacks.append(timed)
    try:
        yield
    finally:
        gc.callbacks.remove(timed)


@contextmanager
def callback_timer(durations: list[float]) -> Iterator[None]:
    """Record the duration of every event-loop callback run inside the block."""
    handle = asyncio.events.Handle
    original = handle._run

    def timed(self: Any) -> None:
        started = time.perf_counter()
        try:
            original(self)
        finally:
            durations.append(time.perf_counter() - started)

    handle._run = timed  # type: ignore[method-assign]
    try:
        yield
    finally:
        handle._run = original  # type: ignore[method-assign]


async def _trajectory(session: Session, latency_s: float) -> int:
    await session.start()
    turns = 0
    while True:
        plan = session.task.gold_plan
        step = plan[min(session.turn, len(plan) - 1)]
        await asyncio.sleep(latency_s)  # the engine generating the action
        action = format_planner_action("Follow the plan.", step.context, step.sub_goal, step.tool)
        outcome = await session.step(action)
        turns += 1
        if outcome.terminated or outcome.truncated:
            return turns


async def _probe(stop: asyncio.Event, lags: list[float]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(PROBE_S)
        lags.append(time.perf_counter() - started - PROBE_S)


async def _run(
    base: Any, tasks: list[Any], latency_s: float, gc_pauses: list[float] | None = None
) -> tuple[list[float], list[float], int]:
    await _trajectory(base.new_session(tasks[0]), 0.0)  # warm up
    durations: list[float] = []
    lags: list[float] = []
    stop = asyncio.Event()
    probe = asyncio.create_task(_probe(stop, lags))
    with callback_timer(durations), gc_timer([] if gc_pauses is None else gc_pauses):
        turns = await asyncio.gather(*(_trajectory(base.new_session(t), latency_s) for t in tasks))
    stop.set()
    await probe
    return durations, lags, sum(turns)


def loop_blocking_figures(levels: list[int], latency_s: float = 0.05) -> dict[str, Record]:
    env = gym.make("AgentFlow-Search-v0")
    base = env.unwrapped
    rng = np.random.default_rng(0)
    tasks = [base.task_source.sample(rng) for _ in range(max(levels))]
    observation, _ = env.reset(seed=0)
    encode = base.tokenizer.encode
    started = time.perf_counter()
    for _ in range(20):
        encode(observation["text"])
    floor_ms = 1000 * (time.perf_counter() - started) / 20
    figures: dict[str, Record] = {}
    for n in levels:
        gc_pauses: list[float] = []
        durations, lags, turns = asyncio.run(_run(base, tasks[:n], latency_s, gc_pauses))
        longest_ms, total_ms = 1000 * max(durations), 1000 * sum(durations)
        p99_lag_ms = 1000 * float(np.percentile(lags, 99)) if lags else 0.0
        common = {
            "concurrent_trajectories": n,
            "turns": turns,
            "generation_latency_ms": 1000 * latency_s,
            "tokenize_observation_ms": floor_ms,
            "observation_tokens": len(observation["token_ids"]),
            "probe_lag_max_ms": 1000 * max(lags, default=0.0),
            "probe_lag_p99_ms": p99_lag_ms,
            "probe_samples": len(lags),
            "gc_pause_max_ms": 1000 * max(gc_pauses, default=0.0),
        }
        figures[f"loop_blocking.longest_hold_{n}"] = ratio(
            longest_ms,
            floor_ms,
            what=f"longest loop hold ms ({n} trajectories)",
            against="tokenizing one observation (ms)",
            **common,
        )
        figures[f"loop_blocking.hold_per_turn_{n}"] = ratio(
            total_ms / turns,
            floor_ms,
            what=f"loop held per turn ms ({n} trajectories)",
            against="tokenizing one observation (ms)",
            total_hold_ms=total_ms,
            **common,
        )
        if n == 256:
            figures["loop_blocking.p99_lag_ms_256"] = ratio(
                p99_lag_ms,
                floor_ms,
                what="p99 lag ms of a 1 ms probe (256 trajectories)",
                against="tokenizing one observation (ms)",
                p99_lag_ms=p99_lag_ms,
                target_ms=TARGET_P99_LAG_MS,
                met=p99_lag_ms < TARGET_P99_LAG_MS,
                **common,
            )
    env.close()
    return figures
