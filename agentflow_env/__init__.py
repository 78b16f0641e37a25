"""agentflow-env: AgentFlow's tool-using workflow as a Gymnasium environment whose agent is the planner."""

from __future__ import annotations

import gymnasium

from agentflow_env.env import AgentFlowEnv
from agentflow_env.memory import Memory, MemoryEntry, QueryAnalysis
from agentflow_env.session import Session, SessionConfig
from agentflow_env.tasks.base import PlanStep, Task, TaskSource

__version__ = "0.1.0"

ENV_ENTRY_POINTS: dict[str, str] = {
    "AgentFlow-Search-v0": "agentflow_env.env:AgentFlowEnv",
    "AgentFlow-Code-v0": "agentflow_env.tasks.code:make_code_env",
}


def register_envs() -> None:
    """Register the environments with Gymnasium (idempotent)."""
    for env_id, entry_point in ENV_ENTRY_POINTS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point)


register_envs()

__all__ = [
    "AgentFlowEnv",
    "Memory",
    "MemoryEntry",
    "PlanStep",
    "QueryAnalysis",
    "Session",
    "SessionConfig",
    "Task",
    "TaskSource",
    "register_envs",
]
