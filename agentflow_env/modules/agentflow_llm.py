"""LLM frozen modules speaking AgentFlow's formats (``prompt_style="agentflow"``).

The same roles as ``agentflow_env.modules.llm`` with AgentFlow's prompts
(``agentflow_prompts``): the analysis in four sections, the executor writing an
``execution = tool.execute(...)`` command from the planner's Context and Sub-Goal (read, never
run), the verifier seeing the ``Action Step`` memory, and the generalist's direct answer.
"""

from __future__ import annotations

from typing import Any

from agentflow_env.llm.client import ChatBackend, LLMEndpoint
from agentflow_env.modules.agentflow_prompts import (
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
]


class _AgentFlowModule(_LLMModule):
    """An LLM module in AgentFlow's format; ``wording``: AgentFlow's own words, read from the
    user's checkout (``agentflow_source``), else this project's."""

    def __init__(
        self, backend: LLMEndpoint | ChatBackend, wording: PromptPack | None = None
    ) -> None:
        super().__init__(backend)
        self.wording = wording


class AgentFlowInitializer(_AgentFlowModule):
    """The query analysis: Concise Summary, Required Skills, Relevant Tools, Additional
    Considerations; the planner sees the four sections as written. Under AgentFlow's own
    analysis prompt (a checkout's), which asks for free text, a reply that is not a JSON object
    with the four keys is shown as written, as AgentFlow shows a text reply."""

    async def analyze(self, task: Task, tools: ToolSet) -> QueryAnalysis:
        reply = await self._chat(analysis_messages(task.question, tools, self.wording))
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
            meta=reply.meta(),
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


class AgentFlowGeneralist(LLMGeneralist):
    """AgentFlow's direct output: a process summary, then ``Answer:``."""

    def __init__(
        self, backend: LLMEndpoint | ChatBackend, wording: PromptPack | None = None
    ) -> None:
        super().__init__(backend)
        self.wording = wording

    def messages(self, memory: Memory) -> list[dict[str, str]]:
        return generalist_messages(memory, self.wording)


def _lines(text: str) -> list[str]:
    return [line.strip(" -*\u2022\t") for line in text.splitlines() if line.strip(" -*\u2022\t")]
