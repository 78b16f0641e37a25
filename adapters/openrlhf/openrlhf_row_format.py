"""OpenRLHF's row format for ``agentflow-env labels --format openrlhf`` (registered when loaded).

The ``generic`` rows as they are, ``{"prompt", "label", "datasource"}``: train with
``--data.input_key prompt --data.label_key label`` and no chat template (``agent_func.py`` reads
the label; the prompt is the question, for logs only).
"""

from __future__ import annotations

from typing import Any

from agentflow_env.rollout import Row, register_row_format


def openrlhf_row(row: Row, index: int = 0) -> dict[str, Any]:
    """One OpenRLHF row: the ``generic`` row as it is."""
    return dict(row)


register_row_format("openrlhf", openrlhf_row, rows="prompts", description="prompt, label")

__all__ = ["openrlhf_row"]
