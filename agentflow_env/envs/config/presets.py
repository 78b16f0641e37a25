"""Named presets: settings that reproduce another setup, applied under the settings given.

``preset="agentflow_eval"`` and ``"agentflow_train"`` reproduce AgentFlow's own pipeline so a
planner trained with its code meets the prompts, tools and memory it knows: AgentFlow's prompt
format (``prompt_style="agentflow"``), the five tools its planner is shown, under their names
and in its order (``AGENTFLOW_TOOLS``), matched and answering as there, LLM frozen modules, no
task hints (``show_sub_questions=False``), the verifier judging every turn, and AgentFlow's
limits: 2048 tokens per planner turn and 120 s per tool call (its executor's limit; a tool's own
timeout may be shorter), each string of a tool's result cut at 100,000 characters, its Wikipedia
tool's result as its published code returns it, 10 steps and 300 s per query and its scoring
script's reading of a multiple-choice answer that names no option (the first option) when
evaluating; 3 steps, a 500 s limit, an
LLM judge as reward and the ``<answer>`` instruction on each dataset question when training. A
setting given beside the preset wins over it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from agentflow_env.tools.agentflow.names import AGENTFLOW_TOOLS

Preset = Literal["agentflow_eval", "agentflow_train"]

_AGENTFLOW: dict[str, Any] = {
    "prompt_style": "agentflow",
    "show_sub_questions": False,
    "verify_invalid_turns": True,
    "tools": AGENTFLOW_TOOLS,
    "modules": "llm",
    "max_action_tokens": 2048,
    "tool_timeout_s": 120.0,
    "max_tool_output_chars": 100_000,  # its scripts' cut of each string in a result
    "agentflow_wikipedia": "as_run",  # what its published Wikipedia tool returns
}
PRESETS: dict[str, dict[str, Any]] = {
    "agentflow_eval": {
        **_AGENTFLOW,
        "agentflow_script": "eval",
        "choice_fallback": "agentflow",  # its scoring script: no option named counts as A
        "max_turns": 10,
        "time_limit_s": 300.0,
    },
    "agentflow_train": {
        **_AGENTFLOW,
        "agentflow_script": "train",
        "max_turns": 3,
        "time_limit_s": 500.0,
        "reward": "llm_judge",
    },
}
"""Preset name -> the settings it stands for."""


def with_preset(settings: Mapping[str, Any], own: set[str]) -> dict[str, Any]:
    """``settings`` with its preset's values filled in where not given (only settings in
    ``own``, the variant's own; the ``<answer>`` instruction only when a dataset is given)."""
    name = settings.get("preset")
    if name is None:
        return dict(settings)
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)} or None, got {name!r:.80}")
    values = dict(PRESETS[name])
    if name == "agentflow_train" and settings.get("dataset") is not None:
        values["answer_tag_suffix"] = True
    filled = {k: v for k, v in values.items() if k in own and k not in settings}
    return {**filled, **settings}
