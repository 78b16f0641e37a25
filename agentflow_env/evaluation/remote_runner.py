"""``eval --env-url``: the evaluation's episodes played on served envs.

Episode ``i`` is reset with its seed and ``episode_index=i``, so the server draws the task the
in-process evaluation draws (``indexed_task``), and the rows are the in-process rows: the same
answers, rewards and turn counts for the same seeds and planner. The planners act on the
``RemoteSession``: a served planner reads its chat messages, a local model its observation, and
the expert its next gold step from the served session's state (``expert_action``). An episode
whose server dies is played again from its start on another (twice at most): a finished episode
is never lost, and an evaluation that stops anyway resumes (``--resume``) where it stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from agentflow_env.evaluation.metrics import summarize_diagnostics
from agentflow_env.evaluation.runner import EvalResult
from agentflow_env.remote import EnvServers, RemoteSession, ServiceUnavailable
from agentflow_env.rollout.agents.episodes import as_planner

Progress = Callable[[Mapping[str, Any]], None]
REPLAYS = 2
"""How many times an episode whose server died is played again on another."""


class RemoteExpert:
    """The expert planner on a served env: the gold plan's next step, read from the served
    session's privileged state."""

    async def next_action(self, session: RemoteSession) -> str:
        state = await session.state()
        action = state.get("expert_action")
        if not action:
            raise RuntimeError(f"the server has no expert action for task {session.task}")
        return str(action)


async def _play(
    servers: EnvServers,
    planner: Any,
    index: int,
    seed: int,
    budget_curve: bool,
    messages: bool,
) -> dict[str, Any]:
    options = {"episode_index": index, "budget_curve": budget_curve, "messages": messages}
    session = RemoteSession(servers, seed, options)
    try:
        await session.start()
        while not session.done:
            await session.step(await planner.next_action(session))
    finally:
        await session.close()
    outcome = session.outcome
    assert outcome is not None
    return {
        "index": index,
        "seed": seed,
        "task_id": session.task.get("task_id"),
        "episode_id": session.episode_id,
        "question": session.task.get("question"),
        "gold_answers": list(session.task.get("gold_answers", [])),
        "answer": outcome.answer,
        "module_errors": list(outcome.module_errors),
        "planner_error": None,
        "diagnostics": dict(outcome.diagnostics),
        "server": session.url,
    }


async def evaluate_remote_async(
    servers: EnvServers,
    planner_factory: Callable[[int], Any],
    *,
    seeds: Sequence[int],
    concurrency: int = 8,
    budget_curve: bool = True,
    progress: Progress | None = None,
    indices: Collection[int] | None = None,
    messages: bool = False,
) -> EvalResult:
    """``evaluate_async``'s rows and summary, the episodes (``seeds[i]`` for episode ``i``)
    played on ``servers``. ``messages``: the planner reads each prompt's chat messages."""
    chosen = range(len(seeds)) if indices is None else sorted(set(indices))
    limit = asyncio.Semaphore(concurrency)

    async def one(index: int) -> dict[str, Any]:
        async with limit:
            for replay in range(REPLAYS + 1):
                try:
                    planner = as_planner(planner_factory(index))
                    row = await _play(servers, planner, index, seeds[index], budget_curve, messages)
                    break
                except ServiceUnavailable:
                    if replay == REPLAYS:
                        raise
        if progress is not None:
            progress(row)
        return row

    rows = list(await asyncio.gather(*(one(i) for i in chosen)))
    return EvalResult(rows, summarize_diagnostics([row["diagnostics"] for row in rows]))


def evaluate_remote(
    servers: EnvServers, planner_factory: Callable[[int], Any], **options: Any
) -> EvalResult:
    """``evaluate_remote_async`` from synchronous code."""
    return asyncio.run(evaluate_remote_async(servers, planner_factory, **options))
