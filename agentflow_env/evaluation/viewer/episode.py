"""One viewer page per episode: the task, the initializer's analysis, every turn, the outcome.

Hooks for tests and scripts: ``section#task`` (``pre.question``, ``ul.gold-answers``),
``section#analysis``, one ``section.turn`` per turn (see ``viewer_turn``), ``#incomplete`` for
an episode without an end line, else ``section#outcome`` (``.answer``, ``.success``,
``.reward``, ``.end-reason``, ``pre.final-text``) and ``table.diagnostics`` (``tr[data-key]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentflow_env.evaluation.text import (
    as_list,
    as_mapping,
    as_text,
    esc,
    fmt_bool,
    fmt_number,
    json_text,
    shorten_text,
)
from agentflow_env.evaluation.viewer.html import page
from agentflow_env.evaluation.viewer.rows import EpisodeRow
from agentflow_env.evaluation.viewer.turn import item_list, turn_section

__all__ = ["episode_page"]


def episode_page(row: EpisodeRow, previous: EpisodeRow | None, following: EpisodeRow | None) -> str:
    episode = row.episode
    start = as_mapping(episode.start)
    task = as_mapping(start.get("task"))
    parts = [_nav(previous, following)]
    parts.append(
        f"<h1>Episode <code>{esc(episode.episode_id)}</code></h1>\n"
        f'<p class="muted">run {esc(row.run)} &middot; task {esc(row.task_id)} &middot; '
        f"env {esc(start.get('env_id')) or '?'} &middot; seed {esc(start.get('seed')) or '?'}"
        f" &middot; max turns {esc(start.get('max_turns')) or '?'} &middot; observation "
        f"{esc(start.get('observation_mode')) or '?'}</p>"
    )
    if episode.start is None:
        parts.append('<p class="banner">The log has no start line for this episode.</p>')
    if not row.complete:
        parts.append(
            '<p class="banner" id="incomplete">incomplete: the log has no end line for this '
            f"episode (the run stopped after {len(episode.turns)} logged turn(s)).</p>"
        )
    parts.append(_task(task))
    parts.append(_analysis(start))
    parts.append('<section id="turns">\n<h2>Turns</h2>')
    parts.extend(turn_section(as_mapping(turn), n) for n, turn in enumerate(episode.turns, start=1))
    if not episode.turns:
        parts.append('<p class="muted">No turn was logged.</p>')
    parts.append("</section>")
    if row.complete:
        parts.append(_outcome(as_mapping(episode.end)))
    parts.append(_nav(previous, following))
    title = f"Episode {shorten_text(row.task_id or episode.episode_id, 60)}"
    return page(title, "\n".join(parts))


def _nav(previous: EpisodeRow | None, following: EpisodeRow | None) -> str:
    links = ['<a class="back" href="../index.html">&larr; all episodes</a>']
    if previous is not None:
        links.append(f'<a class="previous" href="{esc(previous.page)}">previous episode</a>')
    if following is not None:
        links.append(f'<a class="next" href="{esc(following.page)}">next episode</a>')
    return "<nav>" + "".join(links) + "</nav>"


def _task(task: Mapping[str, Any]) -> str:
    details = ", ".join(
        f"{key} {esc(task.get(key))}" for key in ("kind", "hops", "split") if key in task
    )
    return (
        '<section id="task">\n<h2>Task</h2>\n'
        f'<pre class="question">{esc(task.get("question"))}</pre>\n'
        f"<h3>Gold answers</h3>\n{item_list(task.get('gold_answers'), 'gold-answers')}\n"
        f'<p class="muted">{details}</p>\n</section>'
    )


def _analysis(start: Mapping[str, Any]) -> str:
    analysis = as_mapping(start.get("analysis"))
    error = start.get("initializer_error")
    error_html = (
        f'<p class="bad initializer-error">Initializer error: {esc(error)}</p>\n' if error else ""
    )
    return (
        '<section id="analysis">\n<h2>Initializer analysis</h2>\n'
        f"{error_html}<dl>\n"
        f'<dt>objective</dt><dd class="objective">{esc(analysis.get("objective"))}</dd>\n'
        f"<dt>constraints</dt><dd>{item_list(analysis.get('constraints'), 'constraints')}</dd>\n"
        f"<dt>sub-questions</dt><dd>{item_list(analysis.get('sub_questions'), 'sub-questions')}</dd>\n"
        f"<dt>tools</dt><dd>{item_list(analysis.get('tools'), 'analysis-tools')}</dd>\n"
        f"<dt>tools available</dt><dd>{item_list(start.get('tools'), 'available-tools')}</dd>\n"
        "</dl>\n</section>"
    )


def _outcome(end: Mapping[str, Any]) -> str:
    success = end.get("success")
    css = "ok" if success is True else "bad"
    errors = as_list(end.get("module_errors"))
    errors_html = f"<h3>Module errors</h3>{item_list(errors, 'module-errors')}\n" if errors else ""
    return (
        '<section id="outcome">\n<h2>Outcome</h2>\n<dl>\n'
        f'<dt>answer</dt><dd class="answer">{esc(end.get("answer"))}</dd>\n'
        f"<dt>gold answers</dt><dd>{esc(', '.join(as_text(a) for a in as_list(end.get('gold_answers'))))}</dd>\n"
        f'<dt>success</dt><dd class="success {css}">{esc(fmt_bool(success))}</dd>\n'
        f'<dt>score</dt><dd class="score">{esc(fmt_number(end.get("score")))}</dd>\n'
        f'<dt>reward</dt><dd class="reward">{esc(fmt_number(end.get("reward")))}</dd>\n'
        f'<dt>end reason</dt><dd class="end-reason">{esc(end.get("end_reason"))}</dd>\n'
        f'<dt>turns</dt><dd class="turns">{esc(end.get("turns"))}</dd>\n'
        "</dl>\n"
        f'<h3>Final text</h3>\n<pre class="final-text">{esc(end.get("final_text"))}</pre>\n'
        f"{errors_html}"
        f"<h3>Diagnostics</h3>\n{_diagnostics(as_mapping(end.get('diagnostics')))}\n"
        f"<h3>Metrics</h3>\n{_scalar_table(as_mapping(end.get('metrics')), 'metrics')}\n"
        "</section>"
    )


def _diagnostics(diagnostics: Mapping[str, Any]) -> str:
    if not diagnostics:
        return '<p class="muted">No diagnostics in the log.</p>'
    rows = []
    for key, value in diagnostics.items():
        if key in ("modules", "tools") and isinstance(value, Mapping):
            cell = _nested_table(value)
        elif key == "success_by_budget" and isinstance(value, list):
            cell = esc(" ".join(f"{b}:{'yes' if ok else 'no'}" for b, ok in enumerate(value, 1)))
        elif isinstance(value, Mapping | list):
            cell = f"<pre>{esc(json_text(value))}</pre>"
        else:
            cell = esc(fmt_bool(value) if isinstance(value, bool) else fmt_number(value))
        rows.append(
            f'<tr data-key="{esc(key)}"><th scope="row">{esc(key)}</th><td>{cell}</td></tr>'
        )
    return '<table class="diagnostics">\n' + "\n".join(rows) + "\n</table>"


def _nested_table(table: Mapping[str, Any]) -> str:
    columns = list(dict.fromkeys(key for row in table.values() for key in as_mapping(row)))
    head = "<th></th>" + "".join(f"<th>{esc(column)}</th>" for column in columns)
    body = "".join(
        f"<tr><th scope='row'>{esc(name)}</th>"
        + "".join(
            f"<td class='num'>{esc(fmt_number(as_mapping(row).get(c)))}</td>" for c in columns
        )
        + "</tr>"
        for name, row in table.items()
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _scalar_table(values: Mapping[str, Any], css: str) -> str:
    if not values:
        return '<p class="muted">none</p>'
    rows = "".join(
        f"<tr><th scope='row'>{esc(key)}</th><td>{esc(_cell(value))}</td></tr>"
        for key, value in values.items()
    )
    return f'<table class="{css}">{rows}</table>'


def _cell(value: Any) -> str:
    if isinstance(value, Mapping | list):
        return json_text(value)
    return fmt_number(value)
