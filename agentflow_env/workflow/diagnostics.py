"""Per-episode diagnostics of a planner: the one definition of each metric.

Every entry point reads them from here: the env's final ``info["diagnostics"]``, the trajectory
log's ``episode_end`` line, ``agentflow-env eval`` and the viewer. ``docs/metrics.md`` defines
each metric in words; the aggregate over many episodes (rates with confidence intervals) lives in
``agentflow_env.evaluation.metrics``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentflow_env.tasks.base import PlanStep
from agentflow_env.tools.registry import canonical_tool_name
from agentflow_env.workflow.memory import Event, MemoryEntry, VerificationStatus

__all__ = [
    "diagnose_episode",
    "chose_tool",
    "expected_tools",
    "does_step",
    "gold_steps_done",
    "is_failure",
    "is_redundant",
    "module_usage",
    "pending_steps",
    "recovered_failures",
    "tool_usage",
]

RECOVERY_OVERLAP = 0.5
"""Least word overlap (Jaccard) between two sub-goals for them to count as the same sub-goal,
when the task has no gold plan to say which step was pending."""
STEP_COVERAGE = 0.5
"""Least share of a gold step's context words a call's arguments must hold to do that step."""


def does_step(entry: MemoryEntry, step: PlanStep) -> bool:
    """The turn does the gold step: a successful call of the step's tool whose arguments hold at
    least ``STEP_COVERAGE`` of the words of the step's context (its query, expression or code)."""
    if not entry.tool_ok or not _same_tool(entry.tool_key, step.tool):
        return False
    wanted = _words(step.context)
    if not wanted:
        return True
    given = frozenset().union(*(_words(str(v)) for v in entry.tool_arguments.values()))
    return len(wanted & given) / len(wanted) >= STEP_COVERAGE


def pending_steps(plan: Sequence[PlanStep], entries: Sequence[MemoryEntry]) -> list[int]:
    """For each turn, the index of the first gold step not yet done before it (a pointer that
    advances when a turn does the pending step); ``len(plan)`` after the last step."""
    return _progress(plan, entries)[:-1]


def gold_steps_done(plan: Sequence[PlanStep], entries: Sequence[MemoryEntry]) -> int:
    """How many gold steps the episode did, in order."""
    return _progress(plan, entries)[-1]


def _progress(plan: Sequence[PlanStep], entries: Sequence[MemoryEntry]) -> list[int]:
    """The ``pending_steps`` pointer before each turn, then after the last turn (which is
    ``gold_steps_done``): one walk that both read."""
    pending = 0
    indices = [pending]
    for entry in entries:
        if pending < len(plan) and does_step(entry, plan[pending]):
            pending += 1
        indices.append(pending)
    return indices


def expected_tools(plan: Sequence[PlanStep], entries: Sequence[MemoryEntry]) -> list[str | None]:
    """The right tool at each turn, by the task's gold plan (``None`` for every turn without one).

    The right tool at a turn is the tool of the first gold step not yet done (``pending_steps``);
    past the last step, the last step's tool. So a planner that detours is judged against the
    step still pending, not against the step its turn number would suggest.
    """
    return _expected_tools(plan, pending_steps(plan, entries))


def _expected_tools(plan: Sequence[PlanStep], pending: Sequence[int]) -> list[str | None]:
    """``expected_tools`` from the turns' ``pending_steps``."""
    if not plan:
        return [None] * len(pending)
    return [plan[min(i, len(plan) - 1)].tool for i in pending]


def chose_tool(entry: MemoryEntry, tool: str) -> bool:
    """The turn chose ``tool``: the tool that ran is it (by its own name, however it was shown;
    any spelling the tool registry accepts). A turn whose action named no usable tool chose none."""
    return _same_tool(entry.tool_key, tool)


def is_failure(entry: MemoryEntry) -> bool:
    """A failed observation: an invalid action, or a tool call that did not succeed."""
    if entry.verification_status == VerificationStatus.INVALID:
        return True
    return entry.selected_tool is not None and not entry.tool_ok


def is_redundant(entry: MemoryEntry, earlier: Iterable[MemoryEntry]) -> bool:
    """The call repeats an earlier one: same tool, same argument words (case, punctuation,
    order and spacing ignored)."""
    if entry.selected_tool is None:
        return False
    key = _call_key(entry)
    return any(other.selected_tool is not None and _call_key(other) == key for other in earlier)


def _redundant_calls(entries: Sequence[MemoryEntry]) -> int:
    """How many turns ``is_redundant`` counts, each call's key made once (not once per later
    turn)."""
    earlier: set[tuple[str, tuple[tuple[str, frozenset[str]], ...]]] = set()
    redundant = 0
    for entry in entries:
        if entry.selected_tool is None:
            continue
        key = _call_key(entry)
        redundant += key in earlier
        earlier.add(key)
    return redundant


def recovered_failures(
    entries: Sequence[MemoryEntry], plan: Sequence[PlanStep] = ()
) -> tuple[int, int]:
    """``(failures, recovered)``: a failure is recovered when a later turn makes a successful
    call toward the same sub-goal.

    With a gold plan, "the same sub-goal" is the gold step pending at the failure: recovered when
    a later turn does that step (``does_step``). Without one, a later successful
    call whose sub-goal shares at least ``RECOVERY_OVERLAP`` of its words (any successful call
    when the failed action had no readable sub-goal).
    """
    return _recovered_failures(entries, plan, pending_steps(plan, entries))


def _recovered_failures(
    entries: Sequence[MemoryEntry], plan: Sequence[PlanStep], pending: Sequence[int]
) -> tuple[int, int]:
    """``recovered_failures`` from the turns' ``pending_steps``."""
    failures = recovered = 0
    for index, entry in enumerate(entries):
        if not is_failure(entry):
            continue
        failures += 1
        later = entries[index + 1 :]
        if plan:
            step = plan[min(pending[index], len(plan) - 1)]
            hit = any(does_step(e, step) for e in later)
        else:
            words = _words(entry.sub_goal)
            hit = any(
                e.tool_ok
                and e.selected_tool is not None
                and (not words or _overlap(words, _words(e.sub_goal)) >= RECOVERY_OVERLAP)
                for e in later
            )
        recovered += hit
    return failures, recovered


def module_usage(events: Iterable[Event]) -> dict[str, dict[str, float]]:
    """Calls, latency and LLM tokens per frozen module, from the session's ``module_call`` events."""
    usage: dict[str, dict[str, float]] = {}
    for event in events:
        if event.kind != "module_call":
            continue
        payload = event.payload
        row = usage.setdefault(
            str(payload.get("module")),
            {"calls": 0, "latency_s": 0.0, "prompt_tokens": 0, "completion_tokens": 0},
        )
        row["calls"] += 1
        row["latency_s"] += float(payload.get("latency_s", 0.0))
        row["prompt_tokens"] += int(payload.get("prompt_tokens", 0))
        row["completion_tokens"] += int(payload.get("completion_tokens", 0))
    return usage


def tool_usage(events: Iterable[Event]) -> dict[str, dict[str, float]]:
    """Calls, failed calls and latency per tool, from the session's ``tool_call`` events."""
    usage: dict[str, dict[str, float]] = {}
    for event in events:
        if event.kind != "tool_call":
            continue
        payload = event.payload
        row = usage.setdefault(
            str(payload.get("tool")), {"calls": 0, "errors": 0, "latency_s": 0.0}
        )
        row["calls"] += 1
        row["errors"] += not payload.get("ok", False)
        metadata = payload.get("metadata") or {}
        row["latency_s"] += float(metadata.get("latency_s", 0.0))
    return usage


def diagnose_episode(
    entries: Sequence[MemoryEntry],
    *,
    end_reason: str,
    success: bool,
    score: float,
    reward: float,
    invalid_calls: int | None = None,
    plan: Sequence[PlanStep] = (),
    evidence_answers: bool | None = None,
    events: Sequence[Event] = (),
) -> dict[str, Any]:
    """The diagnostics of one finished episode as plain data (see ``docs/metrics.md``).

    ``invalid_calls`` is the session's count (malformed actions, unknown tools, arguments the
    tool's schema rejects); without it, the INVALID turns are counted. ``evidence_answers`` says
    whether the evidence in memory answers the question at the end (the task's evidence reader),
    ``None`` when nothing can tell; it decides whether the stop that ended the episode (the
    verifier's STOP or the planner's finish) was premature.

    An episode ended by the planner's finish (``end_reason="planner_stop"``) has that finish as
    its last entry: a turn, but no tool choice, so it is left out of tool-selection scoring.
    """
    turns = len(entries)
    verifier_stop = end_reason == "verifier_stop"
    planner_stop = end_reason == "planner_stop"
    chosen = entries[:-1] if planner_stop else entries  # the finish chose no tool
    # pending_steps of every turn and gold_steps_done, from one walk over the plan; a prefix
    # of the entries has the same pending steps (chosen's are the first len(chosen)).
    progress = _progress(plan, entries)
    pending = progress[:-1]
    expected = _expected_tools(plan, pending[: len(chosen)])
    scored = [(e, tool) for e, tool in zip(chosen, expected, strict=True) if tool is not None]
    right = sum(chose_tool(e, tool) for e, tool in scored)
    calls = [e for e in entries if e.selected_tool is not None]
    redundant = _redundant_calls(entries)
    failures, recovered = _recovered_failures(entries, plan, pending)
    if invalid_calls is None:
        invalid_calls = sum(e.verification_status == VerificationStatus.INVALID for e in entries)
    stopped = verifier_stop or planner_stop
    premature: bool | None = None
    if stopped and evidence_answers is not None:
        premature = not evidence_answers
    elif not stopped:
        premature = False
    chain_done = progress[-1] == len(plan) if plan else None
    return {
        "turns": turns,
        "success": bool(success),
        "score": float(score),
        "reward": float(reward),
        "end_reason": str(end_reason),
        "invalid_calls": int(invalid_calls),
        "invalid_call_rate": _ratio(invalid_calls, turns),
        "tool_calls": len(calls),
        "tool_errors": sum(not e.tool_ok for e in calls),
        "tool_choices_scored": len(scored),
        "tool_choices_right": right,
        "tool_selection_accuracy": _ratio(right, len(scored)),
        "failures": failures,
        "recovered": recovered,
        "recovery_rate": _ratio(recovered, failures),
        "verifier_stop": verifier_stop,
        "planner_stop": planner_stop,
        "premature_stop": premature,
        "gold_chain_complete": chain_done,
        "redundant_calls": redundant,
        "redundant_call_rate": _ratio(redundant, len(calls)),
        "modules": module_usage(events),
        "tools": tool_usage(events),
    }


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def _same_tool(name: str | None, other: str | None) -> bool:
    return (
        name is not None
        and other is not None
        and (canonical_tool_name(name) == canonical_tool_name(other))
    )


_WORD = re.compile(r"\w+")


@functools.lru_cache(maxsize=1024)  # bounded: the texts are the planner's
def _words(text: str) -> frozenset[str]:
    """The lowercased words of ``text``. Cached: the same arguments, sub-goals and step contexts
    are read again by each metric, at each turn (shaping, the turn log) and at the end."""
    return frozenset(word.lower() for word in _WORD.findall(text))


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def _call_key(entry: MemoryEntry) -> tuple[str, tuple[tuple[str, frozenset[str]], ...]]:
    arguments: Mapping[str, Any] = entry.tool_arguments
    return (
        canonical_tool_name(entry.selected_tool or ""),
        tuple(sorted((str(k), _words(str(v))) for k, v in arguments.items())),
    )
