"""Ablations: the same planner and tasks under named env variants, one results table.

A variant is a name and env settings laid over the base options, so every setting the env has
is an ablation axis: ``{"observation_mode": "flat"}``, ``{"max_turns": 3}``, a tool removed
(``{"tools": ["Search"]}``), renamed, perturbed or added only at evaluation time
(``{"tools": [{"name": "Search", "rename": "Lookup"}, "Calculator"]}``,
``{"tools": [{"name": "Search", "failure_rate": 0.3}]}``), a reward setting, or LLM modules
(``{"modules": {"verifier": "llm"}}``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentflow_env.evaluation.metrics import format_table
from agentflow_env.evaluation.output import write_json
from agentflow_env.evaluation.plots import MissingPlotDependency, summary_bars

__all__ = ["parse_variant", "write_ablation_results"]


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME=JSON`` (a JSON object of env settings; ``NAME`` alone means no change)."""
    name, _, settings = text.partition("=")
    name = name.strip()
    if not name:
        raise ValueError(f'{text!r}: give NAME=JSON, e.g. flat=\'{{"observation_mode": "flat"}}\'')
    if not settings.strip():
        return name, {}
    try:
        parsed = json.loads(settings)
    except json.JSONDecodeError as error:
        raise ValueError(f"{name}: the settings are not JSON ({error.msg})") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"{name}: the settings must be a JSON object of env settings")
    return name, parsed


def write_ablation_results(
    folder: Path,
    summaries: Mapping[str, Mapping[str, Any]],
    variants: Mapping[str, Mapping[str, Any]],
    *,
    planner: str,
    env_id: str,
) -> dict[str, Path]:
    """``results.md`` (the table), ``results.json`` (variants, settings, summaries) and
    ``ablation.png``; returns what was written. Without matplotlib the plot is left out."""
    written = {"table": folder / "results.md", "json": folder / "results.json"}
    header = (
        f"# Ablation: {planner} planner on {env_id}\n\n"
        "Each cell: value [95% CI] (n = episodes, or calls for per-call rates).\n\n"
    )
    settings = "\n".join(
        f"- `{name}`: `{json.dumps(variants.get(name, {}), sort_keys=True)}`" for name in summaries
    )
    written["table"].write_text(
        header + format_table(summaries, markdown=True) + "\n\n## Variants\n\n" + settings + "\n",
        "utf-8",
    )
    write_json(
        written["json"],
        {
            "planner": planner,
            "env": env_id,
            "variants": {name: dict(variants.get(name, {})) for name in summaries},
            "summaries": dict(summaries),
        },
    )
    try:
        summary_bars(summaries, folder / "ablation.png", title=f"Ablation: {planner} on {env_id}")
        written["plot"] = folder / "ablation.png"
    except MissingPlotDependency:
        pass
    return written
