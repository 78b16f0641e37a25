"""What an episode reports: its trajectory-log lines (``log_start``, ``log_turn``), the ``info``
of ``start`` and ``step`` (``step_info``), its exact turn records (``turn_record``) and the
planner diagnostics at its end (``episode_diagnostics``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentflow_env.tasks.base import Task
from agentflow_env.tasks.oracle import evidence_answers
from agentflow_env.workflow.action_input import ActionInput
from agentflow_env.workflow.diagnostics import (
    chose_tool,
    diagnose_episode,
    expected_tools,
    is_redundant,
)
from agentflow_env.workflow.episode_state import EpisodeDeps, EpisodeState
from agentflow_env.workflow.memory import Event, MemoryEntry
from agentflow_env.workflow.observations import Observation, ObservationStrategy
from agentflow_env.workflow.outcome import EndReason
from agentflow_env.workflow.trajectory import TurnRecord
from agentflow_env.workflow.turn_log import EpisodeLogger


def log_start(
    logger: EpisodeLogger,
    state: EpisodeState,
    deps: EpisodeDeps,
    seed: int | None,
    observation_mode: str,
) -> None:
    logger.start(
        deps.task,
        state.memory.analysis,
        seed=seed,
        initializer_error=state.initializer_error,
        max_turns=deps.config.max_turns,
        tools=deps.tools.names,
        observation_mode=observation_mode,
    )


def log_turn(
    logger: EpisodeLogger,
    state: EpisodeState,
    deps: EpisodeDeps,
    entry: MemoryEntry,
    read: ActionInput,
    prompt_tokens: int,
) -> None:
    if logger.log is None:
        return
    entries = state.memory.entries
    finished = state.finish_action is not None  # a finish is no tool choice to judge
    expected = None if finished else expected_tools(deps.task.gold_plan, entries)[-1]
    logger.turn(
        entry,
        read,
        expected_tool=expected,
        chose_expected_tool=None if expected is None else chose_tool(entry, expected),
        redundant=is_redundant(entry, entries[:-1]),
        latency_s=state.turn_latency,
        prompt_tokens=prompt_tokens,
    )


def step_info(
    state: EpisodeState,
    task: Task,
    observations: ObservationStrategy,
    read: ActionInput | None = None,
    feedback: Observation | None = None,
) -> dict[str, Any]:
    """The ``info`` of ``start`` (no ``read``) and of ``step``: every key, built here."""
    memory = state.memory
    info: dict[str, Any] = {
        "task_id": task.task_id,
        "question": task.question,
        "turn": state.turn,
        "memory": memory.as_dicts(),
    }
    if state.initializer_error:
        info["initializer_error"] = state.initializer_error
    if memory.entries:
        last = memory.entries[-1]
        info.update(
            tool=last.selected_tool,
            tool_ok=last.tool_ok,
            verification=last.verification_status.value,
            errors=list(last.errors),
        )
    if state.outcome is not None:
        info.update(state.outcome.as_info())
    if read is not None:
        info["action_cut"] = read.cut
    if feedback is not None:
        info.update(observations.feedback_info(feedback))
    return info


def turn_record(
    turn: int,
    prompt: Observation,
    read: ActionInput,
    feedback: Observation,
    *,
    reward: float,
    shaping: float,
) -> TurnRecord:
    """Turn ``turn`` token-exact: its prompt, its action as read, the feedback that followed."""
    return TurnRecord(
        turn=turn,
        prompt_ids=tuple(prompt.token_ids),
        action_ids=tuple(read.ids),
        action_text=read.text,
        action_given_as_ids=read.given_as_ids,
        logprobs=None if read.logprobs is None else tuple(read.logprobs),
        feedback_ids=tuple(feedback.token_ids),
        feedback_text=feedback.text,
        action_cut=read.cut,
        reward=reward,
        shaping=shaping,
    )


def episode_diagnostics(
    state: EpisodeState,
    task: Task,
    end_reason: EndReason,
    success: bool,
    score: float,
    reward: float,
) -> dict[str, Any]:
    """The planner diagnostics of the ending episode (``diagnose_episode``)."""
    try:
        answered = evidence_answers(task, state.memory.evidence())
    except Exception:  # a reader that chokes on odd evidence: unknowable, not a crash
        answered = None
    diagnostics = diagnose_episode(
        state.memory.entries,
        end_reason=end_reason.value,
        success=success,
        score=score,
        reward=reward,
        invalid_calls=state.metrics.invalid_actions,
        plan=task.gold_plan,
        evidence_answers=answered,
        events=state.memory.events,
    )
    return {**diagnostics, **agentflow_records(state.memory.events)}


def agentflow_records(events: Sequence[Event]) -> dict[str, Any]:
    """What AgentFlow's own calls left in the episode's events, where they left anything:
    ``analysis_format``, how the query analysis was asked for (``json_schema``, ``refused``:
    the endpoint refused the format and it was asked as free text, ``json_schema_unread``);
    ``score_without_choice_fallback``, the judge's score without its choice fallback."""
    records: dict[str, Any] = {}
    for event in events:
        if event.kind == "analysis":
            meta = (event.payload.get("analysis") or {}).get("meta") or {}
            if isinstance(meta, Mapping) and isinstance(meta.get("response_format"), str):
                records["analysis_format"] = meta["response_format"]
        elif event.kind == "judge" and "without_choice_fallback" in event.payload:
            records["score_without_choice_fallback"] = event.payload["without_choice_fallback"]
    return records
