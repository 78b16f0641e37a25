"""Readable text views of an episode (the ``ansi`` render mode and the CLI)."""

from __future__ import annotations

from agentflow_env.workflow.memory import MemoryEntry
from agentflow_env.workflow.session import Session

RULE = "-" * 72


def render_episode(session: Session, *, max_result_chars: int = 600) -> str:
    """The query, every turn so far and, once the episode is over, the answer and reward."""
    lines = [RULE, f"Task {session.task.task_id}: {session.task.question}"]
    if session.memory.analysis is not None:
        lines.append(session.memory.analysis.render())
    for entry in session.memory.entries:
        lines.append(render_turn(entry, max_result_chars=max_result_chars))
    if session.done:
        info = session.outcome.as_info() if session.outcome is not None else {}
        mark = "SUCCESS" if info.get("success") else "FAILURE"
        lines.append(
            f"Answer: {info.get('answer')!r}  gold: {info.get('gold_answers')}  "
            f"[{mark}, {info.get('end_reason')}]"
        )
    lines.append(RULE)
    return "\n".join(lines)


def render_turn(entry: MemoryEntry, *, max_result_chars: int = 600) -> str:
    tool = entry.selected_tool or "(none)"
    head = f"Turn {entry.turn} | {tool} | {entry.verification_status}"
    lines = [head]
    if entry.sub_goal:
        lines.append(f"  sub-goal: {entry.sub_goal}")
    if entry.tool_arguments:
        lines.append(f"  command:  {dict(entry.tool_arguments)}")
    for error in entry.errors:
        lines.append(f"  error:    {error}")
    if entry.tool_result:
        result = entry.tool_result
        if len(result) > max_result_chars:
            result = result[:max_result_chars] + " ..."
        lines.extend("  | " + line for line in result.split("\n"))
    return "\n".join(lines)
