"""The items read off the expert's episode: memory, first action, first tool call, the
verifier's STOP and the final answer and reward."""

from __future__ import annotations

import dataclasses
import math

from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.evaluation.preflight.episodes import ExpertRun, quote
from agentflow_env.evaluation.preflight.report import CheckItem
from agentflow_env.workflow.actions import parse_planner_action
from agentflow_env.workflow.memory import QueryAnalysis, VerificationStatus

MEMORY = "memory initialized"
ACTION = "planner action valid"
TOOL = "expected tool invoked"
VERIFIER = "verifier stops"
ANSWER = "answer and reward emitted"

INFO_KEYS = ("task_id", "question", "turn", "memory")
FINAL_KEYS = ("answer", "reward", "success", "score", "end_reason")


def check_memory(run: ExpertRun, env: AgentFlowEnv) -> CheckItem:
    """After reset: the query and the initializer's analysis, every field present; the info's
    keys."""
    info, analysis = run.reset_info, run.analysis
    if info is None:
        return CheckItem(MEMORY, False, run.missing("reset"))
    problems = []
    if "initializer_error" in info:
        problems.append(str(info["initializer_error"]))
    if not run.query:
        problems.append("the memory holds no query")
    elif run.query != info.get("question"):
        problems.append(f"memory query {quote(run.query)} != info question")
    if analysis is None:
        problems.append("the memory holds no query analysis")
    else:
        fields = [f.name for f in dataclasses.fields(QueryAnalysis)]
        absent = [name for name in fields if not hasattr(analysis, name)]
        if absent:
            problems.append(f"the analysis lacks {absent}")
        if not str(getattr(analysis, "objective", "")).strip():
            problems.append("the analysis's objective is empty")
        if not getattr(analysis, "tools", ()):
            problems.append("the analysis lists no tools")
        unknown = [t for t in getattr(analysis, "tools", ()) if t not in env.tools]
        if unknown:
            problems.append(f"the analysis lists tools the env lacks: {unknown}")
    lacking = [key for key in INFO_KEYS if key not in info]
    if lacking:
        problems.append(f"info lacks {lacking}")
    elif info["turn"] != 0 or info["memory"] != []:
        problems.append(f"info has turn {info['turn']} and {len(info['memory'])} entries at reset")
    if problems or analysis is None:
        return CheckItem(MEMORY, False, "; ".join(problems))
    return CheckItem(
        MEMORY,
        True,
        f"query {quote(run.query, 80)}; objective {quote(analysis.objective, 80)}; tools "
        f"{', '.join(analysis.tools)}; {len(analysis.sub_questions)} sub-question(s), "
        f"{len(analysis.constraints)} constraint(s); info task_id {quote(info['task_id'], 60)}, "
        "turn 0, memory []",
    )


def check_action(run: ExpertRun) -> CheckItem:
    """The first action is accepted: not INVALID (nor a module ERROR), no errors but the tool's
    own (those are the next item's)."""
    entry, action = run.first_entry, run.first_action
    if entry is None or action is None:
        return CheckItem(ACTION, False, run.missing("its first step"))
    source = run.fallback_note or "the expert's first action (gold plan)"
    tool_errors = {str(e.payload.get("error")) for e in run.first_calls if e.payload.get("error")}
    argument_errors = [
        str(e.payload.get("error"))
        for e in run.first_calls
        if (e.payload.get("metadata") or {}).get("kind") == "arguments"
    ]
    other_errors = [e for e in entry.errors if e not in tool_errors] + argument_errors
    status = entry.verification_status
    seen = f"{source}: {quote(action, 120)} -> turn 1 verification {status}"
    if status in (VerificationStatus.INVALID, VerificationStatus.ERROR) or other_errors:
        errors = " | ".join(other_errors or entry.errors) or "none"
        return CheckItem(ACTION, False, f"{seen}, errors: {quote(errors)}")
    return CheckItem(ACTION, True, f"{seen}, no errors")


def check_tool(run: ExpertRun, env: AgentFlowEnv) -> CheckItem:
    """The tool the first action named was called and returned ok."""
    entry, action = run.first_entry, run.first_action
    if entry is None or action is None:
        return CheckItem(TOOL, False, run.missing("its first tool call"))
    named = parse_planner_action(action).tool_name
    tool = env.tools.get(named)
    if tool is None:
        return CheckItem(TOOL, False, f"the action names {named!r}, not one of {env.tools.names}")
    if entry.selected_tool != tool.name:
        return CheckItem(
            TOOL, False, f"the action names {tool.name} but {entry.selected_tool!r} was called"
        )
    called = f"{tool.name} called with {quote(dict(entry.tool_arguments), 100)}"
    if not entry.tool_ok:
        errors = " | ".join(entry.errors) or "no error text"
        return CheckItem(TOOL, False, f"{called}: tool_ok False, error {quote(errors)}")
    return CheckItem(
        TOOL, True, f"{called}: tool_ok True, {len(entry.tool_result)} chars of output"
    )


def check_verifier_stop(run: ExpertRun, max_turns: int, termination: str = "verifier") -> CheckItem:
    """The expert's episode terminates by the verifier's STOP within the turn limit (or by the
    planner's finish, where ``termination`` lets the planner finish)."""
    info = run.final_info
    if info is None:
        return CheckItem(VERIFIER, False, run.missing("its end"))
    reason, turn = info.get("end_reason"), info.get("turn")
    seen = (
        f"the expert's episode ended at turn {turn} of at most {max_turns} with end_reason "
        f"{reason!r} (terminated={run.terminated}, truncated={run.truncated})"
    )
    stops = {"verifier": ("verifier_stop",), "planner": ("planner_stop",)}.get(
        termination, ("verifier_stop", "planner_stop")
    )
    if run.terminated and reason in stops and isinstance(turn, int):
        return CheckItem(VERIFIER, True, seen)
    statuses = [e.get("verification_status") for e in info.get("memory", [])]
    errors = info.get("module_errors") or []
    cause = f"; module errors: {quote(' | '.join(errors))}" if errors else ""
    return CheckItem(
        VERIFIER, False, f"{seen}; verifications {', '.join(map(str, statuses))}{cause}"
    )


def check_answer(run: ExpertRun) -> CheckItem:
    """The final info has a str answer, a finite float reward, success, score and end_reason."""
    info = run.final_info
    if info is None:
        return CheckItem(ANSWER, False, run.missing("its final info"))
    problems = [f"no {key!r}" for key in FINAL_KEYS if key not in info]
    answer, reward = info.get("answer"), info.get("reward")
    if not isinstance(answer, str):
        problems.append(f"answer is {answer!r}, not a str")
    if not isinstance(reward, float) or not math.isfinite(reward):
        problems.append(f"reward is {reward!r}, not a finite float")
    elif run.final_reward != reward:
        problems.append(f"step returned reward {run.final_reward!r} but info has {reward!r}")
    if not isinstance(info.get("success"), bool):
        problems.append(f"success is {info.get('success')!r}, not a bool")
    if not isinstance(info.get("score"), int | float):
        problems.append(f"score is {info.get('score')!r}, not a number")
    if info.get("module_errors"):
        problems.append(f"module errors: {quote(' | '.join(info['module_errors']))}")
    shown = quote(answer, 80) if isinstance(answer, str) else repr(answer)
    gold = ", ".join(quote(g, 40) for g in info.get("gold_answers") or ())
    seen = (
        f"answer {shown} (gold: {gold or 'none'}), reward "
        f"{reward!r}, success {info.get('success')!r}, score {info.get('score')!r}, end_reason "
        f"{info.get('end_reason')!r}"
    )
    if problems:
        return CheckItem(ANSWER, False, "; ".join(problems) + f" ({seen})")
    return CheckItem(ANSWER, True, seen)
