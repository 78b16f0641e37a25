"""Running whole episodes with a planner, and summarising many of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym

from agentflow_env.workflow.memory import MemoryEntry
from agentflow_env.workflow.outcome import EndReason


class Planner(Protocol):
    def act(self, observation: Any, info: dict[str, Any]) -> Any: ...


@dataclass
class EpisodeRecord:
    task_id: str
    question: str
    gold_answers: tuple[str, ...]
    answer: str | None
    success: bool
    reward: float
    seed: int | None
    actions: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    memory: list[dict[str, Any]] = field(default_factory=list)
    end_reason: str = ""
    module_errors: list[str] = field(default_factory=list)

    @property
    def module_failed(self) -> bool:
        """A frozen module failed: the episode ended on it, or its answer could not be written."""
        return self.end_reason == EndReason.MODULE_ERROR or bool(self.module_errors)

    def memory_entries(self) -> list[MemoryEntry]:
        return [MemoryEntry(**entry) for entry in self.memory]

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "seed": self.seed,
            "question": self.question,
            "gold_answers": list(self.gold_answers),
            "answer": self.answer,
            "success": self.success,
            "reward": self.reward,
            "end_reason": self.end_reason,
            "module_errors": self.module_errors,
            "metrics": self.metrics,
            "actions": self.actions,
            "memory": self.memory,
        }


def run_episode(env: gym.Env, planner: Planner, seed: int | None = None) -> EpisodeRecord:
    """Reset ``env`` with ``seed`` and let ``planner`` act until the episode ends."""
    observation, info = env.reset(seed=seed)
    actions: list[str] = []
    reward = 0.0
    while True:
        action = planner.act(observation, info)
        actions.append(action if isinstance(action, str) else repr(action))
        observation, step_reward, terminated, truncated, info = env.step(action)
        reward += float(step_reward)
        if terminated or truncated:
            break
    return EpisodeRecord(
        task_id=info["task_id"],
        question=info["question"],
        gold_answers=tuple(info["gold_answers"]),
        answer=info["answer"],
        success=bool(info["success"]),
        reward=reward,
        seed=seed,
        actions=actions,
        metrics=dict(info["metrics"]),
        memory=list(info["memory"]),
        end_reason=info["end_reason"],
        module_errors=[str(error) for error in info.get("module_errors", ())],
    )


def summarize(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """Success rate, means and counts over ``records``.

    ``module_error_episodes`` counts the episodes a frozen module failed in (they say nothing
    about the planner) and ``first_module_error`` is the first such error, or ``None``.
    """
    n = len(records)
    failed = [r for r in records if r.module_failed]
    first_error = next((e for r in failed for e in r.module_errors), None)
    if failed and first_error is None:
        first_error = f"episode {failed[0].task_id} ended on a module error"
    errors = {"module_error_episodes": len(failed), "first_module_error": first_error}
    if n == 0:
        return {
            "episodes": 0,
            "success_rate": 0.0,
            "mean_turns": 0.0,
            "tool_calls": 0,
            "invalid_calls": 0,
            "mean_reward": 0.0,
            **errors,
        }
    return {
        "episodes": n,
        "success_rate": sum(r.success for r in records) / n,
        "mean_turns": sum(r.metrics.get("turns", 0) for r in records) / n,
        "tool_calls": int(sum(r.metrics.get("tool_calls", 0) for r in records)),
        "invalid_calls": int(sum(r.metrics.get("invalid_actions", 0) for r in records)),
        "mean_reward": sum(r.reward for r in records) / n,
        **errors,
    }
