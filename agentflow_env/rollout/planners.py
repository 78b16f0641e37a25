"""Scripted planners: an expert that follows the task's gold plan, and a random baseline.

Both expose ``act(observation, info) -> str`` and work on the env that ``gym.make`` returns.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from agentflow_env.envs.env import unwrap_agentflow
from agentflow_env.retrieval.corpus import Corpus
from agentflow_env.tasks.base import Task
from agentflow_env.workflow.actions import format_planner_action


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
    """Follows the current task's gold plan (privileged: for tests, demos and demonstrations)."""

    def __init__(self, env: gym.Env):
        self.env = unwrap_agentflow(env)

    def act(self, observation: Any = None, info: dict[str, Any] | None = None) -> str:
        task = self.env.task  # ResetNeeded before the first reset()
        assert self.env.session is not None  # a task means a session
        return expert_action(task, self.env.session.turn)


class RandomPlanner:
    """An untrained baseline: a random tool (sometimes a made-up one) with random corpus words."""

    def __init__(self, env: gym.Env, seed: int | None = None):
        self.env = unwrap_agentflow(env)
        self.rng = np.random.default_rng(seed)

    def act(self, observation: Any = None, info: dict[str, Any] | None = None) -> str:
        return random_action(self.rng, self.env.tools.names, self.env.task)


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
