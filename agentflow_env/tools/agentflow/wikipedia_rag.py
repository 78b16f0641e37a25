"""``Wikipedia_RAG_Search_Tool``: passages retrieved for the query, condensed by a model.

Retrieval is the ``Search`` tool's (``SearchTool``): BM25 over the task's corpus, or a Search-R1
retriever server (``retriever_url``, default ``AGENTFLOW_RETRIEVER_URL``). With a model the
passages are condensed to what bears on the query; without one (offline runs with the rule
modules) the raw passages come back, saying so, instead of a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from agentflow_env.tools.agentflow.model import (
    DEFAULT_LLM_TIMEOUT_S,
    ChatModel,
    LLMTool,
    ModelCallError,
)
from agentflow_env.tools.agentflow.names import WIKIPEDIA_RAG, short_names_of
from agentflow_env.tools.base import ToolCard, ToolContext, ToolResult
from agentflow_env.tools.search import SearchTool

SYSTEM_PROMPT = (
    "You extract information from reference passages. Report only what the passages say, "
    "never outside knowledge."
)
NO_MODEL_NOTE = "Raw passages (no language model is configured to condense them):"
CONDENSED_HEADER = "Relevant information condensed from {count} retrieved passage(s):"

CARD = ToolCard(
    name=WIKIPEDIA_RAG,
    description=(
        "Retrieves the Wikipedia-style articles of this task's document collection that best "
        "match the query, and has a language model keep only the parts that bear on it, "
        "naming the articles they come from."
    ),
    input_schema={
        "query": {
            "type": "string",
            "description": "what to look up: an entity, a fact or a short question",
            "required": True,
        },
    },
    output_type=(
        "str - the relevant information from the top passages with their article titles "
        "(the raw passages when no model is configured)"
    ),
    primary_argument="query",
    demo_commands=(
        {
            "command": f'{WIKIPEDIA_RAG}(query="When was the Eiffel Tower completed?")',
            "description": "look up one fact",
        },
        {
            "command": f'{WIKIPEDIA_RAG}(query="Marie Curie")',
            "description": "gather what the articles say about an entity",
        },
    ),
    limitations=(
        "searches only this task's article collection (or its retriever server), not the web",
        "retrieval matches words: an article that words things differently can be missed",
        "the condensing model can leave out or misstate details of the passages",
    ),
    best_practices=(
        "look up one specific entity or fact per call",
        "use the names and words an encyclopedia article would use",
        "if the answer is missing, rephrase, or look up a related entity the results name",
        "use it as one step of a multi-step search rather than as the final word",
    ),
)


class WikipediaRAGSearchTool(LLMTool):
    """``query`` -> the top ``top_k`` passages -> the model's condensed account of them."""

    card = CARD
    aliases = short_names_of(WIKIPEDIA_RAG)
    uses_retriever: ClassVar[bool] = True
    """``build_tool`` passes the env's ``retriever_url`` on, as it does to ``Search``."""

    def __init__(
        self,
        llm: ChatModel | None = None,
        timeout_s: float = DEFAULT_LLM_TIMEOUT_S,
        top_k: int = 5,
        max_chars_per_document: int = 1500,
        retriever_url: str | None = None,
        retriever_timeout_s: float = 5.0,
        max_retries: int = 2,
    ) -> None:
        super().__init__(llm, timeout_s)
        self.search = SearchTool(
            top_k=top_k,
            max_chars_per_document=max_chars_per_document,
            retriever_url=retriever_url,
            retriever_timeout_s=retriever_timeout_s,
            max_retries=max_retries,
        )
        self.timeout_s = timeout_s + self.search.timeout_s

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        query = str(arguments["query"])
        found = await self.search.run({"query": query}, context)
        if not found.ok:
            reason = (found.error or "retrieval failed").removeprefix("Search: ")
            return ToolResult.failure(f"{self.name}: {reason}", **found.metadata)
        metadata = dict(found.metadata)
        if not metadata.get("doc_ids"):
            return ToolResult(ok=True, output="No results.", metadata=metadata)
        if self.llm is None:
            metadata["condensed"] = False
            return ToolResult(ok=True, output=f"{NO_MODEL_NOTE}\n{found.output}", metadata=metadata)
        try:
            summary = await self.ask(SYSTEM_PROMPT, _condense_request(query, found.output))
        except ModelCallError as error:
            metadata.update(condensed=False, condense_error=str(error))
            note = f"Raw passages (condensing them failed: {error}):"
            return ToolResult(ok=True, output=f"{note}\n{found.output}", metadata=metadata)
        metadata["condensed"] = True
        header = CONDENSED_HEADER.format(count=len(metadata["doc_ids"]))
        return ToolResult(ok=True, output=f"{header}\n{summary}", metadata=metadata)


def _condense_request(query: str, passages: str) -> str:
    return (
        f"Query: {query}\n\nPassages (each starts with [rank] and its article title):\n"
        f"{passages}\n\n"
        "Write the facts from these passages that help answer the query, as a short paragraph "
        "or a few bullet points, naming the article title each fact comes from. Keep names, "
        "dates and numbers exactly as written. If no passage is relevant, write: "
        "No relevant information in the retrieved passages."
    )


__all__ = ["WikipediaRAGSearchTool"]
