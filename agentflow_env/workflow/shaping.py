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

from typing import Literal, get_args

from agentflow_env.tasks.base import Task
from agentflow_env.workflow.diagnostics import gold_steps_done
from agentflow_env.workflow.memory import Memory

RewardShaping = Literal["none", "progress"]
REWARD_SHAPINGS: tuple[str, ...] = get_args(RewardShaping)

__all__ = ["REWARD_SHAPINGS", "RewardShaping", "progress_potential"]


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
