"""One row of the viewer's index per logged episode: the figures read once, defensively.

A complete episode's figures come from its ``episode_end`` line (its ``diagnostics``); a partial
one (the run died before its end line) or one without diagnostics gets what its turn lines
allow: turns, invalid calls, tool-selection accuracy and the redundant-call rate.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentflow_env.evaluation.text import as_float, as_int, as_list, as_mapping, as_text
from agentflow_env.workflow.turn_log import LoggedEpisode

__all__ = ["INCOMPLETE", "NO_RUN", "EpisodeRow", "chosen_tool", "episode_rows"]

INCOMPLETE = "incomplete"
"""The end reason (and success state) shown for an episode whose log has no end line."""
NO_RUN = "(no run)"
"""The run name shown for episodes logged outside an eval run (``run`` is null)."""

_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")


@dataclass
class EpisodeRow:
    episode: LoggedEpisode
    page: str
    """The episode page's file name under ``episodes/`` (safe whatever the id holds)."""
    run: str
    task_id: str
    question: str
    turns: int
    success: bool | None
    """``None`` for an incomplete episode."""
    reward: float | None
    end_reason: str
    max_turns: int | None
    tool_selection_accuracy: float | None
    invalid_calls: int
    rates: dict[str, float | None] = field(default_factory=dict)
    """invalid_call_rate, redundant_call_rate, recovery_rate, tool_selection_accuracy."""
    success_by_budget: list[bool] | None = None

    @property
    def complete(self) -> bool:
        return self.success is not None

    @property
    def success_state(self) -> str:
        """The ``data-success`` value the index filters on: ``1``, ``0`` or ``incomplete``."""
        if self.success is None:
            return INCOMPLETE
        return "1" if self.success else "0"


def episode_rows(episodes: Iterable[LoggedEpisode]) -> list[EpisodeRow]:
    rows: list[EpisodeRow] = []
    pages: set[str] = set()
    for episode in episodes:
        page = _page_name(episode.episode_id, pages)
        pages.add(page)
        rows.append(_row(episode, page))
    return rows


def _page_name(episode_id: Any, taken: set[str]) -> str:
    text = as_text(episode_id)
    if _SAFE_ID.fullmatch(text) is None:
        text = "episode-" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
    name, n = text, 1
    while f"{name}.html" in taken:
        n += 1
        name = f"{text}-{n}"
    return f"{name}.html"


def _row(episode: LoggedEpisode, page: str) -> EpisodeRow:
    start = as_mapping(episode.start)
    task = as_mapping(start.get("task"))
    end = as_mapping(episode.end) if episode.start is not None and episode.end is not None else {}
    diagnostics = as_mapping(end.get("diagnostics"))
    turns = [as_mapping(turn) for turn in episode.turns]
    from_turns = _turn_figures(turns)
    complete = bool(end)
    run = start.get("run")
    budget = as_list(diagnostics.get("success_by_budget"))
    rates: dict[str, float | None] = {}
    for key in ("invalid_call_rate", "redundant_call_rate", "recovery_rate"):
        rates[key] = as_float(diagnostics.get(key)) if key in diagnostics else from_turns[key]
    accuracy = (
        as_float(diagnostics.get("tool_selection_accuracy"))
        if "tool_selection_accuracy" in diagnostics
        else from_turns["tool_selection_accuracy"]
    )
    rates["tool_selection_accuracy"] = accuracy
    invalid = as_int(diagnostics.get("invalid_calls"))
    ended_turns = as_int(end.get("turns"))
    return EpisodeRow(
        episode=episode,
        page=page,
        run=NO_RUN if run is None else as_text(run),
        task_id=as_text(task.get("task_id")),
        question=as_text(task.get("question")),
        turns=ended_turns if ended_turns is not None else len(turns),
        success=bool(end.get("success")) if complete else None,
        reward=as_float(end.get("reward")) if complete else None,
        end_reason=(as_text(end.get("end_reason")) or "(none)") if complete else INCOMPLETE,
        max_turns=as_int(start.get("max_turns")),
        tool_selection_accuracy=accuracy,
        invalid_calls=invalid if invalid is not None else int(from_turns["invalid_calls"] or 0),
        rates=rates,
        success_by_budget=[bool(b) for b in budget] if budget else None,
    )


def _turn_figures(turns: list[Mapping[str, Any]]) -> dict[str, float | None]:
    """What the turn lines alone say (for partial episodes and logs without diagnostics)."""
    invalid = sum(turn.get("verification") == "INVALID" for turn in turns)
    calls = [turn for turn in turns if turn.get("tool") is not None]
    redundant = sum(bool(turn.get("redundant")) for turn in calls)
    scored = [turn for turn in turns if turn.get("expected_tool") is not None]
    right = sum(turn.get("chose_expected_tool") is True for turn in scored)
    return {
        "invalid_calls": float(invalid),
        "invalid_call_rate": invalid / len(turns) if turns else None,
        "redundant_call_rate": redundant / len(calls) if calls else None,
        "recovery_rate": None,
        "tool_selection_accuracy": right / len(scored) if scored else None,
    }


def chosen_tool(turn: Mapping[str, Any]) -> Any:
    """The tool the planner chose: the one that ran, else the plan's tool name."""
    ran = turn.get("tool")
    return ran if ran is not None else as_mapping(turn.get("plan")).get("tool_name")
