"""One planner turn, as functions of the episode's state and what it runs with.

``begin_turn`` counts the action; ``run_turn`` parses it, asks the executor for the tool's
arguments, runs the tool and asks the verifier, and returns the turn's ``MemoryEntry``. Nothing
the planner sends makes it raise: an unusable action, an unknown tool, a failing tool or module
all become a recorded entry (``analyze_query`` does the same for the initializer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow_env.base.loop_runner import yield_to_loop
from agentflow_env.base.untrusted import shorten
from agentflow_env.tools.agentflow.names import match_agentflow_tool
from agentflow_env.tools.base import Tool, ToolArgumentError, ToolResult
from agentflow_env.tools.runner import run_tool
from agentflow_env.workflow.action_input import ActionInput
from agentflow_env.workflow.actions import (
    ActionParseError,
    PlannerAction,
    is_finish,
    parse_planner_action,
)
from agentflow_env.workflow.agentflow_command import (
    CommandRecord,
    Uncaptured,
    read_command_reply,
)
from agentflow_env.workflow.agentflow_reply import parse_agentflow_action
from agentflow_env.workflow.episode_state import EpisodeDeps, EpisodeState
from agentflow_env.workflow.memory import MemoryEntry, QueryAnalysis, VerificationStatus
from agentflow_env.workflow.module_calls import expect, module_failed, timed
from agentflow_env.workflow.prompts import style_rules


async def analyze_query(state: EpisodeState, deps: EpisodeDeps) -> QueryAnalysis:
    """The initializer's analysis; if it fails, the episode still starts, from the bare query."""
    task, tools = deps.task, deps.tools
    try:
        call = deps.modules.initializer.analyze(task, tools)
        return expect(await timed(state, "initializer", 0, call), QueryAnalysis)
    except Exception as exc:
        state.memory.log("module_error", 0, module="initializer", error=repr(exc))
        state.initializer_error = f"initializer failed: {type(exc).__name__}: {exc}"
        return QueryAnalysis(
            objective=f"Answer the question: {task.question}", tools=tuple(tools.names)
        )


def begin_turn(state: EpisodeState, read: ActionInput) -> int:
    """Count the action ``read`` as the next turn (its number is returned) and log it."""
    turn = state.turn + 1
    state.turn_latency = {}
    state.metrics.turns = turn
    state.metrics.action_tokens += len(read.ids)
    state.memory.log(
        "action",
        turn,
        text=read.text,
        token_ids=read.ids,
        given_as_ids=read.given_as_ids,
        cut=read.cut,
    )
    return turn


async def run_turn(
    state: EpisodeState, deps: EpisodeDeps, turn: int, action_text: str, error: str | None
) -> MemoryEntry:
    """Turn ``turn``: the action ``action_text`` (``error``: why it could not be read) run."""
    if error is not None:
        return _invalid_entry(state, turn, None, error)
    may_finish = deps.end.planner_may_finish
    # Under AgentFlow's scripts the reply is read as AgentFlow reads it (agentflow_reply).
    parse = parse_planner_action if deps.config.agentflow_script is None else parse_agentflow_action
    try:
        action = parse(action_text, finish=may_finish)
    except ActionParseError as exc:
        entry = _invalid_entry(state, turn, None, f"malformed action: {exc}")
        return await _verified_invalid(state, deps, entry)
    if may_finish and is_finish(action):
        return _finish_entry(state, turn, action)
    tool = _tool_named(deps, action.tool_name)
    if tool is None:
        known = ", ".join(deps.tools.names)
        name = shorten(action.tool_name, 80)
        error = f"unknown tool {name!r}; available tools: {known}"
        entry = _invalid_entry(state, turn, action, error, unmatched_tool=action.tool_name)
        return await _verified_invalid(state, deps, entry)
    command_reply = getattr(deps.modules.executor, "command_reply", None)
    if deps.config.agentflow_script is not None and command_reply is not None:
        try:
            reply = command_reply(action, tool, deps.task, state.memory)
            reply_text = str(await timed(state, "executor", turn, reply))
        except Exception as exc:
            module_failed(state, turn, "executor", exc)
            error = f"executor failed: {exc}"
            return _invalid_entry(state, turn, action, error, status=VerificationStatus.ERROR)
        return await _command_turn(state, deps, turn, action, tool, reply_text)
    try:
        command = deps.modules.executor.command(action, tool, deps.task, state.memory)
        arguments = await timed(state, "executor", turn, command)
    except Exception as exc:
        module_failed(state, turn, "executor", exc)
        error = f"executor failed: {exc}"
        return _invalid_entry(state, turn, action, error, status=VerificationStatus.ERROR)
    return await _tool_turn(state, deps, turn, action, tool, arguments)


async def _tool_turn(
    state: EpisodeState,
    deps: EpisodeDeps,
    turn: int,
    action: PlannerAction,
    tool: Tool,
    arguments: Mapping[str, Any],
) -> MemoryEntry:
    """Run the tool with the executor's ``arguments``, then ask the verifier about the result."""
    await yield_to_loop()  # the tool and the verifier's reading are CPU phases of their own
    result = await _call_tool(state, deps, turn, tool, arguments)
    errors: tuple[str, ...] = (result.error,) if result.error else ()
    # The verifier reads the memory including this turn's result.
    provisional = _tool_entry(
        turn, action, tool, arguments, result, VerificationStatus.PENDING, (), errors
    )
    await yield_to_loop()
    status, open_questions, verify_errors = await _verify(state, deps, turn, provisional)
    errors += verify_errors
    return _tool_entry(turn, action, tool, arguments, result, status, open_questions, errors)


async def _command_turn(
    state: EpisodeState,
    deps: EpisodeDeps,
    turn: int,
    action: PlannerAction,
    tool: Tool,
    reply: str,
) -> MemoryEntry:
    """Under AgentFlow's scripts: the executor's command as AgentFlow runs it (each piece's
    ``tool.execute`` calls in order, read, never executed), recorded as written; a reply with
    no command runs nothing. Then the verifier, as for one call."""
    command, pieces = read_command_reply(reply)
    results: list[ToolResult] = []
    outputs: list[Any] = []
    arguments: dict[str, Any] = {}
    failure = None
    await yield_to_loop()
    for piece in pieces:
        failure = piece.refused
        captured: Any = Uncaptured(piece.text)
        for call in () if failure else piece.calls:
            arguments, result, failure = await _run_call(state, deps, turn, tool, call.arguments)
            if failure is not None:
                break
            assert result is not None
            results.append(result)
            if call.records:
                captured = _recorded_output(result)
        if failure is not None:
            break
        outputs.append(captured)
    record = CommandRecord(command, tuple(outputs), failure)
    errors = tuple(r.error for r in results if r.error) + ((failure,) if failure else ())
    entry = MemoryEntry(
        turn=turn,
        justification=action.justification,
        context=action.context,
        sub_goal=action.sub_goal,
        selected_tool=tool.name,
        tool_arguments=arguments,
        tool_result="\n\n".join(result.output for result in results),
        tool_ok=bool(results) and failure is None and all(r.ok for r in results),
        verification_status=VerificationStatus.PENDING,
        errors=errors,
        tool_identity=tool.original_name if tool.original_name != tool.name else None,
        agentflow_command=record,
    )
    await yield_to_loop()
    status, open_questions, verify_errors = await _verify(state, deps, turn, entry)
    return dataclasses.replace(
        entry,
        verification_status=status,
        open_questions=open_questions,
        errors=errors + verify_errors,
    )


async def _run_call(
    state: EpisodeState,
    deps: EpisodeDeps,
    turn: int,
    tool: Tool,
    given: Mapping[str | None, Any],
) -> tuple[dict[str, Any], ToolResult | None, str | None]:
    """One ``tool.execute`` call of a command: ``(arguments, result, None)``, or why it could
    not be called (arguments that do not fit the tool, where AgentFlow's call would raise)."""
    arguments = {tool.card.primary_argument if k is None else k: v for k, v in given.items()}
    try:
        arguments = tool.validate(arguments)
    except ToolArgumentError as exc:
        state.metrics.invalid_actions += 1
        return arguments, None, str(exc)
    return arguments, await _call_tool(state, deps, turn, tool, arguments), None


async def _call_tool(
    state: EpisodeState,
    deps: EpisodeDeps,
    turn: int,
    tool: Tool,
    arguments: Mapping[str, Any],
) -> ToolResult:
    """Run one tool call under the session's limits, log it, count it, and add its latency to
    the turn's (a command may make several calls a turn)."""
    config = deps.config
    result = await run_tool(
        tool,
        arguments,
        state.tool_context,
        timeout_s=min(tool.timeout_s, config.tool_timeout_s),
        max_output_chars=config.max_tool_output_chars,
    )
    state.memory.log(
        "tool_call",
        turn,
        tool=tool.name,
        arguments=dict(arguments),
        ok=result.ok,
        error=result.error,
        metadata=_plain(result.metadata),
    )
    _count_call(state, result)
    latency = float(result.metadata.get("latency_s", 0.0))
    state.turn_latency["tool"] = state.turn_latency.get("tool", 0.0) + latency
    return result


def _recorded_output(result: ToolResult) -> Any:
    """What AgentFlow's list holds for one call: the tool's value, its text, or its error."""
    if result.value is not None:
        return result.value
    return result.output if result.ok else f"Error: {result.error}"


def _tool_entry(
    turn: int,
    action: PlannerAction,
    tool: Tool,
    arguments: Mapping[str, Any],
    result: ToolResult,
    status: VerificationStatus,
    open_questions: tuple[str, ...],
    errors: tuple[str, ...],
) -> MemoryEntry:
    """A turn in which ``tool`` ran."""
    return MemoryEntry(
        turn=turn,
        justification=action.justification,
        context=action.context,
        sub_goal=action.sub_goal,
        selected_tool=tool.name,
        tool_arguments=dict(arguments),
        tool_result=result.output,
        tool_ok=result.ok,
        verification_status=status,
        open_questions=open_questions,
        errors=errors,
        tool_identity=tool.original_name if tool.original_name != tool.name else None,
        tool_value=result.value,
    )


async def _verify(
    state: EpisodeState, deps: EpisodeDeps, turn: int, provisional: MemoryEntry
) -> tuple[VerificationStatus, tuple[str, ...], tuple[str, ...]]:
    try:
        call = deps.modules.verifier.verify(deps.task, state.memory.preview(provisional))
        verdict = await timed(state, "verifier", turn, call)
        stop, open_questions = _read_verdict(verdict)
        details = {
            "rationale": str(getattr(verdict, "rationale", "")),
            "raw": str(getattr(verdict, "raw", "")),
            "meta": dict(getattr(verdict, "meta", None) or {}),
        }
    except Exception as exc:
        module_failed(state, turn, "verifier", exc)
        error = (f"verifier failed: {exc}",)
        return VerificationStatus.ERROR, state.memory.open_questions(), error
    state.memory.log("verification", turn, stop=stop, **details)
    return (VerificationStatus.STOP if stop else VerificationStatus.CONTINUE), open_questions, ()


async def _verified_invalid(
    state: EpisodeState, deps: EpisodeDeps, entry: MemoryEntry
) -> MemoryEntry:
    """With ``verify_invalid_turns``, the verifier judges a turn that named no usable tool
    too (as AgentFlow's does): it may still say STOP on what earlier turns found."""
    if not deps.config.verify_invalid_turns:
        return entry
    status, open_questions, errors = await _verify(state, deps, entry.turn, entry)
    if status == VerificationStatus.CONTINUE:
        status = VerificationStatus.INVALID
    return dataclasses.replace(
        entry,
        verification_status=status,
        open_questions=open_questions,
        errors=entry.errors + errors,
    )


def _tool_named(deps: EpisodeDeps, name: str) -> Tool | None:
    """The tool the planner named. In AgentFlow's format only as AgentFlow's planner matches
    names (case, spaces and underscores aside, the shown names only), so a short or a
    misspelt name is an unknown tool there as it is in AgentFlow (and under AgentFlow's
    scripts); else any forgiving spelling or alias."""
    exact = style_rules(deps.config.prompt_style).exact_tool_names
    if not exact and deps.config.agentflow_script is None:
        return deps.tools.get(name)
    matched = match_agentflow_tool(name, deps.tools.names)
    return next((tool for tool in deps.tools if tool.name == matched), None)


def _invalid_entry(
    state: EpisodeState,
    turn: int,
    action: PlannerAction | None,
    error: str,
    status: VerificationStatus = VerificationStatus.INVALID,
    unmatched_tool: str | None = None,
) -> MemoryEntry:
    invalid = status == VerificationStatus.INVALID
    if invalid:
        state.metrics.invalid_actions += 1
    state.memory.log("invalid_action" if invalid else "turn_error", turn, error=error)
    return _toolless_entry(state, turn, action, status, (error,), unmatched_tool)


def _finish_entry(state: EpisodeState, turn: int, action: PlannerAction) -> MemoryEntry:
    """The planner's finish: a turn with no tool whose status is STOP (the planner's own;
    no verifier ran), with the answer in the event log (``planner_finish``)."""
    state.finish_action = action
    state.memory.log("planner_finish", turn, answer=action.final_answer)
    return _toolless_entry(state, turn, action, VerificationStatus.STOP)


def _toolless_entry(
    state: EpisodeState,
    turn: int,
    action: PlannerAction | None,
    status: VerificationStatus,
    errors: tuple[str, ...] = (),
    unmatched_tool: str | None = None,
) -> MemoryEntry:
    """A turn in which no tool ran (an unusable action, a failed module, the finish)."""
    return MemoryEntry(
        turn=turn,
        justification=action.justification if action else "",
        context=action.context if action else "",
        sub_goal=action.sub_goal if action else "",
        selected_tool=None,
        tool_arguments={},
        tool_result="",
        tool_ok=False,
        verification_status=status,
        open_questions=state.memory.open_questions(),
        errors=errors,
        unmatched_tool=unmatched_tool,
    )


def _count_call(state: EpisodeState, result: ToolResult) -> None:
    metrics = state.metrics
    metrics.tool_calls += 1
    if not result.ok:
        metrics.tool_errors += 1
        if result.service_broken:
            state.service_errors.append(result.error or "no error text")
        if result.metadata.get("kind") == "arguments":
            metrics.invalid_actions += 1
    metrics.tool_latency_s += float(result.metadata.get("latency_s", 0.0))


def _read_verdict(verdict: Any) -> tuple[bool, tuple[str, ...]]:
    stop = getattr(verdict, "stop", None)
    if not isinstance(stop, bool):
        raise TypeError(f"a verdict needs a bool 'stop', got {type(verdict).__name__}")
    questions = getattr(verdict, "open_questions", ())
    if isinstance(questions, str) or not isinstance(questions, Sequence):
        raise TypeError("a verdict's open_questions must be a sequence of str")
    return stop, tuple(str(q) for q in questions)


def _plain(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in metadata.items()
        if isinstance(v, str | int | float | bool | list | type(None))
    }
