"""Sessions on one event loop take turns between their CPU phases (``yield_to_loop``).

No wall-clock assertions: with ``SLICE_S = 0`` every slice is used up at once, so a coroutine
goes on at a ``yield_to_loop`` only when it starts a slice and otherwise waits for a tick, which
admits one waiter per pass of the loop; with ``SLICE_S = inf`` nobody ever waits. A probe
coroutine that sleeps 0 s runs once per pass, so its count is the number of passes the steps
were spread over, whatever the machine's speed. The steps call the Calculator, which runs on
the loop (no thread), so the passes are set by the code alone.
"""

from __future__ import annotations

import asyncio
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentflow_env  # noqa: F401 - registers the environments
from agentflow_env.base import loop_runner
from agentflow_env.base.loop_runner import yield_to_loop
from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.session import Session

# Yield points a step with a tool call passes: its start, after reading the action, before the
# tool, before the verifier, before the next prompt. At SLICE_S = 0 at least three of them wait
# (one of any two with no other await between them), whatever the tool does.
WAITS_PER_TOOL_STEP = 3
CALCULATE = format_planner_action("Compute it.", "2024 - 1969", "the years between", "Calculator")


@pytest.fixture
def no_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loop_runner, "SLICE_S", 0.0)


@pytest.fixture(scope="module")
def env() -> Any:
    made = gym.make("AgentFlow-Search-v0")
    yield made.unwrapped
    made.close()


def _tasks(env: Any, n: int) -> list[Any]:
    rng = np.random.default_rng(7)
    return [env.task_source.sample(rng) for _ in range(n)]


def _expert_action(session: Session) -> str:
    plan = session.task.gold_plan
    step = plan[min(session.turn, len(plan) - 1)]
    return format_planner_action("Follow the plan.", step.context, step.sub_goal, step.tool)


async def _probed(coros: list[Any]) -> tuple[list[Any], int]:
    """Run ``coros`` together with a probe; their results and how often the probe ran."""
    runs = 0
    done = False

    async def probe() -> None:
        nonlocal runs
        while not done:
            runs += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(probe())
    await asyncio.sleep(0)  # the probe is running before the steps start
    runs = 0
    try:
        results = await asyncio.gather(*coros)
    finally:
        done = True
        await task
    return results, runs


async def _started(env: Any, tasks: list[Any]) -> list[Session]:
    sessions = [env.new_session(task) for task in tasks]
    for session in sessions:
        await session.start()
    return sessions


def _passes(env: Any, n: int, slice_s: float, monkeypatch: pytest.MonkeyPatch) -> int:
    """How many passes of the loop ``n`` sessions' first steps (a Calculator call each) took."""
    monkeypatch.setattr(loop_runner, "SLICE_S", slice_s)

    async def run() -> int:
        sessions = await _started(env, _tasks(env, n))
        outcomes, runs = await _probed([s.step(CALCULATE) for s in sessions])
        assert all(o.info["tool"] == "Calculator" and o.info["tool_ok"] for o in outcomes)
        return runs

    return asyncio.run(run())


def test_a_step_yields_between_its_phases(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    own_awaits = _passes(env, 1, float("inf"), monkeypatch)  # the tool runner's, no turns
    assert _passes(env, 1, 0.0, monkeypatch) >= own_awaits + WAITS_PER_TOOL_STEP


def test_concurrent_steps_take_one_turn_per_pass(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pass of the loop admits one waiting phase, so the probe runs between any two: at
    least once per wait of every step, where steps that never wait share their passes."""
    n = 6
    assert _passes(env, n, float("inf"), monkeypatch) < n * WAITS_PER_TOOL_STEP
    assert _passes(env, n, 0.0, monkeypatch) >= n * WAITS_PER_TOOL_STEP


async def _episode(session: Session) -> list[Any]:
    observation, _ = await session.start()
    seen: list[Any] = [observation.token_ids]
    while True:
        outcome = await session.step(_expert_action(session))
        seen.append((outcome.observation.token_ids, outcome.reward, outcome.terminated))
        if outcome.terminated or outcome.truncated:
            return seen


@pytest.mark.parametrize("slice_s", [0.0, loop_runner.SLICE_S])
def test_taking_turns_changes_no_episode(
    env: Any, monkeypatch: pytest.MonkeyPatch, slice_s: float
) -> None:
    tasks = _tasks(env, 8)

    async def one_at_a_time() -> list[list[Any]]:
        return [await _episode(env.new_session(task, seed=i)) for i, task in enumerate(tasks)]

    async def together() -> list[list[Any]]:
        sessions = [env.new_session(task, seed=i) for i, task in enumerate(tasks)]
        return list(await asyncio.gather(*(_episode(s) for s in sessions)))

    alone = asyncio.run(one_at_a_time())
    monkeypatch.setattr(loop_runner, "SLICE_S", slice_s)
    assert asyncio.run(together()) == alone


def test_a_cancelled_waiter_does_not_hold_up_the_others(no_slice: None) -> None:
    finished: list[str] = []

    async def worker(name: str, phases: int) -> None:
        for _ in range(phases):
            await yield_to_loop()
        finished.append(name)

    async def run() -> None:
        first = asyncio.create_task(worker("first", 3))
        doomed = asyncio.create_task(worker("doomed", 1000))
        last = asyncio.create_task(worker("last", 3))
        for _ in range(3):  # all three are queued
            await asyncio.sleep(0)
        doomed.cancel()
        await asyncio.wait_for(asyncio.gather(first, last), 5)
        with pytest.raises(asyncio.CancelledError):
            await doomed

    asyncio.run(run())
    assert sorted(finished) == ["first", "last"]


@pytest.mark.usefixtures("no_slice")
def test_a_second_start_waits_for_the_first_and_gives_its_observation(env: Any) -> None:
    """Two parties starting one session at once (an engine reading the episode it serves while
    the trainer starts it) start it once: the query analysis is written once, both see the
    first prompt, and a later start gives the same again."""
    base = env.unwrapped
    session = base.new_session(base.task_source.sample(np.random.default_rng(3)))

    async def both() -> list[Any]:
        first, second = await asyncio.gather(session.start(), session.start())
        return [first, second, await session.start()]

    results = asyncio.run(both())
    ids = [list(observation.token_ids) for observation, _ in results]
    assert ids[0] == ids[1] == ids[2] and session.turn == 0
    assert len([e for e in session.memory.events if e.kind == "analysis"]) <= 1
    results[0][1]["turn"] = -1  # each caller gets an info of its own
    assert results[1][1]["turn"] == 0
