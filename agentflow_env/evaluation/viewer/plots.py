"""The viewer's PNG plots, drawn with matplotlib's Agg canvas (``agentflow_env.evaluation.plots``).

Both plots count complete episodes only: an incomplete one has no outcome. The rates of a run
are those ``summarize_diagnostics`` pools from its episodes' diagnostics (the same numbers
``eval`` prints), with their 95% intervals as error bars.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentflow_env.evaluation.metrics import clean_diagnostics, summarize_diagnostics
from agentflow_env.evaluation.plots import (
    MissingPlotDependency,
    new_figure,
    plot_label,
    summary_bars,
)
from agentflow_env.evaluation.text import as_mapping
from agentflow_env.evaluation.viewer.rows import EpisodeRow

__all__ = [
    "MissingPlotDependency",
    "budget_curves",
    "metrics_by_run",
    "run_summaries",
    "success_by_budget",
]

MAX_BUDGET = 200
"""The budget axis's end at most (a log's ``max_turns`` is untrusted: it could be huge)."""


def _by_run(rows: Sequence[EpisodeRow]) -> dict[str, list[EpisodeRow]]:
    runs: dict[str, list[EpisodeRow]] = {}
    for row in rows:
        runs.setdefault(row.run, [])
        if row.complete:
            runs[row.run].append(row)
    return runs


def budget_curves(rows: Sequence[EpisodeRow]) -> tuple[dict[str, list[float]], bool]:
    """Per run, the success rate at each turn budget b = 1..max; and whether every complete
    episode's ``diagnostics.success_by_budget`` gave it (else: succeeded within b turns)."""
    complete = [row for row in rows if row.complete]
    exact = bool(complete) and all(row.success_by_budget for row in complete)
    longest = max(
        (max(row.max_turns or 0, row.turns, len(row.success_by_budget or ())) for row in complete),
        default=0,
    )
    longest = min(longest, MAX_BUDGET)
    curves: dict[str, list[float]] = {}
    for run, episodes in _by_run(rows).items():
        if not episodes:
            continue
        curve = []
        for budget in range(1, longest + 1):
            wins = sum(_succeeds_within(row, budget, exact) for row in episodes)
            curve.append(wins / len(episodes))
        curves[run] = curve
    return curves, exact


def _succeeds_within(row: EpisodeRow, budget: int, exact: bool) -> bool:
    if exact and row.success_by_budget:
        flags = row.success_by_budget
        return flags[min(budget, len(flags)) - 1]  # past its own max: as at its last turn
    return bool(row.success) and row.turns <= budget


def run_summaries(rows: Sequence[EpisodeRow]) -> dict[str, dict[str, Any]]:
    """Per run, ``summarize_diagnostics`` over its complete episodes' (cleaned) diagnostics."""
    return {
        run: summarize_diagnostics(
            [clean_diagnostics(as_mapping(row.episode.end).get("diagnostics")) for row in episodes]
        )
        for run, episodes in _by_run(rows).items()
    }


def success_by_budget(rows: Sequence[EpisodeRow], path: Path) -> None:
    figure = new_figure(6.4, 4.2)
    axes = figure.subplots()
    curves, exact = budget_curves(rows)
    for i, (run, curve) in enumerate(curves.items()):
        budgets = list(range(1, len(curve) + 1))
        axes.plot(  # markers and dashes vary, so runs with equal curves stay distinguishable
            budgets,
            [100 * v for v in curve],
            marker="os^vDP*X"[i % 8],
            linestyle=("-", "--", ":", "-.")[i % 4],
            label=plot_label(run),
        )
    source = (
        "from diagnostics.success_by_budget" if exact else "estimated: succeeded within b turns"
    )
    axes.set_title(f"Success rate by turn budget ({source})", fontsize=10)
    axes.set_xlabel("turn budget b")
    axes.set_ylabel("success rate (%)")
    axes.set_ylim(-2, 102)
    if curves:
        axes.legend(fontsize=8)
        axes.xaxis.get_major_locator().set_params(integer=True)
    else:
        axes.text(0.5, 0.5, "no complete episode", ha="center", transform=axes.transAxes)
    axes.grid(alpha=0.3)
    figure.savefig(path)


def metrics_by_run(rows: Sequence[EpisodeRow], path: Path) -> None:
    summary_bars(run_summaries(rows), path)
