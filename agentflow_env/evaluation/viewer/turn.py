"""One turn of an episode page: the plan, the tool call and its result, the verifier's verdict.

Hooks: ``section.turn`` with ``data-turn`` and ``data-verdict``, holding ``.verdict``,
``.justification``, ``.context``, ``.sub-goal``, ``.plan-tool``, ``.call`` (``.tool``,
``pre.arguments``, ``pre.result``), ``ul.open-questions``, ``ul.errors``, ``.expected-tool``
(``data-match``: ``true``, ``false``, or empty when the task does not know the right tool),
``.latency`` and ``pre.action-text`` (the planner's raw action).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentflow_env.evaluation.text import (
    as_list,
    as_mapping,
    as_text,
    esc,
    fmt_number,
    json_text,
)
from agentflow_env.evaluation.viewer.rows import chosen_tool

__all__ = ["item_list", "turn_section"]

VERDICT_CLASS = {"STOP": "ok", "INVALID": "warn", "ERROR": "bad"}


def item_list(values: Any, css: str) -> str:
    """A ``ul.css`` of the values (always present, as a hook), and "none" when empty."""
    items = as_list(values)
    if not items:
        return f'<ul class="{css}"></ul><span class="muted">none</span>'
    return f'<ul class="{css}">' + "".join(f"<li>{esc(item)}</li>" for item in items) + "</ul>"


def turn_section(turn: Mapping[str, Any], position: int) -> str:
    """``position``: the turn's place in the log, its number when the line lacks one."""
    number = esc(turn.get("turn", position))
    verdict = as_text(turn.get("verification"))
    return (
        f'<section class="turn" id="turn-{number}" data-turn="{number}" '
        f'data-verdict="{esc(verdict)}">\n'
        f'<h3>Turn {number} &middot; <span class="verdict {VERDICT_CLASS.get(verdict, "")}">'
        f"{esc(verdict) or '?'}</span></h3>\n"
        f"{_plan(as_mapping(turn.get('plan')))}\n{_call(turn)}\n{_action(turn)}\n"
        "</section>"
    )


def _plan(plan: Mapping[str, Any]) -> str:
    fields = (
        ("justification", "justification"),
        ("context", "context"),
        ("sub-goal", "sub_goal"),
        ("tool chosen", "tool_name"),
    )
    rows = "".join(
        f'<dt>{name}</dt><dd class="{"plan-tool" if key == "tool_name" else name}">'
        f"{esc(plan.get(key))}</dd>\n"
        for name, key in fields
    )
    return f'<dl class="plan">\n{rows}</dl>'


def _call(turn: Mapping[str, Any]) -> str:
    ran = turn.get("tool")
    state = ""
    if ran is not None:
        ok = turn.get("tool_ok")
        state = ' <span class="ok">ok</span>' if ok else ' <span class="bad">failed</span>'
    if turn.get("redundant"):
        state += ' <span class="warn">redundant: the same call as an earlier turn</span>'
    result = as_text(turn.get("result"))
    size = f"{len(result)} characters" if result else "no output"
    return (
        '<dl class="call">\n'
        f'<dt>tool call</dt><dd><code class="tool">{esc(ran) or "(none ran)"}</code>{state}</dd>\n'
        f'<dt>arguments</dt><dd><pre class="arguments">{esc(json_text(turn.get("arguments", {})))}'
        "</pre></dd>\n"
        f'<dt>result</dt><dd><pre class="result">{esc(result)}</pre>'
        f'<span class="muted">{size}</span></dd>\n'
        f"<dt>open questions</dt><dd>{item_list(turn.get('open_questions'), 'open-questions')}</dd>\n"
        f"<dt>errors</dt><dd>{item_list(turn.get('errors'), 'errors')}</dd>\n"
        f"<dt>expected tool</dt>{_expected(turn)}\n"
        f'<dt>latency</dt><dd class="latency">{_latency(turn.get("latency_s"))}</dd>\n'
        "</dl>"
    )


def _expected(turn: Mapping[str, Any]) -> str:
    expected = turn.get("expected_tool")
    if expected is None:
        return '<dd class="expected-tool" data-match=""><span class="muted">unknown</span></dd>'
    chosen = chosen_tool(turn)
    if turn.get("chose_expected_tool") is True:  # the session's verdict (workflow.diagnostics)
        verdict, note = "true", '<span class="ok">matched</span>'
    else:
        verdict, note = "false", f'<span class="bad">differs: chose {esc(chosen) or "none"}</span>'
    return (
        f'<dd class="expected-tool" data-match="{verdict}"><code>{esc(expected)}</code> {note}</dd>'
    )


def _latency(value: Any) -> str:
    latency = as_mapping(value)
    if not latency:
        return '<span class="muted">not recorded</span>'
    return " &middot; ".join(f"{esc(name)} {esc(fmt_number(s))} s" for name, s in latency.items())


def _action(turn: Mapping[str, Any]) -> str:
    action = as_mapping(turn.get("action"))
    notes = [
        f"prompt {esc(turn.get('prompt_tokens'))} tokens",
        f"action {esc(turn.get('action_tokens'))} tokens",
    ]
    if action.get("given_as_ids"):
        notes.append("given as token ids")
    if action.get("cut"):
        notes.append('<span class="warn">cut at the token limit</span>')
    return (
        f'<details class="action"><summary>planner action ({", ".join(notes)})</summary>'
        f'<pre class="action-text">{esc(action.get("text"))}</pre></details>'
    )
