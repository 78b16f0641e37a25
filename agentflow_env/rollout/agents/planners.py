"""Scripted planners: an expert that follows the task's gold plan, and a random baseline.

Both follow the planner protocol (``await planner.next_action(session)``, any session: many
episodes on one event loop) and keep the Gymnasium calling style, ``act(observation, info)``, on
the current episode of the env they were given (the env that ``gym.make`` returns, wrappers and
all). Where the planner may finish (``termination`` "planner" or "both"), the expert ends the
episode with the finish action once it has done every gold step, answering what the task's
evidence reader reads out of the memory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from agentflow_env.envs.env import AgentFlowEnv, unwrap_agentflow
from agentflow_env.retrieval.corpus import Corpus
from agentflow_env.tasks.base import Task
from agentflow_env.tasks.oracle import evidence_reader
from agentflow_env.workflow.actions import format_finish_action, format_planner_action
from agentflow_env.workflow.memory import Memory
from agentflow_env.workflow.outcome import planner_may_finish
from agentflow_env.workflow.session import Session


def expert_action(task: Task, turn: int) -> str:
    """The gold plan's step for ``turn`` (0-based; the last step repeats) as an action text."""
    if not task.gold_plan:
        raise ValueError(f"task {task.task_id} has no gold plan to follow")
    step = task.gold_plan[min(turn, len(task.gold_plan) - 1)]
    return format_planner_action(
        justification=step.justification or f"Step {turn + 1} of the plan.",
        context=step.context,
        sub_goal=step.sub_goal,
        tool_name=step.tool,
    )


def expert_finish_action(task: Task, memory: Memory) -> str:
    """The finish action with the answer the task's evidence reader reads out of ``memory``
    (an empty answer when it reads none: then the generalist answers)."""
    answer = evidence_reader(task).solve(memory.evidence()) or ""
    return format_finish_action(answer, "Every step of the plan is done.")


def expert_session_action(session: Session) -> str:
    """The expert's next action in ``session``: the gold plan's next step, or, once every step
    is done and the planner may finish, the finish action with the answer it read."""
    task, turn = session.task, session.turn
    done = bool(task.gold_plan) and turn >= len(task.gold_plan)
    if done and planner_may_finish(session.config.termination):
        return expert_finish_action(task, session.memory)
    return expert_action(task, turn)


def random_action(rng: np.random.Generator, tool_names: Sequence[str], task: Task) -> str:
    """A random tool (sometimes a made-up one) with random corpus words; 10% are malformed."""
    names = [*tool_names, "Wikipedia_Search"]
    tool = names[int(rng.integers(len(names)))]
    corpus = task.corpus
    words = _vocabulary(corpus) if corpus is not None else ("what", "is", "the", "answer")
    picked = rng.choice(len(words), size=int(rng.integers(1, 4)))
    context = " ".join(words[int(i)] for i in picked)
    if tool == "Calculator":
        a, b = rng.integers(0, 3000, size=2)
        context = f"{a} {rng.choice(['+', '-', '*'])} {b}"
    if rng.random() < 0.1:
        return f"I think we should use {tool} for {context}"  # no fields: malformed
    return format_planner_action(
        justification="A random guess.", context=context, sub_goal=context, tool_name=tool
    )


class ExpertPlanner:
    """Follows the task's gold plan (privileged: for tests, demos and demonstrations).

    ``next_action(session)`` acts in any session; ``act(observation, info)`` acts in the current
    episode of ``env`` (required for it).
    """

    def __init__(self, env: gym.Env | None = None):
        self.env = None if env is None else unwrap_agentflow(env)

    async def next_action(self, session: Session) -> str:
        return expert_session_action(session)

    def act(self, observation: Any = None, info: dict[str, Any] | None = None) -> str:
        env = _bound(self.env, "ExpertPlanner")
        task = env.task  # ResetNeeded before the first reset()
        session = env.session
        assert session is not None and session.task is task  # a task means a session
        return expert_session_action(session)


class RandomPlanner:
    """An untrained baseline: a random tool (sometimes a made-up one) with random corpus words.

    ``seed`` seeds its generator (an int, or e.g. ``[seed, episode_index]`` for one planner per
    episode). ``next_action(session)`` acts in any session; ``act(observation, info)`` acts in
    the current episode of ``env`` (required for it).
    """

    def __init__(self, env: gym.Env | None = None, seed: int | Sequence[int] | None = None):
        self.env = None if env is None else unwrap_agentflow(env)
        self.rng = np.random.default_rng(seed)

    async def next_action(self, session: Session) -> str:
        return random_action(self.rng, session.tools.names, session.task)

    def act(self, observation: Any = None, info: dict[str, Any] | None = None) -> str:
        env = _bound(self.env, "RandomPlanner")
        return random_action(self.rng, env.tools.names, env.task)


def _bound(env: AgentFlowEnv | None, planner: str) -> AgentFlowEnv:
    if env is None:
        raise TypeError(
            f"{planner} was built without an env, so act(observation, info) has no episode to "
            f"act in: build it with the env, or await next_action(session)"
        )
    return env


_VOCABULARIES: dict[str, tuple[str, ...]] = {}


def _vocabulary(corpus: Corpus) -> tuple[str, ...]:
    """The corpus's words, cached by ``corpus_id`` (hashing a whole corpus per act would not be)."""
    cached = _VOCABULARIES.get(corpus.corpus_id)
    if cached is not None:
        return cached
    if len(_VOCABULARIES) >= 64:
        _VOCABULARIES.pop(next(iter(_VOCABULARIES)))
    words = {w for doc in corpus.documents for w in re.findall(r"\w+", doc.contents)}
    _VOCABULARIES[corpus.corpus_id] = tuple(sorted(words))
    return _VOCABULARIES[corpus.corpus_id]
