"""LLM frozen modules speaking AgentFlow's formats (``prompt_style="agentflow"``).

The same roles as ``agentflow_env.modules.llm`` with AgentFlow's prompts
(``agentflow_prompts``): the analysis in four sections, the executor writing an
``execution = tool.execute(...)`` command from the planner's Context and Sub-Goal (read, never
run), the verifier seeing the ``Action Step`` memory, and the generalist's direct answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentflow_env.llm.client import ChatBackend, ChatResult, LLMEndpoint, ResponseFormatError
from agentflow_env.modules.agentflow_calls import (
    STRUCTURED,
    STRUCTURED_REFUSED,
    STRUCTURED_UNREAD,
    analysis_format,
    module_sampling,
    read_structured,
    shown_analysis,
)
from agentflow_env.modules.agentflow_prompts import (
    ANALYSIS_SECTIONS,
    CommandError,
    analysis_as_text,
    analysis_messages,
    command_messages,
    generalist_messages,
    read_analysis,
    read_command,
    read_structured_analysis,
    verifier_messages,
)
from agentflow_env.modules.llm import (
    NO_VERDICT_NOTE,
    LLMGeneralist,
    LLMQueryAnalysis,
    LLMVerification,
    _LLMModule,
)
from agentflow_env.tasks.base import Task
from agentflow_env.tools.base import Tool, ToolArgumentError
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.actions import PlannerAction, parse_verdict
from agentflow_env.workflow.frozen_modules import Verification
from agentflow_env.workflow.memory import Memory, QueryAnalysis
from agentflow_env.workflow.prompt_pack import PromptPack

__all__ = [
    "AgentFlowExecutor",
    "AgentFlowGeneralist",
    "AgentFlowInitializer",
    "AgentFlowVerifier",
    "StructuredQueryAnalysis",
]


class _AgentFlowModule(_LLMModule):
    """An LLM module in AgentFlow's format; ``wording``: AgentFlow's own words, read from the
    user's checkout (``agentflow_source``), else this project's. ``script``: AgentFlow's script
    reproduced (``agentflow_script``); under one, each call sends the ``max_tokens`` and
    ``top_p`` of AgentFlow's engine for the endpoint (``agentflow_calls``)."""

    def __init__(
        self,
        backend: LLMEndpoint | ChatBackend,
        wording: PromptPack | None = None,
        script: str | None = None,
    ) -> None:
        super().__init__(backend)
        self.wording = wording
        self.script = script
        self.sampling = module_sampling(self.backend, wording, script)

    async def _chat(self, messages: list[dict[str, str]], **options: Any) -> ChatResult:
        return await super()._chat(messages, **{**self.sampling, **options})


@dataclass(frozen=True)
class StructuredQueryAnalysis(LLMQueryAnalysis):
    """An analysis read from a structured reply; ``shown``: the text AgentFlow's analysis class
    gives for it (its ``__str__``, unstripped), which AgentFlow's direct-answer prompt shows."""

    shown: str = ""


class AgentFlowInitializer(_AgentFlowModule):
    """The query analysis: Concise Summary, Required Skills, Relevant Tools, Additional
    Considerations; the planner sees the four sections as written. Under AgentFlow's own
    analysis prompt (a checkout's), which asks for free text, a reply that is not a JSON object
    with the four keys is shown as written, as AgentFlow shows a text reply.

    Under AgentFlow's scripts (``script``) with a checkout whose analysis call passes a
    ``response_format`` class, the reply is asked for as that class's JSON fields and shown as the
    class shows itself (``agentflow_calls``); an endpoint that refuses the format is asked again
    for free text (and for free text only from then on), and ``meta["response_format"]`` records
    how it was asked."""

    refusal: str | None = None
    """Why the endpoint refused the structured format, once it has."""

    async def analyze(self, task: Task, tools: ToolSet) -> QueryAnalysis:
        messages = analysis_messages(task.question, tools, self.wording)
        wanted = analysis_format(self.backend, self.wording, self.script)
        if wanted is None:
            return self._read(task, tools, await self._chat(messages))
        if self.refusal is not None:  # the endpoint refused it before: not asked again
            refused = {"response_format": STRUCTURED_REFUSED, "refusal": self.refusal}
            return self._read(task, tools, await self._chat(messages), refused)
        asked: dict[str, Any] = {"response_format": STRUCTURED}
        try:
            reply = await self._chat(messages, response_format=wanted)
        except ResponseFormatError as error:
            self.refusal = str(error)[-300:]
            reply = await self._chat(messages)
            asked = {"response_format": STRUCTURED_REFUSED, "refusal": self.refusal}
            return self._read(task, tools, reply, asked)
        assert self.wording is not None  # analysis_format gives a format only with a pack
        values = read_structured(reply.text, self.wording.analysis_fields)
        if values is None:
            return self._read(task, tools, reply, {"response_format": STRUCTURED_UNREAD})
        shown = shown_analysis(self.wording, values)
        sections = {key: values.get(key, "") for key in ANALYSIS_SECTIONS}
        mentioned = tuple(name for name in tools.names if name in sections["relevant_tools"])
        return StructuredQueryAnalysis(
            objective=sections["concise_summary"] or f"Answer the question: {task.question}",
            tools=mentioned or tuple(tools.names),
            skills=tuple(_lines(sections["required_skills"])),
            constraints=tuple(_lines(sections["additional_considerations"])),
            text=shown.strip(),
            raw=reply.text,
            meta={**reply.meta(), **asked},
            shown=shown,
        )

    def _read(
        self,
        task: Task,
        tools: ToolSet,
        reply: ChatResult,
        asked: dict[str, Any] | None = None,
    ) -> QueryAnalysis:
        """The analysis from a free-text reply (``asked``: how a structured one was asked for,
        kept in its ``meta``)."""
        as_written = self.wording is not None and read_structured_analysis(reply.text) is None
        sections = read_analysis(reply.text)
        missing = [key for key, value in sections.items() if not value]
        mentioned = tuple(name for name in tools.names if name in sections["relevant_tools"])
        note = f"sections missing from the reply: {missing}" if missing else None
        return LLMQueryAnalysis(
            objective=sections["concise_summary"] or f"Answer the question: {task.question}",
            tools=mentioned or tuple(tools.names),
            skills=tuple(_lines(sections["required_skills"])),
            constraints=tuple(_lines(sections["additional_considerations"])),
            text=reply.text.strip() if as_written else analysis_as_text(sections),
            raw=reply.text,
            note=None if as_written else note,
            meta={**reply.meta(), **(asked or {})},
        )


class AgentFlowExecutor(_AgentFlowModule):
    """Writes ``execution = tool.execute(...)`` from the planner's Context and Sub-Goal; the
    call's literal arguments are validated against the tool's schema, never executed. An
    unreadable command falls back to ``{primary argument: Sub-Goal}``."""

    async def command(
        self, action: PlannerAction, tool: Tool, task: Task, memory: Memory
    ) -> dict[str, Any]:
        messages = command_messages(
            task.question, action.sub_goal, action.context, tool, self.wording
        )
        reply = await self._chat(messages)
        note = None
        command = ""
        try:
            arguments, command = read_command(reply.text, tool)
            arguments = tool.validate(arguments)
        except (CommandError, ToolArgumentError) as error:
            fallback = action.sub_goal.strip() or action.context.strip()
            arguments = {tool.card.primary_argument: fallback}
            note = f"unusable command ({error}); used the planner's Sub-Goal"
        memory.log(
            "module_output",
            len(memory) + 1,
            module="executor",
            raw=reply.text,
            command=command,
            arguments=dict(arguments),
            note=note,
            **reply.meta(),
        )
        return arguments

    async def command_reply(
        self, action: PlannerAction, tool: Tool, task: Task, memory: Memory
    ) -> str:
        """The executor model's reply itself, for the turn to read and run as AgentFlow does
        (under its scripts: ``workflow.agentflow_command``); nothing of it is run here."""
        messages = command_messages(
            task.question, action.sub_goal, action.context, tool, self.wording
        )
        reply = await self._chat(messages)
        memory.log(
            "module_output",
            len(memory) + 1,
            module="executor",
            raw=reply.text,
            **reply.meta(),
        )
        return reply.text


class AgentFlowVerifier(_AgentFlowModule):
    """Judges the ``Action Step`` memory; ends with ``Conclusion: STOP|CONTINUE`` (none: CONTINUE).
    AgentFlow's verifier names no open questions."""

    async def verify(self, task: Task, memory: Memory) -> Verification:
        tools = memory.tools if memory.tools is not None else ToolSet([])
        reply = await self._chat(verifier_messages(memory, tools, self.wording))
        meta: dict[str, Any] = reply.meta()
        verdict = parse_verdict(reply.text)
        if verdict is None:
            meta["note"] = NO_VERDICT_NOTE
            return LLMVerification(False, reply.text.strip(), (), raw=reply.text, meta=meta)
        return LLMVerification(verdict.stop, verdict.rationale, (), raw=reply.text, meta=meta)


class AgentFlowGeneralist(_AgentFlowModule, LLMGeneralist):
    """AgentFlow's direct output: a process summary, then ``Answer:``."""

    def messages(self, memory: Memory) -> list[dict[str, str]]:
        return generalist_messages(memory, self.wording)


def _lines(text: str) -> list[str]:
    return [line.strip(" -*\u2022\t") for line in text.splitlines() if line.strip(" -*\u2022\t")]
