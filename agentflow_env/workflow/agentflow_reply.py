"""The planner's reply read by AgentFlow's rules (``SessionConfig.agentflow_script`` set).

This project's own reader (``actions.parse_planner_action``) forgives a lot: markdown, key
variants, a name in backticks, a trailing period. AgentFlow's planner forgives little, and a
planner trained here must not learn a looseness that AgentFlow's evaluation punishes. So under
AgentFlow's scripts the reply is read as AgentFlow reads it (reimplemented from its behaviour,
with plain string scanning, linear in the length of the reply):

- A reply that is, as a whole, a JSON object whose ``justification``, ``context``,
  ``sub_goal`` and ``tool_name`` are all strings is taken from those keys (each stripped).
- Otherwise every ``**`` is removed from the reply, and the last of its ``Context:`` ...
  ``Sub-Goal:`` ... ``Tool Name:`` runs (labels spelt exactly so, in that order) gives the
  fields. A field runs up to the next label, so with numbered labels the next label's number
  stays on the field before it. The tool name runs up to the first blank line or the end of the
  reply (a closing code fence before either is dropped); it is compared as written.
- With no such run the reply names no tool: AgentFlow records neither tool nor sub-goal.

The name is then matched as AgentFlow's planner matches it (``match_agentflow_tool``); one that
matches nothing is recorded as AgentFlow's unknown-tool text and runs no tool.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

from agentflow_env.workflow.actions import (
    ActionParseError,
    PlannerAction,
    is_finish,
    parse_planner_action,
)

__all__ = ["AgentFlowStep", "parse_agentflow_action", "read_agentflow_step"]

_CONTEXT = "Context:"
_SUB_GOAL = "Sub-Goal:"
_TOOL_NAME = "Tool Name:"
_FENCE = "```"
_JSON_KEYS = ("justification", "context", "sub_goal", "tool_name")


@dataclass(frozen=True)
class AgentFlowStep:
    """What AgentFlow's planner takes from a reply: ``None`` when it could read none."""

    justification: str
    context: str
    sub_goal: str
    tool_name: str
    """As written (``match_agentflow_tool`` decides whether it names a tool)."""


def read_agentflow_step(text: str) -> AgentFlowStep | None:
    """The fields AgentFlow's planner reads from ``text``, or ``None`` (no tool, no sub-goal)."""
    structured = _json_step(text)
    if structured is not None:
        return structured
    plain = text.replace("**", "")
    found: tuple[str, str, str] | None = None
    position = 0
    while True:
        run = _next_run(plain, position)
        if run is None:
            break
        found, position = run[:3], run[3]
    if found is None:
        return None
    context, sub_goal, tool_name = found
    return AgentFlowStep("", context.strip(), sub_goal.strip(), tool_name)


def parse_agentflow_action(text: str, *, finish: bool = False) -> PlannerAction:
    """``parse_planner_action`` by AgentFlow's rules. ``finish``: this project's finish action
    (AgentFlow has none) is read first, by this project's rules; any other reply by AgentFlow's.
    Raises ``ActionParseError`` where AgentFlow's planner reads nothing."""
    if finish:
        with contextlib.suppress(ActionParseError):
            action = parse_planner_action(text, finish=True)
            if is_finish(action):
                return action
    step = read_agentflow_step(text)
    if step is None:
        raise ActionParseError(
            "no 'Context:', 'Sub-Goal:' and 'Tool Name:' fields, in that order, in the reply"
        )
    return PlannerAction(step.justification, step.context, step.sub_goal, step.tool_name)


def _json_step(text: str) -> AgentFlowStep | None:
    """The four keys of a reply that is one JSON object with all of them as strings."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    fields = [value.get(key) for key in _JSON_KEYS]
    if not all(isinstance(field, str) for field in fields):
        return None
    justification, context, sub_goal, tool_name = (str(field).strip() for field in fields)
    return AgentFlowStep(justification, context, sub_goal, tool_name)


def _next_run(text: str, start: int) -> tuple[str, str, str, int] | None:
    """The first labelled run at or after ``start``: its three values and where it ends."""
    context_at = text.find(_CONTEXT, start)
    if context_at < 0:
        return None
    sub_goal_at = text.find(_SUB_GOAL, context_at + len(_CONTEXT))
    if sub_goal_at < 0:
        return None
    tool_at = text.find(_TOOL_NAME, sub_goal_at + len(_SUB_GOAL))
    if tool_at < 0:
        return None
    name_start = _skip_space(text, tool_at + len(_TOOL_NAME))
    name_end = _name_end(text, name_start)
    return (
        text[context_at + len(_CONTEXT) : sub_goal_at],
        text[sub_goal_at + len(_SUB_GOAL) : tool_at],
        text[name_start:name_end],
        name_end,
    )


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index].isspace():
        index += 1
    return index


def _name_end(text: str, start: int) -> int:
    """Where the tool name ends: the first point from which only white space (with at most one
    code fence in it) comes before a blank line or the end of the text. Only the start, the
    start of a run of white space or a fence can be that point."""
    for index in range(start, len(text)):
        char = text[index]
        run_start = char.isspace() and (index == start or not text[index - 1].isspace())
        candidate = index == start or run_start or (char == "`" and text.startswith(_FENCE, index))
        if candidate and _closes(text, index):
            return index
    return len(text)


def _closes(text: str, index: int) -> bool:
    end = _skip_space(text, index)
    if end == len(text) or "\n\n" in text[index:end]:
        return True
    if not text.startswith(_FENCE, end):
        return False
    after = _skip_space(text, end + len(_FENCE))
    return after == len(text) or "\n\n" in text[end + len(_FENCE) : after]
