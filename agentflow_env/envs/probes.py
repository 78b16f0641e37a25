"""The probe envs (``AgentFlow-Probe-ToolChoice-v0``, ``-Stop-v0``, ``-DelayedCredit-v0``,
``-Copying-v0``): an ``AgentFlowEnv`` over each probe's tasks (``agentflow_env.tasks.probes``).

Their settings are the fields of the probe configs (``agentflow_env.envs.config.probes``).
"""

from __future__ import annotations

from typing import Any

from agentflow_env.envs.config import (
    CopyingProbeConfig,
    DelayedCreditProbeConfig,
    ProbeEnvConfig,
    StopProbeConfig,
    ToolChoiceProbeConfig,
)
from agentflow_env.envs.env import AgentFlowEnv


def make_probe_env(
    config_class: type[ProbeEnvConfig],
    config: ProbeEnvConfig | None = None,
    *,
    render_mode: str | None = None,
    **settings: Any,
) -> AgentFlowEnv:
    """``AgentFlowEnv(config_class.from_kwargs(**settings))``, or ``config`` (of that class)
    with ``settings`` changed. Settings the probe lacks raise ``ValueError``."""
    if config is None:
        config = config_class.from_kwargs(**settings)
    elif not isinstance(config, config_class):
        raise TypeError(
            f"{config_class.env_id} takes a {config_class.__name__}, got {type(config).__name__}"
        )
    else:
        config = config.updated(**settings)
    return AgentFlowEnv(config, render_mode=render_mode)


def make_tool_choice_env(config: ProbeEnvConfig | None = None, **settings: Any) -> AgentFlowEnv:
    """The ``AgentFlow-Probe-ToolChoice-v0`` entry point."""
    return make_probe_env(ToolChoiceProbeConfig, config, **settings)


def make_stop_env(config: ProbeEnvConfig | None = None, **settings: Any) -> AgentFlowEnv:
    """The ``AgentFlow-Probe-Stop-v0`` entry point."""
    return make_probe_env(StopProbeConfig, config, **settings)


def make_delayed_credit_env(config: ProbeEnvConfig | None = None, **settings: Any) -> AgentFlowEnv:
    """The ``AgentFlow-Probe-DelayedCredit-v0`` entry point."""
    return make_probe_env(DelayedCreditProbeConfig, config, **settings)


def make_copying_env(config: ProbeEnvConfig | None = None, **settings: Any) -> AgentFlowEnv:
    """The ``AgentFlow-Probe-Copying-v0`` entry point."""
    return make_probe_env(CopyingProbeConfig, config, **settings)


PROBE_ENV_IDS: dict[str, str] = {
    config.probe: config.env_id
    for config in (
        ToolChoiceProbeConfig,
        StopProbeConfig,
        DelayedCreditProbeConfig,
        CopyingProbeConfig,
    )
}
"""Probe name (``tool_choice``, ``stop``, ``delayed_credit``, ``copying``) -> its env id."""

__all__ = [
    "PROBE_ENV_IDS",
    "make_copying_env",
    "make_delayed_credit_env",
    "make_probe_env",
    "make_stop_env",
    "make_tool_choice_env",
]
