"""A static HTML report of a trajectory log, opened straight from disk (``file://``).

``write_report(log, out_dir)`` writes::

    out_dir/index.html               every episode, filterable (also from the query string)
    out_dir/episodes/<id>.html       one page per episode: task, analysis, turns, outcome
    out_dir/plots/success_by_budget.png, out_dir/plots/metrics_by_run.png

The pages hold no external reference but the plots and one another, and run no script but the
index's filter (a content security policy enforces both). Every value from the log is escaped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentflow_env.evaluation.viewer.episode import episode_page
from agentflow_env.evaluation.viewer.html import write_page
from agentflow_env.evaluation.viewer.index import index_page
from agentflow_env.evaluation.viewer.plots import (
    MissingPlotDependency,
    metrics_by_run,
    success_by_budget,
)
from agentflow_env.evaluation.viewer.rows import EpisodeRow, episode_rows
from agentflow_env.workflow.turn_log import LoggedEpisode, read_turn_log

__all__ = ["EmptyLogError", "MissingPlotDependency", "render_report", "write_report"]

PLOTS = (
    ("success_by_budget.png", "success rate by turn budget, one line per run", success_by_budget),
    ("metrics_by_run.png", "metrics by run", metrics_by_run),
)


class EmptyLogError(ValueError):
    """The log holds no episode (empty, or no line of it could be read)."""


def write_report(
    log_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    summary: Mapping[str, Any] | None = None,
) -> Path:
    """Write the report of the log at ``log_path`` into ``out_dir``; returns index.html's path.

    ``summary``: an eval run's ``summary.json`` contents; its top-level scalars are shown.
    Raises ``OSError`` if the log cannot be read and ``EmptyLogError`` if it holds no episode;
    without matplotlib the report has no plots and its index says how to get them.
    """
    log = Path(log_path)
    contents = read_turn_log(log)
    if not contents.episodes:
        note = f" ({contents.bad_lines} unreadable line(s))" if contents.bad_lines else ""
        raise EmptyLogError(f"{log} holds no episode{note}")
    return render_report(
        contents.episodes,
        out_dir,
        log_name=log.name,
        bad_lines=contents.bad_lines,
        summary=summary,
    )


def render_report(
    episodes: Sequence[LoggedEpisode],
    out_dir: str | os.PathLike[str],
    *,
    log_name: str = "",
    bad_lines: int = 0,
    summary: Mapping[str, Any] | None = None,
) -> Path:
    """``write_report`` for episodes already read; returns index.html's path."""
    out = Path(out_dir)
    rows = episode_rows(episodes)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    plots: list[tuple[str, str]] = []
    plots_note = None
    try:
        for name, alt, draw in PLOTS:
            draw(rows, out / "plots" / name)
            plots.append((f"plots/{name}", alt))
    except MissingPlotDependency as error:  # the pages are worth having without the plots
        plots, plots_note = [], str(error)
    (out / "episodes").mkdir(exist_ok=True)
    _write_episode_pages(rows, out / "episodes")
    index = out / "index.html"
    write_page(
        index,
        index_page(
            rows,
            log_name=log_name,
            bad_lines=bad_lines,
            plots=plots,
            summary=summary,
            plots_note=plots_note,
        ),
    )
    return index


def _write_episode_pages(rows: list[EpisodeRow], folder: Path) -> None:
    for i, row in enumerate(rows):
        previous = rows[i - 1] if i > 0 else None
        following = rows[i + 1] if i + 1 < len(rows) else None
        write_page(folder / row.page, episode_page(row, previous, following))
