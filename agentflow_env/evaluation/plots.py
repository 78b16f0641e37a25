"""Plots of evaluation summaries, drawn with matplotlib's Agg canvas (no display, no pyplot).

matplotlib is an optional dependency (``pip install 'agentflow-env[eval]'``): it is imported
when a figure is made, and its absence is a ``MissingPlotDependency`` saying how to install it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentflow_env.evaluation.text import shorten_text

__all__ = [
    "INSTALL_HINT",
    "SUMMARY_BARS",
    "MissingPlotDependency",
    "new_figure",
    "plots_available",
    "summary_bars",
]

INSTALL_HINT = "pip install 'agentflow-env[eval]'"

SUMMARY_BARS: tuple[tuple[str, str], ...] = (
    ("success_rate", "success rate"),
    ("tool_selection_accuracy", "tool-selection accuracy"),
    ("invalid_call_rate", "invalid-call rate"),
    ("redundant_call_rate", "redundant-call rate"),
    ("recovery_rate", "recovery rate"),
    ("premature_stop_rate", "premature-stop rate"),
)
"""The rates a bar plot shows, in order: summary key and label."""


class MissingPlotDependency(ImportError):
    """matplotlib is not installed."""


def plots_available() -> bool:
    """Whether matplotlib can be imported (without importing it)."""
    return importlib.util.find_spec("matplotlib") is not None


def new_figure(width: float, height: float) -> Any:
    """A matplotlib ``Figure`` on an Agg canvas (thread-safe: no global pyplot state)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise MissingPlotDependency(
            f"plots are drawn with matplotlib, which is not installed: {INSTALL_HINT}"
        ) from error
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def plot_label(text: Any, limit: int = 40) -> str:
    """A run name as a plot label: one short line, no mathtext (``$``)."""
    return shorten_text(text, limit).replace("$", r"\$")


def summary_bars(
    summaries: Mapping[str, Mapping[str, Any]], path: Path, title: str = "Metrics by run"
) -> None:
    """Grouped bars, one group per run, one bar per rate of ``SUMMARY_BARS`` with its 95%
    interval as an error bar; a rate with no data is drawn empty and labelled n/a."""
    runs = list(summaries)
    figure = new_figure(max(6.4, 1.8 * len(runs) + 3), 4.4)
    axes = figure.subplots()
    width = 0.8 / len(SUMMARY_BARS)
    for i, (key, name) in enumerate(SUMMARY_BARS):
        offsets = [r + (i - (len(SUMMARY_BARS) - 1) / 2) * width for r in range(len(runs))]
        estimates = [summaries[run].get(key) or {} for run in runs]
        heights = [100 * (e.get("value") or 0.0) for e in estimates]
        below = [
            max(0.0, h - 100 * e["low"]) if e.get("low") is not None else 0
            for h, e in zip(heights, estimates, strict=True)
        ]
        above = [
            max(0.0, 100 * e["high"] - h) if e.get("high") is not None else 0
            for h, e in zip(heights, estimates, strict=True)
        ]
        bars = axes.bar(offsets, heights, width, label=name, yerr=[below, above], capsize=2)
        labels = [
            "n/a" if e.get("value") is None else f"{h:.0f}"
            for e, h in zip(estimates, heights, strict=True)
        ]
        axes.bar_label(bars, labels=labels, fontsize=7, padding=1)
    axes.set_xticks(range(len(runs)), [plot_label(run) for run in runs])
    axes.set_ylabel("% (error bars: 95% CI)")
    axes.set_ylim(0, 110)
    axes.set_title(title, fontsize=10)
    figure.legend(fontsize=8, ncols=3, loc="outside lower center")
    axes.grid(axis="y", alpha=0.3)
    figure.savefig(path)
