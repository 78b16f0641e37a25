"""The viewer's ``index.html``: the summary, the plots and a filterable table of every episode.

Hooks for tests and scripts: ``table#episodes`` has one ``tr.episode`` per episode with
``data-episode-id``, ``data-run``, ``data-success`` (``1``, ``0`` or ``incomplete``) and
``data-end-reason``; the filters are ``select#filter-success``, ``#filter-end_reason`` and
``#filter-run``, preset from the query string (``index.html?success=0&end_reason=max_turns``);
``#shown`` and ``#total`` count the rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentflow_env.evaluation.text import (
    esc,
    fmt_bool,
    fmt_number,
    fmt_rate,
    shorten_text,
)
from agentflow_env.evaluation.viewer.html import FILTER_SCRIPT, page
from agentflow_env.evaluation.viewer.rows import INCOMPLETE, EpisodeRow

__all__ = ["index_page"]

QUESTION_CHARS = 110


def index_page(
    rows: Sequence[EpisodeRow],
    *,
    log_name: str,
    bad_lines: int,
    plots: Sequence[tuple[str, str]],
    summary: Mapping[str, Any] | None,
    plots_note: str | None = None,
) -> str:
    """``plots``: (file path relative to the index, alt text) of each plot to show;
    ``plots_note``: why there are none (e.g. matplotlib is not installed)."""
    runs = list(dict.fromkeys(row.run for row in rows))
    parts = [
        "<header>",
        "<h1>Trajectory report</h1>",
        f'<p class="source muted">Log: <code>{esc(log_name)}</code> &middot; '
        f"{len(rows)} episodes, {sum(not row.complete for row in rows)} incomplete"
        f"{_runs_note(runs)}</p>",
    ]
    if bad_lines:
        parts.append(
            f'<p class="banner" id="bad-lines">{bad_lines} line(s) of the log could not be read '
            "(e.g. a line torn when the run was killed) and were skipped.</p>"
        )
    parts.append("</header>")
    if summary is not None:
        parts.append(_summary_table(summary))
    if plots:
        images = "\n".join(f'<img src="{esc(src)}" alt="{esc(alt)}">' for src, alt in plots)
        parts.append(f'<section id="plots">\n<h2>Plots</h2>\n{images}\n</section>')
    elif plots_note:
        parts.append(f'<p class="banner" id="no-plots">No plots: {esc(plots_note)}</p>')
    parts.append(_filters(rows, runs))
    parts.append(
        f'<p id="count"><span id="shown">{len(rows)}</span> of '
        f'<span id="total">{len(rows)}</span> episodes</p>'
    )
    parts.append(_table(rows))
    return page("Trajectory report", "\n".join(parts), script=FILTER_SCRIPT)


def _runs_note(runs: list[str]) -> str:
    if len(runs) < 2:
        return ""
    return f", {len(runs)} runs: " + ", ".join(esc(run) for run in runs)


def _summary_table(summary: Mapping[str, Any]) -> str:
    scalars = [
        (key, value)
        for key, value in summary.items()
        if value is None or isinstance(value, str | int | float | bool)
    ]
    hidden = len(summary) - len(scalars)
    body = "\n".join(
        f'<tr><th scope="row">{esc(key)}</th><td>{esc(value)}</td></tr>' for key, value in scalars
    )
    note = (
        f'<p class="muted">{hidden} nested value(s) not shown; see the summary file.</p>'
        if hidden
        else ""
    )
    return (
        '<section id="summary">\n<h2>Run summary</h2>\n'
        f'<table class="summary">\n{body}\n</table>\n{note}</section>'
    )


def _options(values: Sequence[tuple[str, str]]) -> str:
    return "".join(
        f'<option value="{esc(value)}">{esc(shorten_text(label, 60))}</option>'
        for value, label in values
    )


def _filters(rows: Sequence[EpisodeRow], runs: list[str]) -> str:
    success = [("", "all"), ("1", "success"), ("0", "failure")]
    if any(not row.complete for row in rows):
        success.append((INCOMPLETE, INCOMPLETE))
    reasons = sorted({row.end_reason for row in rows})
    run_hidden = "" if len(runs) > 1 else " hidden"
    return (
        '<section id="filters">\n'
        f'<label>Success<select id="filter-success">{_options(success)}</select></label>\n'
        '<label>End reason<select id="filter-end_reason">'
        f"{_options([('', 'all'), *((r, r) for r in reasons)])}</select></label>\n"
        f'<label id="run-filter"{run_hidden}>Run<select id="filter-run">'
        f"{_options([('', 'all'), *((r, r) for r in runs)])}</select></label>\n"
        "</section>"
    )


HEADERS = (
    "run",
    "task id",
    "question",
    "turns",
    "success",
    "reward",
    "end reason",
    "tool-selection accuracy",
    "invalid calls",
)


def _table(rows: Sequence[EpisodeRow]) -> str:
    head = "".join(f'<th scope="col">{esc(name)}</th>' for name in HEADERS)
    body = "\n".join(_row(row) for row in rows)
    return (
        f'<table id="episodes">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n'
        "</table>"
    )


def _row(row: EpisodeRow) -> str:
    link = f"episodes/{row.page}"
    if row.success is None:
        success = f'<span class="warn">{INCOMPLETE}</span>'
    else:
        success = f'<span class="{"ok" if row.success else "bad"}">{fmt_bool(row.success)}</span>'
    task = esc(row.task_id) or "(no id)"
    cells = [
        f'<td class="run">{esc(row.run)}</td>',
        f'<td class="task-id"><a href="{esc(link)}">{task}</a></td>',
        f'<td class="question-cell" title="{esc(shorten_text(row.question, 2000))}">'
        f'<a href="{esc(link)}">{esc(shorten_text(row.question, QUESTION_CHARS))}</a></td>',
        f'<td class="turns num">{row.turns}</td>',
        f'<td class="success">{success}</td>',
        f'<td class="reward num">{esc(fmt_number(row.reward)) if row.reward is not None else ""}'
        "</td>",
        f'<td class="end-reason">{esc(row.end_reason)}</td>',
        f'<td class="tool-accuracy num">{fmt_rate(row.tool_selection_accuracy)}</td>',
        f'<td class="invalid-calls num">{row.invalid_calls}</td>',
    ]
    return (
        f'<tr class="episode" data-episode-id="{esc(row.episode.episode_id)}" '
        f'data-run="{esc(row.run)}" data-success="{row.success_state}" '
        f'data-end-reason="{esc(row.end_reason)}">' + "".join(cells) + "</tr>"
    )
