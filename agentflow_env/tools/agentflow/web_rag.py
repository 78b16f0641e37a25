"""``Web_RAG_Search_Tool``: a model answers a query from the text of one page.

AgentFlow's planner is shown this tool beside its four configured ones (see ``AGENTFLOW_TOOLS``).
As there, the page's words are cut into overlapping chunks (200 words, 20 shared), the chunks
that best match the query are kept (here by BM25, where AgentFlow embeds them) and a model
answers from those. Where the page comes from: ``agentflow_env.tools.agentflow.pages``. Without
a model (offline runs with the rule modules) the best chunks come back as they are, saying so.
``Wikipedia_RAG_Search_Tool`` answers from its relevant pages the same way (``page_answer``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from agentflow_env.retrieval.bm25 import BM25Index, tokenize_for_search
from agentflow_env.retrieval.corpus import Corpus, Document, parse_documents
from agentflow_env.tools.agentflow.metadata import MetadataFacts
from agentflow_env.tools.agentflow.model import (
    DEFAULT_LLM_TIMEOUT_S,
    ChatModel,
    LLMTool,
    ModelCallError,
)
from agentflow_env.tools.agentflow.names import WEB_RAG, short_names_of
from agentflow_env.tools.agentflow.pages import (
    PageError,
    fetch_page,
    is_url,
    read_local_page,
    same_title,
    title_of,
    web_fetch_allowed,
)
from agentflow_env.tools.base import ToolCard, ToolContext, ToolResult
from agentflow_env.tools.search import MAX_TOP_K, SearchTool

CHUNK_WORDS = 200
CHUNK_OVERLAP = 20
TOP_CHUNKS = 10
RAW_CHUNKS = 3
"""How many of the best chunks come back as they are when there is no model to answer."""
_THREAD_THRESHOLD_CHARS = 100_000

SYSTEM_PROMPT = (
    "You answer questions from excerpts of one web page. Use only what the excerpts say, "
    "never outside knowledge, and keep names, dates and numbers exactly as written."
)
NO_MODEL_NOTE = "Best matching parts of the page (no language model is configured to answer):"

CARD = ToolCard(
    name=WEB_RAG,
    description=(
        "Reads the page at a given URL and has a language model answer the query from the "
        "parts of the page that best match it. A Wikipedia URL or a bare article title opens "
        "that article of this task's document collection."
    ),
    input_schema={
        "query": {
            "type": "string",
            "description": "the question to answer from the page",
            "required": True,
        },
        "url": {
            "type": "string",
            "description": "the URL of the page to read (or the title of an article)",
            "required": True,
        },
    },
    output_type="str - the answer to the query drawn from the page's text",
    primary_argument="query",
    demo_commands=(
        {
            "command": (
                f'{WEB_RAG}(query="How long is the Danube?", '
                'url="https://en.wikipedia.org/wiki/Danube")'
            ),
            "description": "answer a question from one Wikipedia article",
        },
        {
            "command": (
                f'{WEB_RAG}(query="What does the package install?", '
                'url="https://example.org/docs/install")'
            ),
            "description": "answer a question from a page found by an earlier search",
        },
    ),
    limitations=(
        "needs a URL that can be opened and holds text; pages built by scripts or behind a "
        "login give little or nothing",
        "only the parts of the page that best match the query's words are read, so context "
        "elsewhere on the page can be missed",
        "the answer is only as complete and correct as the page it comes from",
        "the answering model can leave out or misstate details",
    ),
    best_practices=(
        "ask one specific question per call",
        "use a URL returned by a search step, or the title of an article found earlier",
        "split a broad question into narrower ones and call the tool once for each",
        "check important facts against a second source",
    ),
)


@dataclass(frozen=True)
class Page:
    """A page's text and where it came from (``corpus``, ``file`` or ``http``)."""

    text: str
    source: str


class WebRAGSearchTool(LLMTool):
    """``query`` and ``url`` -> the page's best matching chunks -> the model's answer.

    ``allow_http`` lets it fetch web pages (default: the ``AGENTFLOW_WEB_FETCH`` variable,
    else off); ``pages_dir`` is the one directory ``file://`` URLs may read from. A Wikipedia
    URL or a title is looked up among the task's documents first (through the same search as
    ``Search``: the task's corpus or the retriever server).
    """

    card = CARD
    aliases = short_names_of(WEB_RAG)
    uses_retriever: ClassVar[bool] = True
    """``build_tool`` passes the env's ``retriever_url`` on, as it does to ``Search``."""
    agentflow_facts: ClassVar[MetadataFacts] = MetadataFacts(require_llm_engine=True)

    def __init__(
        self,
        llm: ChatModel | None = None,
        timeout_s: float = DEFAULT_LLM_TIMEOUT_S,
        allow_http: bool | None = None,
        pages_dir: str | os.PathLike[str] | None = None,
        fetch_timeout_s: float = 10.0,
        retriever_url: str | None = None,
        retriever_timeout_s: float = 5.0,
        max_retries: int = 2,
    ) -> None:
        super().__init__(llm, timeout_s)
        if fetch_timeout_s <= 0:
            raise ValueError(f"fetch_timeout_s must be > 0, got {fetch_timeout_s}")
        self.allow_http = web_fetch_allowed(allow_http)
        self.pages_dir = pages_dir
        self.fetch_timeout_s = fetch_timeout_s
        self.search = SearchTool(
            top_k=MAX_TOP_K,
            max_chars_per_document=100_000,
            retriever_url=retriever_url,
            retriever_timeout_s=retriever_timeout_s,
            max_retries=max_retries,
        )
        # A title takes two searches; a web page one fetch; then the model's answer.
        self.timeout_s = timeout_s + max(fetch_timeout_s, 2 * self.search.timeout_s)

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        query, url = str(arguments["query"]), str(arguments["url"]).strip()
        try:
            page = await self.open(url, context, query)
        except PageError as error:
            return ToolResult.failure(f"{self.name}: {error}", kind=error.kind, url=url)
        metadata: dict[str, Any] = {"url": url, "source": page.source, "page_chars": len(page.text)}
        try:
            answer, answered = await page_answer(self, query, page.text)
        except ModelCallError as error:
            return error.result(**metadata)
        metadata["answered"] = answered
        return ToolResult(ok=True, output=answer, metadata=metadata)

    async def open(self, url: str, context: ToolContext, query: str = "") -> Page:
        """The page ``url`` names; ``PageError`` when it cannot be had."""
        if url.lower().startswith("file://"):
            return Page(read_local_page(url, self.pages_dir), "file")
        title = title_of(url)
        if title is not None:
            text = await self.document_text(title, query, context)
            if text:
                return Page(text, "corpus")
            if not is_url(url):
                raise PageError(f"no article titled {title!r} in this task's document collection")
        if not self.allow_http:
            raise PageError(
                f"cannot open {url}: it is not an article of this task's document collection, "
                "and fetching web pages is off (set AGENTFLOW_WEB_FETCH=1, or give the tool "
                '"allow_http": true)',
                kind="config",
            )
        return Page(await fetch_page(url, timeout_s=self.fetch_timeout_s), "http")

    async def document_text(self, title: str, query: str, context: ToolContext) -> str:
        """The task's documents titled ``title``, joined ("" when there are none, or no
        collection). They are found by searching for the title, alone and with the query (a long
        article's passages on the query rank there), so a corpus of any size needs no title
        index. ``PageError`` when the retriever server cannot be reached."""
        texts: list[str] = []
        for words in (title, f"{title} {query}".strip()):
            found = await self.search.run({"query": words, "top_k": MAX_TOP_K}, context)
            if found.metadata.get("kind") == "retriever":  # the server is down: say so
                reason = (found.error or "").removeprefix("Search: ")
                raise PageError(f"cannot look up {title!r}: {reason}", kind="retriever")
            if not found.ok:  # no document collection in this task
                return ""
            for name, text in parse_documents(found.output):
                if same_title(name, title) and text not in texts:
                    texts.append(text)
        return "\n".join(texts)


async def page_answer(tool: LLMTool, query: str, text: str) -> tuple[str, bool]:
    """The answer to ``query`` from ``text``, and whether a model wrote it (without a model:
    the best matching chunks as they are). ``ModelCallError`` when the model fails."""
    if len(text) > _THREAD_THRESHOLD_CHARS:  # indexing a long page would hold the event loop
        chunks = await asyncio.to_thread(best_chunks, query, text)
    else:
        chunks = best_chunks(query, text)
    if tool.llm is None:
        excerpts = "\n\n".join(chunks[:RAW_CHUNKS])
        return f"{NO_MODEL_NOTE}\n{excerpts}", False
    numbered = "\n\n".join(f"[{rank}] {chunk}" for rank, chunk in enumerate(chunks, start=1))
    request = (
        f"Question: {query}\n\nExcerpts of the page, best matching first:\n{numbered}\n\n"
        "Answer the question in one short paragraph of your own words, using only facts from "
        "the excerpts. If they do not answer it, say what they do say about it."
    )
    return await tool.ask(SYSTEM_PROMPT, request), True


def chunk_words(text: str, size: int = CHUNK_WORDS, overlap: int = CHUNK_OVERLAP) -> list[str]:
    """``text``'s words in chunks of ``size`` words, each sharing ``overlap`` with the last."""
    words = text.split()
    chunks: list[str] = []
    start = 0
    while True:
        chunks.append(" ".join(words[start : start + size]))
        if start + size >= len(words):
            return chunks
        start += size - overlap


def best_chunks(query: str, text: str, top: int = TOP_CHUNKS) -> list[str]:
    """The ``top`` chunks of ``text`` that best match ``query`` (BM25), best first; the page's
    first chunks fill the list when fewer match."""
    chunks = chunk_words(text)
    ranked: list[int] = []
    if len(chunks) > 1 and tokenize_for_search(query):
        documents = [Document(str(i), "", chunk) for i, chunk in enumerate(chunks)]
        index = BM25Index(Corpus.from_documents(documents, corpus_id="page"))
        ranked = [int(doc.doc_id) for doc, _ in index.search(query, top)]
    ranked += [i for i in range(len(chunks)) if i not in ranked]
    return [chunks[i] for i in ranked[:top]]


__all__ = [
    "CHUNK_OVERLAP",
    "CHUNK_WORDS",
    "NO_MODEL_NOTE",
    "Page",
    "WebRAGSearchTool",
    "best_chunks",
    "chunk_words",
    "page_answer",
]
