"""The Gymnasium ids of the environments: one ``Variant`` row per id, and their registration.

A row owns everything that differs between variants: its config class (which names its id,
``env_id``, and builds its task source), how a task label names one of its tasks
(``label_tasks``, ``label_settings``) and where ``agentflow-env run`` departs from the config's
defaults (``run_defaults``). Every id is built by the one builder, ``AgentFlowEnv``, given the
row's config class (``ENTRY_POINT``); ``gym.make(id, **settings)`` takes the config's fields, and
a ``TaskSpec`` label's ``env_kwargs`` for that id are read by its ``from_dict``. ``gym.make``,
the CLI, the labels and the tests iterate over ``REGISTERED``; ``ENV_CONFIGS`` is read off it.

``agentflow_env`` calls ``register_envs`` when it is imported, and Gymnasium calls it through the
package's ``gymnasium.envs`` entry point, so ``gym.make("AgentFlow-Search-v0")`` works after
``import agentflow_env`` and ``gym.make("agentflow_env:AgentFlow-Search-v0")`` always. A variant
defined elsewhere calls ``register_variant(Variant(MyConfig))``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import gymnasium

from agentflow_env.envs.config import (
    PROBE_CONFIGS,
    CodeEnvConfig,
    EnvConfig,
    SearchEnvConfig,
)
from agentflow_env.tasks.base import TaskSource

ENTRY_POINT = "agentflow_env.envs.env:AgentFlowEnv"
"""What ``gym.make`` calls for every variant, with the row's config class as ``config_class``."""

LabelTasks = Literal["auto", "seed", "task_id"]
"""How a label names a task: ``seed`` (the source's draw from a seeded rng: generated tasks),
``task_id`` (a task of the source's fixed list), ``auto`` (``task_id`` where the source has a
fixed list, else ``seed``). A label may always carry its task inline (a ``record``)."""

HELD_OUT: Mapping[str, Any] = {"split": "test"}
"""The run defaults of a variant with a train/test split: runs evaluate on held-out tasks."""


@dataclass(frozen=True)
class Variant:
    """One env variant: its config class and what differs in its labels and runs.

    ``label_tasks``: how its labels name a task (``LabelTasks``); ``label_settings``: settings
    every label writes out even at their defaults, so that a reader with other defaults (an
    adapter's env kwargs) builds the same tasks; ``run_defaults``: where ``agentflow-env run``
    and ``eval`` depart from the config's defaults (a default the given settings rule out, as a
    split beside a dataset, is left out).
    """

    config: type[EnvConfig]
    label_tasks: LabelTasks = "auto"
    label_settings: tuple[str, ...] = ()
    run_defaults: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.config.env_id:
            raise ValueError(f"{self.config.__name__} names no env_id")
        if self.label_tasks not in get_args(LabelTasks):
            raise ValueError(
                f"label_tasks must be one of {list(get_args(LabelTasks))}, got {self.label_tasks!r}"
            )
        unknown = [
            name
            for name in (*self.label_settings, *self.run_defaults)
            if name not in self.config.settings()
        ]
        if unknown:
            raise ValueError(f"{self.config.env_id} has no setting {', '.join(unknown)}")

    @property
    def env_id(self) -> str:
        return self.config.env_id

    def label_naming(self, source: TaskSource) -> Literal["seed", "task_id"]:
        """How a label names a task of ``source`` (this variant's source)."""
        if self.label_tasks != "auto":
            return self.label_tasks
        return "task_id" if getattr(source, "tasks", None) else "seed"


VARIANTS: tuple[Variant, ...] = (
    Variant(SearchEnvConfig, label_settings=("split", "world_seed"), run_defaults=HELD_OUT),
    Variant(CodeEnvConfig, label_tasks="seed", label_settings=("split",), run_defaults=HELD_OUT),
    *(
        Variant(
            config,
            label_tasks="seed",
            label_settings=("split", "max_turns"),
            run_defaults=HELD_OUT,
        )
        for config in PROBE_CONFIGS
    ),
)
"""The package's variants, one row each: a new variant is a config class and a row here."""

REGISTERED: dict[str, Variant] = {variant.env_id: variant for variant in VARIANTS}
"""Env id -> its row: the package's rows, then those ``register_variant`` added."""

ENV_CONFIGS: dict[str, type[EnvConfig]] = {variant.env_id: variant.config for variant in VARIANTS}
"""Env id -> the config class its settings build (read off ``REGISTERED``)."""


def variant_of(env_id: str) -> Variant | None:
    """The row of ``env_id`` (also as ``"module:EnvId"``); ``None`` for ids not registered here."""
    return REGISTERED.get(env_id.rsplit(":", 1)[-1])


def config_class(env_id: str) -> type[EnvConfig] | None:
    """The config class of ``env_id`` (also as ``"module:EnvId"``); ``None`` for ids that are
    not this package's."""
    variant = variant_of(env_id)
    return None if variant is None else variant.config


def run_settings(env_id: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` with the variant's run defaults for the settings not given, each where the
    config takes it beside them (a dataset brings its own split)."""
    settings = dict(given)
    variant = variant_of(env_id)
    if variant is None:
        return settings
    for name, value in variant.run_defaults.items():
        if name in settings:
            continue
        try:
            variant.config.from_kwargs(**{**settings, name: value})
        except (ValueError, TypeError, KeyError):
            continue  # ruled out by the given settings (or they are invalid: reported later)
        settings[name] = value
    return settings


def register_variant(variant: Variant) -> None:
    """Add a variant defined outside this package, as if it were a row of ``VARIANTS`` (labels,
    ``agentflow-env run`` and ``gym.make`` then know it). An id already taken by another config
    raises ``ValueError``; registering the same config again replaces its row."""
    taken = ENV_CONFIGS.get(variant.env_id)
    if taken is not None and taken is not variant.config:
        raise ValueError(f"{variant.env_id} is already the id of {taken.__name__}")
    REGISTERED[variant.env_id] = variant
    ENV_CONFIGS[variant.env_id] = variant.config
    _register(variant)


def register_envs() -> None:
    """Register the environments with Gymnasium (idempotent)."""
    for variant in REGISTERED.values():
        _register(variant)


def _register(variant: Variant) -> None:
    if variant.env_id not in gymnasium.registry:
        gymnasium.register(
            id=variant.env_id, entry_point=ENTRY_POINT, kwargs={"config_class": variant.config}
        )


__all__ = [
    "ENTRY_POINT",
    "ENV_CONFIGS",
    "HELD_OUT",
    "REGISTERED",
    "VARIANTS",
    "LabelTasks",
    "Variant",
    "config_class",
    "register_envs",
    "register_variant",
    "run_settings",
    "variant_of",
]
