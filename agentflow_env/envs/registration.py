"""The Gymnasium ids of the environments and their registration.

``agentflow_env`` calls ``register_envs`` when it is imported, and Gymnasium calls it through the
package's ``gymnasium.envs`` entry point, so ``gym.make("AgentFlow-Search-v0")`` works after
``import agentflow_env`` and ``gym.make("agentflow_env:AgentFlow-Search-v0")`` always.
"""

from __future__ import annotations

import gymnasium

ENV_ENTRY_POINTS: dict[str, str] = {
    "AgentFlow-Search-v0": "agentflow_env.envs.env:AgentFlowEnv",
    "AgentFlow-Code-v0": "agentflow_env.envs.code:make_code_env",
}


def register_envs() -> None:
    """Register the environments with Gymnasium (idempotent)."""
    for env_id, entry_point in ENV_ENTRY_POINTS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point)


__all__ = ["ENV_ENTRY_POINTS", "register_envs"]
