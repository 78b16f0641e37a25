"""The items that provoke failures and limits: failed calls are recorded turns, a planner that
never finishes hits ``max_turns``, and every episode ends only on STOP or a limit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.evaluation.preflight.episodes import (
    Repeating,
    StepLog,
    live_session,
    play_logged,
    quote,
)
from agentflow_env.evaluation.preflight.report import CheckItem
from agentflow_env.rollout.agents.episodes import Stepped
from agentflow_env.tools.base import Tool, ToolCard, ToolContext, ToolResult
from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.memory import MemoryEntry, VerificationStatus
from agentflow_env.workflow.outcome import EndReason

TOOL_ERRORS = "tool error recorded"
TURN_LIMIT = "turn limit holds"
ENDS = "ends only on STOP or limit"

LIMITS = frozenset(
    reason.value for reason in EndReason if reason.truncates and reason != EndReason.MODULE_ERROR
)
"""The end reasons of a limit or budget: the only ones that may truncate an episode here (a
module error truncates it too, but is an end on neither STOP nor a limit)."""
USELESS_CONTEXT = "zzqx"
"""The Context of the action the turn-limit planner repeats: valid, but finds nothing."""


class FailingProbeTool(Tool):
    """A tool whose every call raises: the probe of last resort when every real tool accepts
    empty arguments."""

    def __init__(self, name: str = "PreflightProbe") -> None:
        self.card = ToolCard(
            name=name,
            description="A pre-flight probe whose every call fails.",
            input_schema={"query": {"type": "string", "description": "anything"}},
            output_type="nothing",
            primary_argument="query",
        )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        raise RuntimeError("pre-flight probe: this tool always fails")


def _action(tool: str, context: str, why: str, sub_goal: str = "pre-flight probe") -> str:
    return format_planner_action(
        justification=why, context=context, sub_goal=sub_goal, tool_name=tool
    )


def _unknown_tool(base: AgentFlowEnv, name: str = "NoSuchTool_preflight") -> str:
    """``name``, or a longer one, that no tool of ``base`` answers to."""
    names = base.tools
    while name in names:
        name += "_x"
    return name


def _recorded(entry: MemoryEntry, turn: int) -> str | None:
    """Why ``entry`` is not a recorded failed turn ``turn``; ``None`` when it is."""
    if entry.turn != turn:
        return f"recorded as turn {entry.turn}, expected {turn}"
    if entry.verification_status == VerificationStatus.INVALID:
        return None if entry.errors else "INVALID without an error text"
    if entry.tool_ok:
        return f"the call succeeded (verification {entry.verification_status})"
    return None if any(entry.errors) else "tool_ok False without an error text"


def _describe(entry: MemoryEntry) -> str:
    state = "INVALID" if entry.verification_status == "INVALID" else f"tool_ok {entry.tool_ok}"
    return f"turn {entry.turn} {state}: {quote(' | '.join(entry.errors), 100)}"


def _probe(env: gym.Env, base: AgentFlowEnv, seed: int, log: StepLog, action: str) -> MemoryEntry:
    """Step ``action`` (after a fresh reset if the episode is over) and return its entry."""
    if base.session is None or base.session.done:
        env.reset(seed=seed)
    log.step(env, action, "tool-error probe")
    return live_session(base).memory.entries[-1]


def check_tool_errors(env: gym.Env, base: AgentFlowEnv, seed: int, log: StepLog) -> CheckItem:
    """An unknown tool and a failing call become recorded turns and the env keeps stepping
    (``env`` is stepped, ``base`` is it unwrapped)."""
    env.reset(seed=seed)
    unknown = _unknown_tool(base)
    question = live_session(base).task.question
    seen: list[str] = []
    probe_action = _action(unknown, question, "probe: a tool that is not there")
    entry = _probe(env, base, seed, log, probe_action)
    problem = _recorded(entry, 1)
    if problem:
        return CheckItem(TOOL_ERRORS, False, f"unknown tool {unknown!r}: {problem}")
    seen.append(f"unknown tool {unknown!r} -> {_describe(entry)}")
    failed = None
    for name in base.tools.names:
        empty = _action(name, "", "probe: empty arguments", sub_goal="")
        entry = _probe(env, base, seed, log, empty)
        if _recorded(entry, entry.turn) is None:
            failed = f"{name} with empty arguments -> {_describe(entry)}"
            break
    if failed is None:  # every tool accepted empty arguments: call one that always raises
        probe = FailingProbeTool(_unknown_tool(base, "PreflightFailingProbe"))
        tools = base.tools
        base.tools = tools.with_tool(probe)
        try:
            env.reset(seed=seed)
            failing = _action(probe.name, question, "probe: a failing tool")
            entry = _probe(env, base, seed, log, failing)
        finally:
            base.tools = tools
        problem = _recorded(entry, 1)
        if problem:
            return CheckItem(TOOL_ERRORS, False, f"a tool that raises: {problem}")
        failed = f"every tool accepted empty arguments; a tool that raises -> {_describe(entry)}"
    seen.append(failed)
    session = live_session(base)
    before = session.turn if not session.done else 0
    entry = _probe(env, base, seed, log, _action(unknown, question, "probe: stepping on"))
    if entry.turn != before + 1:
        return CheckItem(
            TOOL_ERRORS, False, f"stepping on gave turn {entry.turn}, not {before + 1}"
        )
    seen.append(f"turn {entry.turn} stepped on after them")
    return CheckItem(TOOL_ERRORS, True, "; ".join(seen))


def check_turn_limit(env: gym.Env, base: AgentFlowEnv, seed: int, log: StepLog) -> CheckItem:
    """A planner repeating a useless valid action ends at exactly ``max_turns``, truncated."""
    max_turns = base.session_config.max_turns
    tool = base.tools.names[0]
    action = _action(tool, USELESS_CONTEXT, "probe: the same useless call again")
    env.reset(seed=seed)
    terminated = truncated = False
    info: dict[str, Any] = {}

    def record(_: Any, stepped: Stepped) -> None:
        nonlocal terminated, truncated, info
        _, _, terminated, truncated, info = stepped

    play_logged(env, live_session(base), Repeating(action), log, "turn limit", record)
    turn, reason = info.get("turn"), info.get("end_reason")
    seen = (
        f"repeating {tool} {USELESS_CONTEXT!r} ended at turn {turn} (max_turns {max_turns}) with "
        f"end_reason {reason!r}, terminated={terminated}, truncated={truncated}"
    )
    if not (terminated or truncated):
        return CheckItem(TURN_LIMIT, False, f"no end after {max_turns + 1} steps")
    passed = truncated and not terminated and reason == "max_turns" and turn == max_turns
    if reason == "verifier_stop":
        seen += ": the verifier said STOP on a call that found nothing, before the limit"
    return CheckItem(TURN_LIMIT, passed, seen)


def check_ends(log: StepLog, max_turns: int, termination: str = "verifier") -> CheckItem:
    """Across the logged steps: terminated iff the episode ended on a stop (a STOP verification:
    the verifier's or, where ``termination`` allows it, the planner's finish), truncated iff a
    limit or budget ended the episode, never both, and no end without one of them. Under
    ``termination="planner"`` a verifier STOP does not end the episode."""
    stop_reasons = {"verifier_stop", "planner_stop"}
    for step in log.steps:
        where = f"{step.episode} episode, turn {step.turn}"
        stop = step.verification == "STOP"
        binding = stop and (termination != "planner" or step.end_reason == "planner_stop")
        problem = None
        if step.terminated and step.truncated:
            problem = "terminated and truncated both"
        elif step.terminated != binding:
            problem = f"terminated={step.terminated} but the verification is {step.verification}"
        elif step.terminated and step.end_reason not in stop_reasons:
            problem = f"terminated with end_reason {step.end_reason!r}"
        elif step.end_reason == EndReason.MODULE_ERROR:
            errors = " | ".join(step.module_errors) or "no error text"
            problem = f"ended on a module error, neither STOP nor a limit: {quote(errors)}"
        elif step.truncated != (step.end_reason in LIMITS):
            problem = f"truncated={step.truncated} with end_reason {step.end_reason!r}"
        elif not (step.terminated or step.truncated) and step.end_reason is not None:
            problem = f"end_reason {step.end_reason!r} but neither terminated nor truncated"
        elif step.end_reason == "max_turns" and step.turn != max_turns:
            problem = f"ended by max_turns at turn {step.turn}, before the limit {max_turns}"
        if problem:
            return CheckItem(ENDS, False, f"{where}: {problem}")
    ends = [
        f"{s.episode}: {s.end_reason} at turn {s.turn}"
        for s in log.steps
        if s.terminated or s.truncated
    ]
    episodes = ", ".join(dict.fromkeys(s.episode for s in log.steps))
    return CheckItem(
        ENDS,
        bool(log.steps),
        f"{len(log.steps)} steps ({episodes}), each end matching its reason "
        f"({'; '.join(ends) or 'no episode ended'}); no step both terminated and truncated",
    )
