"""Frozen modules backed by an OpenAI-compatible chat model (or an in-process vLLM engine).

Each module sends one chat request per call and reads the reply tolerantly; what a reply lacks is
filled with a safe default and noted. Raw replies and call metadata (latency, attempts, cut-off)
reach the event log: the executor and generalist log a ``module_output`` event themselves; the
initializer's record and the verifier's ``raw``/``meta`` travel in the records they return. A call
that fails after its retries, or whose reply is empty or whitespace only, raises ``LLMError`` (a
``ModuleError``), which the session records.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentflow_env.llm.client import ChatBackend, ChatResult, LLMEndpoint, LLMError, as_backend
from agentflow_env.modules.prompts import (
    executor_messages,
    extract_short_answer,
    generalist_messages,
    initializer_messages,
    parse_json_objects,
    parse_open_questions,
    parse_query_analysis,
    verifier_messages,
)
from agentflow_env.tasks.base import Task
from agentflow_env.tools.base import Tool, ToolArgumentError
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.actions import PlannerAction, parse_verdict
from agentflow_env.workflow.frozen_modules import FinalAnswer, Verification
from agentflow_env.workflow.memory import Memory, QueryAnalysis

__all__ = [
    "LLMExecutor",
    "LLMGeneralist",
    "LLMInitializer",
    "LLMQueryAnalysis",
    "LLMVerification",
    "LLMVerifier",
]

NO_VERDICT_NOTE = "no 'Conclusion: STOP|CONTINUE' in the verifier output; treated as CONTINUE"


@dataclass(frozen=True)
class LLMQueryAnalysis(QueryAnalysis):
    """A ``QueryAnalysis`` that also carries the raw reply; the session logs all its fields."""

    raw: str = ""
    note: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LLMVerification(Verification):
    """A ``Verification`` with call metadata (latency, attempts, cut-off, parse notes)."""

    meta: Mapping[str, Any] = field(default_factory=dict)


class _LLMModule:
    def __init__(self, backend: LLMEndpoint | ChatBackend) -> None:
        self.backend = as_backend(backend)

    async def _chat(self, messages: list[dict[str, str]], **options: Any) -> ChatResult:
        """The reply; ``LLMError`` (the module's recorded failure) when it has no text: the
        client never asks again for a reply (see ``agentflow_env.llm.client``). ``options``:
        the backend's keyword arguments (``max_tokens``, ``top_p``, ...)."""
        reply = await self.backend.chat(messages, **options)
        if reply.blank:
            raise LLMError(
                f"{type(self).__name__}: the model's reply is empty or whitespace only "
                f"(finish_reason={reply.finish_reason!r}, {reply.attempts} attempt(s))"
            )
        return reply

    def __repr__(self) -> str:
        endpoint = getattr(self.backend, "endpoint", self.backend)
        return f"{type(self).__name__}({endpoint!r})"


class LLMInitializer(_LLMModule):
    """AgentFlow's query analysis: objective, constraints, sub-questions, relevant tools."""

    async def analyze(self, task: Task, tools: ToolSet) -> QueryAnalysis:
        reply = await self._chat(initializer_messages(task.question, tools))
        analysis, note = parse_query_analysis(reply.text, task.question, tools.names)
        return LLMQueryAnalysis(
            objective=analysis.objective,
            constraints=analysis.constraints,
            sub_questions=analysis.sub_questions,
            tools=analysis.tools,
            raw=reply.text,
            note=note,
            meta=reply.meta(),
        )


class LLMExecutor(_LLMModule):
    """Writes the tool's arguments as JSON; falls back to ``{primary argument: Context}``."""

    async def command(
        self, action: PlannerAction, tool: Tool, task: Task, memory: Memory
    ) -> dict[str, Any]:
        reply = await self._chat(executor_messages(action, tool, task.question))
        arguments, note = self._arguments(reply.text, tool, action)
        memory.log(
            "module_output",
            len(memory) + 1,
            module="executor",
            raw=reply.text,
            arguments=dict(arguments),
            note=note,
            **reply.meta(),
        )
        return arguments

    @staticmethod
    def _arguments(
        text: str, tool: Tool, action: PlannerAction
    ) -> tuple[dict[str, Any], str | None]:
        problems: list[str] = []
        for candidate in parse_json_objects(text):
            try:
                return tool.validate(_coerce(candidate, tool)), None
            except ToolArgumentError as exc:
                problems.append(str(exc))
        fallback = {tool.card.primary_argument: action.context.strip() or action.sub_goal.strip()}
        reason = "; ".join(problems[:3]) if problems else "no JSON object in the reply"
        return fallback, f"unusable executor output ({reason}); used the planner's Context"


def _coerce(arguments: Mapping[str, Any], tool: Tool) -> dict[str, Any]:
    """Fix the commonest type slips: numbers sent as strings, scalars sent as strings."""
    fixed = dict(arguments)
    for name, spec in tool.card.input_schema.items():
        value = fixed.get(name)
        kind = spec.get("type", "string")
        if isinstance(value, str) and kind in ("integer", "number"):
            with contextlib.suppress(ValueError):
                fixed[name] = int(value) if kind == "integer" else float(value)
        elif kind == "string" and isinstance(value, int | float) and not isinstance(value, bool):
            fixed[name] = str(value)
    return fixed


_PROSE_VERDICT = re.compile(r"\b(STOP|CONTINUE)\b")


class LLMVerifier(_LLMModule):
    """AgentFlow's context verification, ending with ``Conclusion: STOP|CONTINUE``."""

    async def verify(self, task: Task, memory: Memory) -> Verification:
        tools = memory.analysis.tools if memory.analysis else ()
        reply = await self._chat(verifier_messages(memory, tools))
        meta: dict[str, Any] = reply.meta()
        verdict = parse_verdict(reply.text)
        if verdict is not None:
            stop, rationale = verdict.stop, verdict.rationale
        else:
            words = _PROSE_VERDICT.findall(reply.text)
            if words:  # e.g. "... so the agent should STOP." without the Conclusion label
                stop, rationale = words[-1] == "STOP", reply.text.strip()
                meta["note"] = f"verdict {words[-1]} read from prose (no 'Conclusion:' line)"
            else:
                stop, rationale = False, f"({NO_VERDICT_NOTE}) {reply.text.strip()}"
                meta["note"] = NO_VERDICT_NOTE
        open_questions = parse_open_questions(reply.text)
        if open_questions is None:
            open_questions = () if stop else _previous_open_questions(memory)
        return LLMVerification(
            stop=stop,
            rationale=rationale,
            open_questions=open_questions,
            raw=reply.text,
            meta=meta,
        )


def _previous_open_questions(memory: Memory) -> tuple[str, ...]:
    """Open questions before this turn (the verifier sees a preview ending with this turn)."""
    entries = memory.entries
    if len(entries) >= 2:
        return entries[-2].open_questions
    return memory.analysis.sub_questions if memory.analysis else ()


class LLMGeneralist(_LLMModule):
    """Writes the answer from memory; the short answer is its last ``Answer:`` line."""

    def messages(self, memory: Memory) -> list[dict[str, str]]:
        """The request (a prompt style's generalist overrides it)."""
        return generalist_messages(memory)

    async def answer(self, task: Task, memory: Memory) -> FinalAnswer:
        reply = await self._chat(self.messages(memory))
        answer, note = extract_short_answer(reply.text)
        meta = {**reply.meta(), "note": note}
        memory.log(
            "module_output", len(memory), module="generalist", raw=reply.text, answer=answer, **meta
        )
        return FinalAnswer(answer=answer, text=reply.text.strip(), raw=reply.text, extra=meta)
