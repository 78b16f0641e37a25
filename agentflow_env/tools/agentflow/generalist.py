"""``Generalist_Solution_Generator_Tool``: a language model answers a sub-query on its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from agentflow_env.tools.agentflow.metadata import MetadataFacts
from agentflow_env.tools.agentflow.model import LLMTool, ModelCallError
from agentflow_env.tools.agentflow.names import GENERALIST, short_names_of
from agentflow_env.tools.base import ToolCard, ToolContext, ToolResult

SYSTEM_PROMPT = (
    "You are a careful general-purpose assistant. Work through the request step by step, "
    "using only what it states and what you reliably know, and end with a clear, direct answer."
)

CARD = ToolCard(
    name=GENERALIST,
    description=(
        "Hands a question or small task to a general-purpose language model, which reasons it "
        "through step by step and writes back its answer. It uses no other tool: only what the "
        "model knows and what the query itself says."
    ),
    input_schema={
        "query": {
            "type": "string",
            "description": (
                "the question or instruction for the model, with every detail it needs "
                "(the model sees nothing but this text)"
            ),
            "required": True,
        },
    },
    output_type="str - the model's written answer to the query",
    primary_argument="query",
    demo_commands=(
        {
            "command": f'{GENERALIST}(query="Summarize in two sentences: <the passage>")',
            "description": "condense a passage given in the query",
        },
        {
            "command": f'{GENERALIST}(query="Is 221 a prime number? Reason step by step.")',
            "description": "reason through a short question",
        },
    ),
    limitations=(
        "the answer may be wrong or made up (hallucinated); nothing checks it against a source",
        "the model sees only the query: results of earlier steps must be pasted into it",
        "no access to the web, to the task's documents or to code execution",
    ),
    best_practices=(
        "use it for reasoning, summarizing or rewording when no specialized tool fits",
        "write a clear, self-contained query that includes the facts it should work from",
        "split a complicated question into parts and call it once per part",
        "check important claims with a search or code tool before relying on them",
    ),
)


class GeneralistSolutionGeneratorTool(LLMTool):
    """The model's answer to ``query``, as text."""

    card = CARD
    aliases = short_names_of(GENERALIST)
    agentflow_facts: ClassVar[MetadataFacts] = MetadataFacts(require_llm_engine=True)

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        try:
            answer = await self.ask(SYSTEM_PROMPT, str(arguments["query"]))
        except ModelCallError as error:
            return error.result()
        return ToolResult(ok=True, output=answer)


__all__ = ["GeneralistSolutionGeneratorTool"]
