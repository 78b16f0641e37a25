"""``AgentFlow-Code-v0``: an ``AgentFlowEnv`` over the computation tasks of
``agentflow_env.tasks.code``, with the Python tool (sandboxed), Calculator and Search.

Its settings are the fields of ``CodeEnvConfig`` (``agentflow_env.envs.config``)."""

from __future__ import annotations

from typing import Any

from agentflow_env.envs.config import CODE_TOOLS, CodeEnvConfig, SearchEnvConfig
from agentflow_env.envs.env import AgentFlowEnv

UNUSED_SETTINGS: tuple[str, ...] = tuple(
    name for name in SearchEnvConfig.settings() if name not in CodeEnvConfig.settings()
)
"""``AgentFlow-Search-v0`` settings that pick or shape other task sources: this variant
generates its own tasks, so it rejects them (unless given as ``None``)."""


def make_code_env(
    config: CodeEnvConfig | None = None, *, render_mode: str | None = None, **settings: Any
) -> AgentFlowEnv:
    """An ``AgentFlowEnv`` over a ``CodeTaskSource`` (the ``AgentFlow-Code-v0`` entry point):
    ``AgentFlowEnv(CodeEnvConfig.from_kwargs(**settings))``, or ``config`` with ``settings``
    changed.

    ``world_seed`` (or its older name ``seed``) and ``world_size`` pick the synthetic world the
    fact questions are about, so they need ``"fact_math"`` among ``kinds``. Settings this variant
    does not use (``hops``, other task sources) raise ``ValueError`` instead of being ignored.
    """
    if config is None:
        config = CodeEnvConfig.from_kwargs(**settings)
    elif not isinstance(config, CodeEnvConfig):
        raise TypeError(
            f"{CodeEnvConfig.env_id} takes a CodeEnvConfig, got {type(config).__name__}"
        )
    else:
        config = config.updated(**settings)
    return AgentFlowEnv(config, render_mode=render_mode)


__all__ = ["CODE_TOOLS", "UNUSED_SETTINGS", "make_code_env"]
