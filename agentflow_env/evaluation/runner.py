"""Evaluating a planner: many episodes at once on one event loop, diagnostics and a summary.

``evaluate`` runs ``episodes`` sessions of one env, at most ``concurrency`` at a time (the
sessions share the env's tools, modules and LLM clients), each with its own planner from the
factory. Episode ``i`` runs the task a ``reset(seed=seed + i)`` would draw (a
``reset(seed=seeds[i])`` when ``seeds`` are given, e.g. an evaluation suite's), or, for a dataset
(a fixed task list), its ``i``-th record. Every turn goes to the trajectory log as it happens.
Each episode is ``agentflow_env.rollout.agents.episodes.play_episode`` on its session.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gymnasium.utils import seeding

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.evaluation.metrics import summarize_diagnostics
from agentflow_env.evaluation.session_planners import PlannerFactory
from agentflow_env.llm.client import ContextLengthError
from agentflow_env.rollout.agents.episodes import as_planner, play_episode
from agentflow_env.tasks.base import ListTaskSource, Task
from agentflow_env.workflow.outcome import EndReason
from agentflow_env.workflow.turn_log import TurnLog

__all__ = ["EvalResult", "episode_task", "evaluate", "evaluate_async", "indexed_task"]

Progress = Callable[[Mapping[str, Any]], None]
"""Called with each finished episode's row."""


@dataclass
class EvalResult:
    """Per-episode rows (task, seed, answer and the diagnostics) and their summary."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def episode_task(env: AgentFlowEnv, seed: int, index: int) -> Task:
    """The task of episode ``index``: a dataset's ``index``-th record (cycling), else the task a
    ``reset(seed=seed + index)`` draws."""
    return indexed_task(env, index, seed + index)


def indexed_task(env: AgentFlowEnv, index: int, episode_seed: int) -> Task:
    """Episode ``index``'s task when its seed is ``episode_seed``: a dataset's ``index``-th
    record (cycling), else the task a ``reset(seed=episode_seed)`` draws."""
    source = env.task_source
    if isinstance(source, ListTaskSource):
        return source.tasks[index % len(source.tasks)]
    rng, _ = seeding.np_random(episode_seed)
    return source.sample(rng)


async def _run_one(
    env: AgentFlowEnv,
    planner_factory: PlannerFactory,
    index: int,
    episode_seed: int,
    log: TurnLog | None,
    run: str | None,
    budget_curve: bool,
) -> dict[str, Any]:
    task = indexed_task(env, index, episode_seed)
    session = env.new_session(
        task,
        seed=episode_seed,
        config=dataclasses.replace(env.session_config, budget_curve=budget_curve),
        log=log,
        run=run,
    )
    planner = as_planner(planner_factory(index))
    await session.start()
    planner_error = None
    try:
        await play_episode(session, planner)
    except ContextLengthError as error:  # this episode's prompt, not the planner's setup
        planner_error = f"the prompt is longer than the planner's model takes: {error}"
        await session.end(EndReason.PROMPT_BUDGET, planner_error)
    outcome = session.outcome
    assert outcome is not None  # the loop ran until the session was done
    return {
        "index": index,
        "seed": episode_seed,
        "task_id": task.task_id,
        "episode_id": session.logger.episode_id,
        "question": task.question,
        "gold_answers": list(task.gold_answers),
        "answer": outcome.answer,
        "module_errors": list(outcome.module_errors),
        "planner_error": planner_error,
        "diagnostics": dict(outcome.diagnostics),
    }


async def evaluate_async(
    env: AgentFlowEnv,
    planner_factory: PlannerFactory,
    *,
    episodes: int | None = None,
    seed: int = 0,
    seeds: Sequence[int] | None = None,
    concurrency: int = 8,
    log: TurnLog | None = None,
    run: str | None = None,
    budget_curve: bool = True,
    progress: Progress | None = None,
    indices: Collection[int] | None = None,
) -> EvalResult:
    """Run ``episodes`` episodes, ``concurrency`` at a time; rows come back in episode order.

    ``planner_factory(i)`` is episode ``i``'s planner: a ``Planner`` (``await
    next_action(session)``), or one with an ``act`` that ``ObservationPlanner`` adapts (the
    Gymnasium calling style, or an ``async act(session)``).

    Episode ``i`` has seed ``seed + i``, or ``seeds[i]`` when ``seeds`` are given (then
    ``episodes`` is their number, or left out). ``indices`` runs only those episodes, exactly as
    a whole run would run them (a resumed evaluation's missing ones); rows and summary are theirs.

    ``budget_curve`` adds each episode's success by turn budget (one generalist call per budget
    below the episode's length: free with rule modules, LLM requests with LLM modules). A planner
    that raises stops the evaluation (it is the thing under test: its error is the result),
    except where its served model refuses one episode's prompt as longer than its context
    (``ContextLengthError``): that episode ends there, ``prompt_budget``, its row's
    ``planner_error`` saying why, and the others go on.
    """
    if seeds is not None:
        if episodes is not None and episodes != len(seeds):
            raise ValueError(f"episodes={episodes} but {len(seeds)} seeds given")
        episode_seeds = [int(s) for s in seeds]
    elif episodes is not None:
        episode_seeds = [seed + i for i in range(episodes)]
    else:
        raise ValueError("give episodes or seeds")
    if not episode_seeds or concurrency < 1:
        raise ValueError("episodes and concurrency must be positive")
    chosen = range(len(episode_seeds)) if indices is None else sorted(set(indices))
    outside = [i for i in chosen if not 0 <= i < len(episode_seeds)]
    if outside:
        raise ValueError(f"indices {outside[:5]} are outside the {len(episode_seeds)} episodes")
    limit = asyncio.Semaphore(concurrency)

    async def one(index: int) -> dict[str, Any]:
        async with limit:
            row = await _run_one(
                env, planner_factory, index, episode_seeds[index], log, run, budget_curve
            )
        if progress is not None:
            progress(row)
        return row

    rows = list(await asyncio.gather(*(one(i) for i in chosen)))
    summary = summarize_diagnostics([row["diagnostics"] for row in rows])
    return EvalResult(rows, summary)


def evaluate(env: AgentFlowEnv, planner_factory: PlannerFactory, **options: Any) -> EvalResult:
    """``evaluate_async`` from synchronous code (on the env's own event loop thread)."""
    return env.run_async(evaluate_async(env, planner_factory, **options))
