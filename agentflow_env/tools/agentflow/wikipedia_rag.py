"""``Wikipedia_RAG_Search_Tool``: passages retrieved for the query, condensed by a model.

Retrieval is the ``Search`` tool's (``SearchTool``): BM25 over the task's corpus, or a Search-R1
retriever server (``retriever_url``, default ``AGENTFLOW_RETRIEVER_URL``). With a model the
passages are condensed to what bears on the query; without one (offline runs with the rule
modules) the raw passages come back, saying so, instead of a failure.

Under ``ToolContext.agentflow_shapes`` (``prompt_style="agentflow"``) it works and answers as
AgentFlow's Wikipedia tool does: the retrieved passages are grouped into pages (one per title),
a model picks the pages (at most three) likely to answer the query, each picked page is answered
from as ``Web_RAG_Search_Tool`` answers from a page, and the result is AgentFlow's dict: the
query, the picked pages with their title, URL, abstract and retrieved information, and the other
pages with their title, URL and abstract. Without a model the best ranked pages are the picked
ones.

``ToolContext.agentflow_wikipedia`` chooses between that result (``"as_intended"``) and the one
AgentFlow's published code really returns (``"as_run"``): its tool cannot build the page reader
it answers pages with (it passes it no model name), so no page is picked and every page found is
listed under the other pages, with the picked-pages key bare. Either way the pages then carry
AgentFlow's URLs (only spaces become underscores, so a quoted title keeps its quotes) and, from
``ToolContext.agentflow_texts``, its abstract ending and its no-results sentence.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from agentflow_env.retrieval.corpus import parse_documents
from agentflow_env.tools.agentflow.metadata import MetadataFacts
from agentflow_env.tools.agentflow.model import (
    DEFAULT_LLM_TIMEOUT_S,
    ChatModel,
    LLMTool,
    ModelCallError,
)
from agentflow_env.tools.agentflow.names import WIKIPEDIA_RAG, short_names_of
from agentflow_env.tools.agentflow.pages import wikipedia_url, wikipedia_url_as_agentflow
from agentflow_env.tools.agentflow.web_rag import page_answer
from agentflow_env.tools.base import ToolCard, ToolContext, ToolResult
from agentflow_env.tools.search import MAX_TOP_K, SearchTool
from agentflow_env.tools.texts import QUERY_FIELD, AgentFlowToolTexts, fill

SYSTEM_PROMPT = (
    "You extract information from reference passages. Report only what the passages say, "
    "never outside knowledge."
)
NO_MODEL_NOTE = "Raw passages (no language model is configured to condense them):"
CONDENSED_HEADER = "Relevant information condensed from {count} retrieved passage(s):"

QUERY_KEY = "query"
RELEVANT_KEY = "relevant_pages (to the query)"
OTHER_KEY = "other_pages (may be irrelevant to the query)"
NO_PAGES_KEY = "relevant_pages"
"""AgentFlow's keys; a search that finds no page has ``relevant_pages`` without the note."""
MAX_PICKED = 3
ABSTRACT_CHARS = 100
NO_PAGES_SENTENCE = "No pages found for the query: {query}"
PICK_SYSTEM_PROMPT = (
    "You choose which encyclopedia pages are most likely to answer a question, judging by "
    "their titles."
)

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
    """``query`` -> the top ``top_k`` passages -> the model's condensed account of them; in
    AgentFlow's shapes, AgentFlow's dict of pages (see the module docstring)."""

    card = CARD
    aliases = short_names_of(WIKIPEDIA_RAG)
    uses_retriever: ClassVar[bool] = True
    """``build_tool`` passes the env's ``retriever_url`` on, as it does to ``Search``."""
    agentflow_facts: ClassVar[MetadataFacts] = MetadataFacts(
        require_llm_engine=False,
        output_type=(
            f"dict - the query; under '{RELEVANT_KEY}' the pages that bear on it, each with "
            "its title, url, abstract and retrieved_information (what the page says about the "
            f"query); under '{OTHER_KEY}' the other pages found, with title, url and abstract"
        ),
    )

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
        # AgentFlow's shape takes two model calls in a row: picking pages, then answering.
        self.timeout_s = 2 * timeout_s + self.search.timeout_s

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        query = str(arguments["query"])
        if context.agentflow_shapes:
            return await self.pages_result(query, context)
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

    async def pages_result(self, query: str, context: ToolContext) -> ToolResult:
        """AgentFlow's dict of the pages found for ``query`` (the result and its text)."""
        found = await self.search.run({"query": query, "top_k": MAX_TOP_K}, context)
        if not found.ok:
            reason = (found.error or "retrieval failed").removeprefix("Search: ")
            return ToolResult.failure(f"{self.name}: {reason}", **found.metadata)
        metadata: dict[str, Any] = dict(found.metadata)
        pages = _pages(parse_documents(found.output))
        mode = context.agentflow_wikipedia
        texts = context.agentflow_texts
        if not pages:
            missing = {"title": None, "url": None, "abstract": None}
            sentence = texts.wikipedia_no_results or NO_PAGES_SENTENCE
            value: dict[str, Any] = {
                QUERY_KEY: query,
                NO_PAGES_KEY: [],
                OTHER_KEY: [{**missing, "error": fill(sentence, QUERY_FIELD, query)}],
            }
            return ToolResult(ok=True, output=str(value), metadata=metadata, value=value)

        def entry(page: tuple[str, str]) -> dict[str, Any]:
            return _page_entry(*page, agentflow_urls=mode is not None, texts=texts)

        if mode == "as_run":  # no page picked, as AgentFlow's code returns it
            metadata["picked_by"] = "none (as AgentFlow's code runs)"
            value = {QUERY_KEY: query, NO_PAGES_KEY: [], OTHER_KEY: [entry(p) for p in pages]}
            return ToolResult(ok=True, output=str(value), metadata=metadata, value=value)
        titles = [title for title, _ in pages]
        picked = await self._pick(query, titles, metadata)
        answers = await asyncio.gather(
            *(self._page_information(query, pages[i][1], metadata) for i in picked)
        )
        relevant = [
            {**entry(pages[i]), "retrieved_information": answer}
            for i, answer in zip(picked, answers, strict=True)
        ]
        others = [entry(page) for i, page in enumerate(pages) if i not in picked]
        value = {QUERY_KEY: query, RELEVANT_KEY: relevant, OTHER_KEY: others}
        metadata["relevant_titles"] = [titles[i] for i in picked]
        return ToolResult(ok=True, output=str(value), metadata=metadata, value=value)

    async def _pick(self, query: str, titles: Sequence[str], metadata: dict[str, Any]) -> list[int]:
        """The indexes of the pages to answer from: the model's choice (none when its call
        fails, as in AgentFlow), or without a model the best ranked ones."""
        if self.llm is None:
            metadata["picked_by"] = "rank"
            return list(range(min(MAX_PICKED, len(titles))))
        listed = "\n".join(f"{i}. {title}" for i, title in enumerate(titles))
        request = (
            f"Question: {query}\n\nPages found:\n{listed}\n\nWhich pages most likely hold "
            f"what the question needs? Give at most {MAX_PICKED} page numbers, most useful "
            "first, as a list such as [0, 2], and nothing else."
        )
        metadata["picked_by"] = "model"
        try:
            reply = await self.ask(PICK_SYSTEM_PROMPT, request)
        except ModelCallError as error:
            metadata["pick_error"] = str(error)
            return []
        return _page_numbers(reply, len(titles))

    async def _page_information(self, query: str, text: str, metadata: dict[str, Any]) -> str:
        try:
            answer, _ = await page_answer(self, query, text)
        except ModelCallError as error:
            metadata.setdefault("answer_errors", []).append(str(error))
            return f"Raw passages (answering from them failed: {error}):\n{text}"
        return answer


def _pages(passages: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The passages grouped into pages by title, in the order the titles first rank."""
    grouped: dict[str, list[str]] = {}
    for title, text in passages:
        grouped.setdefault(title, []).append(text)
    return [(title, "\n".join(texts)) for title, texts in grouped.items()]


def _page_entry(
    title: str, text: str, *, agentflow_urls: bool = False, texts: AgentFlowToolTexts
) -> dict[str, Any]:
    """A page's title, URL and abstract. ``agentflow_urls``: the URL as AgentFlow builds one
    (each space an underscore, nothing else changed); an abstract ending from ``texts`` is
    put after the first ``ABSTRACT_CHARS`` characters as they are."""
    end = texts.wikipedia_abstract_end
    if len(text) <= ABSTRACT_CHARS:
        abstract = text
    elif end is None:
        abstract = text[:ABSTRACT_CHARS].rstrip() + " ..."
    else:
        abstract = text[:ABSTRACT_CHARS] + end
    url = wikipedia_url_as_agentflow(title) if agentflow_urls else wikipedia_url(title)
    return {"title": title, "url": url, "abstract": abstract}


def _page_numbers(reply: str, count: int) -> list[int]:
    """The page numbers in the model's reply (its last bracketed list, else any numbers):
    valid ones, each once, at most ``MAX_PICKED``."""
    lists = re.findall(r"\[([^\[\]]*)\]", reply)
    numbers = re.findall(r"\d+", lists[-1] if lists else reply)
    picked: list[int] = []
    for number in map(int, numbers):
        if number < count and number not in picked:
            picked.append(number)
    return picked[:MAX_PICKED]


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
