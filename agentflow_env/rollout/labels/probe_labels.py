"""Task labels naming a probe env (``tool_choice``, ``stop``, ``delayed_credit``, ``copying``):
the rows ``agentflow-env labels probe`` writes, and a flat-mode env of each probe."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium as gym

from agentflow_env.envs.config import PROBE_ENV_IDS
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.rollout.labels.spec import TaskSpec, variant_specs
from agentflow_env.tasks.base import Task


def probe_env_id(probe: str) -> str:
    """The env id of ``probe`` (``tool_choice``, ``stop``, ``delayed_credit``, ``copying``)."""
    if probe not in PROBE_ENV_IDS:
        raise ValueError(f"unknown probe {probe!r}; probes are {list(PROBE_ENV_IDS)}")
    return PROBE_ENV_IDS[probe]


def probe_env(probe: str, **env_kwargs: Any) -> AgentFlowEnv:
    """A flat-mode env of ``probe`` (the mode whose prompts a trainer extends by ids)."""
    env = gym.make(probe_env_id(probe), **{**env_kwargs, "observation_mode": "flat"}).unwrapped
    assert isinstance(env, AgentFlowEnv)
    return env


def probe_label(probe: str, seed: int, **env_kwargs: Any) -> str:
    """A task label (``TaskSpec`` JSON) naming ``probe``'s env and the episode seed: a dataset
    prompt for TRL's adapter, a ``label`` for OpenRLHF, verl and SkyRL."""
    return TaskSpec(env_id=probe_env_id(probe), env_kwargs=env_kwargs, seed=int(seed)).to_json()


def probe_specs(
    probe: str,
    count: int,
    *,
    split: str = "train",
    seed: int = 0,
    env_kwargs: Mapping[str, Any] | None = None,
) -> Iterator[tuple[TaskSpec, Task]]:
    """``count`` labels of ``probe``'s tasks (episode seeds ``seed, seed + 1, ...`` of
    ``split``), each with its task: the rows ``agentflow-env labels probe``
    writes. ``env_kwargs`` (JSON) go into every label beside the split. Each label pins the
    probe's turn limit (its default unless ``env_kwargs`` set one; the probe rows'
    ``label_settings``): a label's kwargs win over an adapter's (the launch scripts'
    ``AGENTFLOW_ENV_KWARGS`` default is 10 turns)."""
    kwargs = {**dict(env_kwargs or {}), "split": split}
    return variant_specs(count, env_id=probe_env_id(probe), env_kwargs=kwargs, seed=seed)


__all__ = ["PROBE_ENV_IDS", "probe_env", "probe_env_id", "probe_label", "probe_specs"]
