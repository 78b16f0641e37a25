"""The Gymnasium ids of the environments, their configs and their registration.

Each id has a config class (``ENV_CONFIGS``, from ``agentflow_env.envs.config``): the settings
``gym.make(id, **settings)`` accepts are its fields, and a ``TaskSpec`` label's ``env_kwargs``
for that id are read by its ``from_dict``.

``agentflow_env`` calls ``register_envs`` when it is imported, and Gymnasium calls it through the
package's ``gymnasium.envs`` entry point, so ``gym.make("AgentFlow-Search-v0")`` works after
``import agentflow_env`` and ``gym.make("agentflow_env:AgentFlow-Search-v0")`` always.
"""

from __future__ import annotations

import gymnasium

from agentflow_env.envs.config import (
    PROBE_CONFIGS,
    CodeEnvConfig,
    EnvConfig,
    SearchEnvConfig,
)

_CONFIGS: tuple[type[EnvConfig], ...] = (SearchEnvConfig, CodeEnvConfig, *PROBE_CONFIGS)
ENV_CONFIGS: dict[str, type[EnvConfig]] = {config.env_id: config for config in _CONFIGS}
"""Env id -> the config class its settings build."""

ENV_ENTRY_POINTS: dict[str, str] = {
    SearchEnvConfig.env_id: "agentflow_env.envs.env:AgentFlowEnv",
    CodeEnvConfig.env_id: "agentflow_env.envs.code:make_code_env",
    **{
        config.env_id: f"agentflow_env.envs.probes:make_{config.probe}_env"
        for config in PROBE_CONFIGS
    },
}


def config_class(env_id: str) -> type[EnvConfig] | None:
    """The config class of ``env_id`` (also as ``"module:EnvId"``); ``None`` for ids that are
    not this package's."""
    return ENV_CONFIGS.get(env_id.rsplit(":", 1)[-1])


def register_envs() -> None:
    """Register the environments with Gymnasium (idempotent)."""
    for env_id, entry_point in ENV_ENTRY_POINTS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point)


__all__ = ["ENV_CONFIGS", "ENV_ENTRY_POINTS", "config_class", "register_envs"]
