"""verl's row format for ``agentflow-env labels --format verl`` (registered when loaded).

``{"data_source", "prompt", "agent_name", "label", "reward_model", "extra_info"}``: the chat
prompt is the question (verl only filters over-long prompts by it and logs it: the env renders the
planner's prompt itself), ``agent_name`` selects the AgentFlow agent loop, ``label`` names the
task (the loop reads it), and the env scores, so ``reward_model`` holds no ground truth.
"""

from __future__ import annotations

from typing import Any

from agentflow_env.rollout import Row, register_row_format

AGENT_NAME = "agentflow"
"""The name the AgentFlow agent loop is registered under (``agentflow_agent_loop.py``)."""


def verl_row(row: Row, index: int) -> dict[str, Any]:
    """One verl dataset row from one ``generic`` row (``index``: its place in the file)."""
    return {
        "data_source": row.get("datasource") or "agentflow",
        "prompt": [{"role": "user", "content": row["prompt"]}],
        "agent_name": AGENT_NAME,
        "label": row["label"],
        "reward_model": {"style": "agentflow-env", "ground_truth": ""},  # the env scores
        "extra_info": {"index": index},
    }


register_row_format("verl", verl_row, rows="verl rows", description="agent_name: agentflow")

__all__ = ["AGENT_NAME", "verl_row"]
