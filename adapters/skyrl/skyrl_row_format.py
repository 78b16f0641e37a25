"""SkyRL's row format for ``agentflow-env labels --format skyrl`` (registered when loaded).

``{"prompt", "env_class", "label", "data_source"}``: ``env_class`` names the AgentFlow env, and
SkyRL hands ``label`` to the generator and the env as ``env_extras``; the chat prompt is the
question, which SkyRL only uses to filter over-long prompts (the env renders the planner's prompt).
"""

from __future__ import annotations

from typing import Any

from agentflow_env.rollout import Row, register_row_format

ENV_CLASS = "agentflow"
"""The name the AgentFlow env is registered under in SkyRL (``agentflow_text_env.py``)."""


def skyrl_row(row: Row, index: int = 0) -> dict[str, Any]:
    """One SkyRL dataset row from one ``generic`` row."""
    return {
        "prompt": [{"role": "user", "content": row["prompt"]}],
        "env_class": ENV_CLASS,
        "label": row["label"],
        "data_source": row.get("datasource") or "agentflow",
    }


register_row_format("skyrl", skyrl_row, rows="SkyRL rows", description="env_class: agentflow")

__all__ = ["ENV_CLASS", "skyrl_row"]
