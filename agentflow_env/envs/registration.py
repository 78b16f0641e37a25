"""The Gymnasium ids of the environments, their configs and their registration.

Each variant is one row of ``VARIANTS``: its config class (from ``agentflow_env.envs.config``,
which names its id, ``env_id``) and the entry point ``gym.make`` calls. The settings
``gym.make(id, **settings)`` accepts are the config's fields, and a ``TaskSpec`` label's
``env_kwargs`` for that id are read by its ``from_dict``. ``ENV_CONFIGS`` and
``ENV_ENTRY_POINTS`` are read off the rows.

``agentflow_env`` calls ``register_envs`` when it is imported, and Gymnasium calls it through the
package's ``gymnasium.envs`` entry point, so ``gym.make("AgentFlow-Search-v0")`` works after
``import agentflow_env`` and ``gym.make("agentflow_env:AgentFlow-Search-v0")`` always.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium

from agentflow_env.envs.config import (
    PROBE_CONFIGS,
    CodeEnvConfig,
    EnvConfig,
    SearchEnvConfig,
)


@dataclass(frozen=True)
class Variant:
    """One env variant: the config class its settings build and what ``gym.make`` calls
    (``"module:callable"``, taking the settings as keywords)."""

    config: type[EnvConfig]
    entry_point: str

    @property
    def env_id(self) -> str:
        return self.config.env_id


VARIANTS: tuple[Variant, ...] = (
    Variant(SearchEnvConfig, "agentflow_env.envs.env:AgentFlowEnv"),
    Variant(CodeEnvConfig, "agentflow_env.envs.code:make_code_env"),
    *(
        Variant(config, f"agentflow_env.envs.probes:make_{config.probe}_env")
        for config in PROBE_CONFIGS
    ),
)
"""Every env variant, one row each: a new variant is a config class, a builder and a row here."""

ENV_CONFIGS: dict[str, type[EnvConfig]] = {variant.env_id: variant.config for variant in VARIANTS}
"""Env id -> the config class its settings build."""

ENV_ENTRY_POINTS: dict[str, str] = {variant.env_id: variant.entry_point for variant in VARIANTS}
"""Env id -> what ``gym.make`` calls."""


def config_class(env_id: str) -> type[EnvConfig] | None:
    """The config class of ``env_id`` (also as ``"module:EnvId"``); ``None`` for ids that are
    not this package's."""
    return ENV_CONFIGS.get(env_id.rsplit(":", 1)[-1])


def register_variant(variant: Variant) -> None:
    """Add a variant defined outside this package: its row's id, config and entry point, as if
    it were a row of ``VARIANTS`` (labels and ``gym.make`` then know it). An id already taken by
    another config raises ``ValueError``; registering the same row again does nothing."""
    taken = ENV_CONFIGS.get(variant.env_id)
    if taken is not None and taken is not variant.config:
        raise ValueError(f"{variant.env_id} is already the id of {taken.__name__}")
    ENV_CONFIGS[variant.env_id] = variant.config
    ENV_ENTRY_POINTS[variant.env_id] = variant.entry_point
    if variant.env_id not in gymnasium.registry:
        gymnasium.register(id=variant.env_id, entry_point=variant.entry_point)


def register_envs() -> None:
    """Register the environments with Gymnasium (idempotent)."""
    for env_id, entry_point in ENV_ENTRY_POINTS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point)


__all__ = [
    "ENV_CONFIGS",
    "ENV_ENTRY_POINTS",
    "VARIANTS",
    "Variant",
    "config_class",
    "register_envs",
    "register_variant",
]
