"""What ``rollout.py``'s ``rollout_func`` hands TRL: its return value and the reward function.

``rollout_output``: TRL's required keys, ``env_mask`` and the per-sample fields the reward
function reads; ``env_reward``: the env's own terminal reward, with the episodes' figures logged
as ``env/*`` metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentflow_env.rollout import EpisodeResult

LOG_KEYS = ("success", "turns", "invalid_actions", "failed")


def rollout_output(results: Sequence[EpisodeResult]) -> dict[str, list]:
    """The dict ``rollout_func`` returns: TRL's required keys, ``env_mask``, and per-sample
    fields for the reward function (``env_reward``, the logged metrics, ``error``)."""
    return {
        "prompt_ids": [r.prompt_ids for r in results],
        "completion_ids": [r.completion_ids for r in results],
        "logprobs": [r.logprobs for r in results],
        "env_mask": [r.env_mask for r in results],
        "env_reward": [r.reward for r in results],
        "success": [float(r.success) for r in results],
        "turns": [r.turns for r in results],
        "invalid_actions": [float(r.metrics.get("invalid_actions", 0)) for r in results],
        "failed": [float(r.failure is not None) for r in results],
        "error": [r.error or "" for r in results],
    }


def env_reward(
    completions: list[Any], env_reward: list[float], log_metric: Any = None, **kwargs: Any
) -> list[float]:
    """The reward function: the environment's own terminal reward, unchanged; logs ``LOG_KEYS``
    as ``env/*`` metrics (per episode: turn rows carry them on their episode's last row only)."""
    if log_metric is not None:
        for name in LOG_KEYS:
            values = [v for v in kwargs.get(name) or () if v is not None]
            if values:
                log_metric(f"env/{name}", float(sum(values)) / len(values))
    return [float(r) for r in env_reward]


__all__ = ["LOG_KEYS", "env_reward", "rollout_output"]
