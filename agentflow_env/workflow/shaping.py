"""Progress potentials for potential-based reward shaping (``reward_shaping="progress"``).

The shaping reward of turn ``t`` is ``F_t = w * (Phi(s_t) - Phi(s_{t-1}))`` (Ng, Harada and
Russell's potential-based form with discount 1), so an episode's shaping rewards sum to
``w * (Phi(final) - Phi(initial))`` whatever path it took, and the terminal reward is left as
it is. ``Phi`` is ``progress_potential``:

- a task with a gold plan (the synthetic Search worlds, the Code tasks): the fraction of the gold
  steps the episode has done, in order (``gold_steps_done``: the step's tool, run successfully,
  with at least half of the step's context words in its arguments), i.e. the fraction of the gold
  evidence chain present in memory;
- any other task (datasets): the proxy "share of the query analysis's sub-questions the verifier
  no longer lists as open": ``1 - open / asked``, clamped to [0, 1]; 0 when the analysis asked
  none. It reads the verifier, so it is only as good as the verifier's open questions.

Policy invariance (the optimal policy is unchanged) holds for potential-based shaping when the
potential of every terminal state is the same; here ``Phi(final)`` is the progress the episode
reached, so the shaped return is ``R + w * (Phi(final) - Phi(initial))``: a bonus for evidence
gathered, added to the terminal reward. Both are reported apart (``info["shaping"]``,
``info["reward"]``) so a trainer can use either.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

from agentflow_env.tasks.base import Task
from agentflow_env.workflow.diagnostics import gold_steps_done
from agentflow_env.workflow.memory import Memory

RewardShaping = Literal["none", "progress"]
REWARD_SHAPINGS: tuple[str, ...] = get_args(RewardShaping)

__all__ = [
    "REWARD_SHAPINGS",
    "SHAPINGS",
    "NoShaping",
    "PotentialTracker",
    "ProgressShaping",
    "RewardShaping",
    "Shaping",
    "make_shaping",
    "progress_potential",
]


def progress_potential(task: Task, memory: Memory) -> float:
    """``Phi`` of the episode's state, in [0, 1] (see the module docstring)."""
    plan = task.gold_plan
    if plan:
        return gold_steps_done(plan, memory.entries) / len(plan)
    asked = memory.analysis.sub_questions if memory.analysis else ()
    if not asked:
        return 0.0
    still_open = len(memory.open_questions())
    return min(1.0, max(0.0, 1.0 - still_open / len(asked)))


class Shaping(ABC):
    """What extra reward a turn earns: ``weight * (Phi(s') - Phi(s))`` for the policy's potential
    ``Phi``; one policy per ``reward_shaping`` setting. A policy holds no episode state (the
    episode's current potential is its ``PotentialTracker``'s)."""

    name: ClassVar[str]
    """The ``reward_shaping`` setting that names this policy."""

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = weight

    @abstractmethod
    def potential(self, task: Task, memory: Memory) -> float:
        """``Phi`` of the episode's state."""

    def info(self, shaping: float, potential: float) -> dict[str, Any]:
        """The keys a step's ``info`` carries about its shaping."""
        return {"shaping": shaping, "potential": potential}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weight={self.weight!r})"


class NoShaping(Shaping):
    """No extra reward: the potential is 0 throughout, and ``info`` says nothing of it."""

    name = "none"

    def potential(self, task: Task, memory: Memory) -> float:
        return 0.0

    def info(self, shaping: float, potential: float) -> dict[str, Any]:
        return {}


class ProgressShaping(Shaping):
    """``Phi`` is ``progress_potential``; a potential that raises is 0 (it reads task data, never
    the planner's input, but must not crash a turn), logged as a ``shaping_error`` event."""

    name = "progress"

    def potential(self, task: Task, memory: Memory) -> float:
        try:
            return progress_potential(task, memory)
        except Exception as exc:
            memory.log("shaping_error", len(memory), error=repr(exc))
            return 0.0


SHAPINGS: Mapping[str, type[Shaping]] = {
    policy.name: policy for policy in (NoShaping, ProgressShaping)
}
"""The policies by ``reward_shaping`` setting (the names of ``RewardShaping``)."""


def make_shaping(name: str, weight: float = 1.0) -> Shaping:
    """The policy the ``reward_shaping`` setting ``name`` names, with the weight ``w``."""
    if name not in SHAPINGS:
        raise ValueError(f"unknown reward shaping {name!r}; choose one of {list(SHAPINGS)}")
    return SHAPINGS[name](weight)


@dataclass
class PotentialTracker:
    """The potential of one episode's current state under ``shaping``, moved on each turn."""

    shaping: Shaping
    potential: float = 0.0
    """``Phi`` of the current state (0 throughout without shaping)."""

    def start(self, task: Task, memory: Memory) -> None:
        """Take the potential of the episode's first state."""
        self.potential = self.shaping.potential(task, memory)

    def advance(self, task: Task, memory: Memory) -> float:
        """This turn's shaping reward ``w * (Phi(s') - Phi(s))``; moves the potential on."""
        before, self.potential = self.potential, self.shaping.potential(task, memory)
        return self.shaping.weight * (self.potential - before)

    def info(self, shaping: float) -> dict[str, Any]:
        """What a step's ``info`` says of its shaping reward ``shaping``."""
        return self.shaping.info(shaping, self.potential)
