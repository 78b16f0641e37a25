"""Metrics over many episodes, with 95% confidence intervals, from per-episode diagnostics.

Each episode's diagnostics come from ``agentflow_env.workflow.diagnostics`` (the env's final
``info["diagnostics"]`` or a trajectory log's ``episode_end`` line). Here they are pooled:

- a per-episode proportion (success, premature stops, success after a failure, success at each
  turn budget) gets a Wilson score interval;
- a per-call rate pooled over episodes (tool-selection accuracy, invalid-call, recovery and
  redundant-call rates: sum of hits over sum of chances) and a mean (score, reward, turns) get a
  percentile bootstrap interval that resamples whole episodes (calls of one episode are not
  independent), 1000 resamples with a fixed seed so a summary is reproducible.

``docs/metrics.md`` defines every metric.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "Estimate",
    "RATE_METRICS",
    "clean_diagnostics",
    "format_table",
    "summarize_diagnostics",
    "wilson_interval",
]

Estimate = dict[str, Any]
"""``{"value", "low", "high", "n"}``: a point estimate, its 95% interval and what it counts
(episodes, or calls for a pooled rate); value and bounds are ``None`` when ``n`` is 0."""

Z95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 1000

RATE_METRICS: dict[str, tuple[str, str]] = {
    "tool_selection_accuracy": ("tool_choices_right", "tool_choices_scored"),
    "invalid_call_rate": ("invalid_calls", "turns"),
    "recovery_rate": ("recovered", "failures"),
    "redundant_call_rate": ("redundant_calls", "tool_calls"),
}
"""Pooled per-call rates: name -> (numerator key, denominator key) of the diagnostics."""

MEAN_METRICS = ("score", "reward", "turns")
NO_FALLBACK_SCORE = "score_without_choice_fallback"
"""The judge's score without its choice fallback (``choice_fallback``), in the diagnostics of an
episode where the fallback decided the score; the summary reports its mean where it differs."""


def wilson_interval(successes: float, n: int) -> tuple[float | None, float | None]:
    """The 95% Wilson score interval of a proportion (``None`` bounds when ``n`` is 0)."""
    if n <= 0:
        return None, None
    p = successes / n
    denominator = 1 + Z95**2 / n
    centre = (p + Z95**2 / (2 * n)) / denominator
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def _proportion(flags: Sequence[bool]) -> Estimate:
    n = len(flags)
    low, high = wilson_interval(sum(flags), n)
    return {"value": sum(flags) / n if n else None, "low": low, "high": high, "n": n}


def _bootstrap(
    rows: Sequence[Mapping[str, Any]],
    statistic: Callable[[Sequence[Mapping[str, Any]]], float | None],
) -> tuple[float | None, float | None]:
    if len(rows) < 2:
        return None, None
    rng = np.random.default_rng(0)
    values = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        sample = [rows[i] for i in rng.integers(0, len(rows), size=len(rows))]
        value = statistic(sample)
        if value is not None:
            values.append(value)
    if not values:
        return None, None
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def _pooled_rate(rows: Sequence[Mapping[str, Any]], numerator: str, denominator: str) -> Estimate:
    def rate(sample: Sequence[Mapping[str, Any]]) -> float | None:
        whole = sum(float(r.get(denominator) or 0) for r in sample)
        return sum(float(r.get(numerator) or 0) for r in sample) / whole if whole else None

    chances = int(sum(float(r.get(denominator) or 0) for r in rows))
    low, high = _bootstrap([r for r in rows if r.get(denominator)], rate)
    return {"value": rate(rows), "low": low, "high": high, "n": chances}


def _mean(rows: Sequence[Mapping[str, Any]], key: str) -> Estimate:
    def mean(sample: Sequence[Mapping[str, Any]]) -> float | None:
        return sum(float(r[key]) for r in sample) / len(sample) if sample else None

    present = [r for r in rows if isinstance(r.get(key), int | float)]
    low, high = _bootstrap(present, mean)
    return {"value": mean(present), "low": low, "high": high, "n": len(present)}


def _usage(rows: Sequence[Mapping[str, Any]], key: str) -> dict[str, dict[str, float]]:
    """Per module or tool: calls, errors and tokens per episode, latency per call."""
    totals: dict[str, Counter[str]] = {}
    for row in rows:
        for name, counts in (row.get(key) or {}).items():
            totals.setdefault(name, Counter()).update(
                {k: float(v) for k, v in counts.items() if isinstance(v, int | float)}
            )
    episodes = max(len(rows), 1)
    table: dict[str, dict[str, float]] = {}
    for name, counts in sorted(totals.items()):
        calls = counts.get("calls", 0.0)
        entry = {
            "calls_per_episode": calls / episodes,
            "latency_s_per_call": counts.get("latency_s", 0.0) / calls if calls else 0.0,
        }
        if "errors" in counts:
            entry["error_rate"] = counts["errors"] / calls if calls else 0.0
        for tokens in ("prompt_tokens", "completion_tokens"):
            if tokens in counts:
                entry[f"{tokens}_per_episode"] = counts[tokens] / episodes
        table[name] = entry
    return table


_COUNTS = {key for pair in RATE_METRICS.values() for key in pair} | {
    "failures",
    NO_FALLBACK_SCORE,
    *MEAN_METRICS,
}


def clean_diagnostics(raw: Any) -> dict[str, Any]:
    """Diagnostics read from a file nobody checked (a trajectory log), made safe to summarise:
    numbers stay numbers, flags stay flags, anything of the wrong type is dropped."""
    if not isinstance(raw, Mapping):
        return {}
    clean: dict[str, Any] = {}
    for key in _COUNTS:
        value = raw.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            clean[key] = value
    for key in ("success", "verifier_stop", "planner_stop", "premature_stop"):
        if isinstance(raw.get(key), bool):
            clean[key] = raw[key]
    for key in ("end_reason", "analysis_format"):
        if isinstance(raw.get(key), str):
            clean[key] = raw[key]
    budget = raw.get("success_by_budget")
    if isinstance(budget, list) and budget and all(isinstance(b, bool) for b in budget):
        clean["success_by_budget"] = budget
    for key in ("modules", "tools"):
        table = raw.get(key)
        if isinstance(table, Mapping):
            clean[key] = {
                str(name): {
                    k: v
                    for k, v in counts.items()
                    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                }
                for name, counts in table.items()
                if isinstance(counts, Mapping)
            }
    return clean


def _premature_rate(stopped: Sequence[Mapping[str, Any]]) -> Estimate:
    """Premature stops over the episodes that ended on a stop the evidence reader judged."""
    return _proportion([bool(r["premature_stop"]) for r in stopped])


def summarize_diagnostics(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every aggregate metric over the episodes whose diagnostics are ``rows``."""
    rows = list(rows)
    judged = [r for r in rows if r.get("premature_stop") is not None]
    by_verifier = [r for r in judged if r.get("verifier_stop")]
    by_planner = [r for r in judged if r.get("planner_stop")]
    failed = [r for r in rows if r.get("failures")]
    summary: dict[str, Any] = {
        "episodes": len(rows),
        "success_rate": _proportion([bool(r.get("success")) for r in rows]),
        **{key: _mean(rows, key) for key in MEAN_METRICS},
        **{name: _pooled_rate(rows, *keys) for name, keys in RATE_METRICS.items()},
        "premature_stop_rate": _premature_rate([*by_verifier, *by_planner]),
        "premature_verifier_stop_rate": _premature_rate(by_verifier),
        "premature_planner_stop_rate": _premature_rate(by_planner),
        "success_after_failure": _proportion([bool(r.get("success")) for r in failed]),
        "end_reasons": dict(Counter(str(r.get("end_reason")) for r in rows)),
        "modules": _usage(rows, "modules"),
        "tools": _usage(rows, "tools"),
    }
    summary.update(_agentflow_calls(rows, summary["score"]))
    curves = [r["success_by_budget"] for r in rows if r.get("success_by_budget")]
    if curves:
        longest = max(len(c) for c in curves)
        summary["success_by_budget"] = [
            _proportion([bool(c[min(b, len(c) - 1)]) for c in curves]) for b in range(longest)
        ]
    return summary


def _agentflow_calls(rows: Sequence[Mapping[str, Any]], score: Estimate) -> dict[str, Any]:
    """The mean score without the judge's choice fallback, where that differs from the mean
    score; how the query analyses were asked for, where any episode says."""
    found: dict[str, Any] = {}
    if any(NO_FALLBACK_SCORE in r for r in rows):
        strict = [
            {NO_FALLBACK_SCORE: r.get(NO_FALLBACK_SCORE, r["score"])}
            for r in rows
            if isinstance(r.get("score"), int | float)
        ]
        estimate = _mean(strict, NO_FALLBACK_SCORE)
        if estimate["value"] != score.get("value"):
            found[NO_FALLBACK_SCORE] = estimate
    formats = Counter(str(r["analysis_format"]) for r in rows if r.get("analysis_format"))
    if formats:
        found["analysis_formats"] = dict(formats)
    return found


TABLE_ROWS = (
    ("success_rate", "success rate", True),
    ("score", "mean score", False),
    ("reward", "mean reward", False),
    ("turns", "mean turns", False),
    ("tool_selection_accuracy", "tool-selection accuracy", True),
    ("invalid_call_rate", "invalid-call rate", True),
    ("recovery_rate", "recovery rate", True),
    ("success_after_failure", "success after a failure", True),
    ("premature_stop_rate", "premature-stop rate", True),
    ("redundant_call_rate", "redundant-call rate", True),
)


def format_estimate(estimate: Mapping[str, Any], percent: bool) -> str:
    """``71.2% [66.0, 76.0]`` (or ``2.40 [2.31, 2.52]``); ``n/a`` without data."""
    value = estimate.get("value")
    if value is None:
        return "n/a"
    scale, unit, digits = (100.0, "%", 1) if percent else (1.0, "", 2)
    text = f"{value * scale:.{digits}f}{unit}"
    if estimate.get("low") is not None and estimate.get("high") is not None:
        text += f" [{estimate['low'] * scale:.{digits}f}, {estimate['high'] * scale:.{digits}f}]"
    return text


def format_table(summaries: Mapping[str, Mapping[str, Any]], *, markdown: bool = False) -> str:
    """One column per run (a name -> ``summarize_diagnostics`` result), one row per metric,
    each cell ``value [95% CI]``; ``n`` is what the estimate counts."""
    names = list(summaries)
    header = ["metric", *names]
    body = [["episodes", *(str(summaries[n]["episodes"]) for n in names)]]
    for key, label, percent in TABLE_ROWS:
        cells = []
        for name in names:
            estimate = summaries[name].get(key) or {}
            cells.append(f"{format_estimate(estimate, percent)} (n={estimate.get('n', 0)})")
        body.append([label, *cells])
    if any(NO_FALLBACK_SCORE in summaries[name] for name in names):
        cells = []
        for name in names:
            estimate = summaries[name].get(NO_FALLBACK_SCORE) or summaries[name].get("score") or {}
            cells.append(f"{format_estimate(estimate, False)} (n={estimate.get('n', 0)})")
        body.append(["mean score without the choice fallback", *cells])
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *body]
    ]
    return "\n".join(line.rstrip() for line in lines)
