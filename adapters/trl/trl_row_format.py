"""TRL's row format for ``agentflow-env labels --format trl`` (registered when loaded).

``{"prompt"}``, the label itself: TRL hands the prompts to ``rollout_func``, which reads each as a
label (``rollout.py``).
"""

from __future__ import annotations

from typing import Any

from agentflow_env.rollout import Row, register_row_format


def trl_row(row: Row, index: int = 0) -> dict[str, Any]:
    """One TRL dataset row from one ``generic`` row: the label is the prompt."""
    return {"prompt": row["label"]}


register_row_format("trl", trl_row, rows="TRL prompts", description="the label as the prompt")

__all__ = ["trl_row"]
