"""Search over the episode's corpus (BM25, dense or hybrid), or over a remote retriever server.

Both paths format their hits with ``format_documents``, so a query gives the same tool output
locally and against ``agentflow-env serve-retriever`` on the same corpus and retriever.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow_env.base.settings import read_env_var
from agentflow_env.retrieval.corpus import Corpus, Document, format_documents
from agentflow_env.retrieval.dense import (
    DEFAULT_DENSE_MODEL,
    check_dense_dependencies,
    get_encoder,
)
from agentflow_env.retrieval.hybrid import check_retriever, get_searcher
from agentflow_env.retrieval.remote import RemoteRetriever, RetrieverError, retriever_urls
from agentflow_env.tools.base import Tool, ToolArgumentError, ToolCard, ToolContext, ToolResult

MAX_TOP_K = 10
RETRIEVER_URL_ENV_VAR = "AGENTFLOW_RETRIEVER_URL"
TRUNCATION_MARKER = " ..."
# Building or querying an index this large takes long enough to move it off the event loop.
_THREAD_THRESHOLD_DOCS = 50_000
# How each retriever matches: the card's description opening and its limitation line.
_MATCHING = {
    "bm25": (
        "Keyword",
        "matches words, not meaning: use the names and terms the documents would contain",
    ),
    "dense": (
        "Semantic",
        "matches meaning by text embeddings: describe the entity or fact sought; rare names "
        "may match loosely",
    ),
    "hybrid": (
        "Keyword and semantic",
        "combines word matches and meaning: use the names and terms the documents would contain",
    ),
}


class SearchTool(Tool):
    """Search; returns the top documents' titles and text.

    Searches ``context.corpus`` locally with ``retriever`` (``"bm25"`` keywords, ``"dense"``
    embeddings of ``dense_model``, or ``"hybrid"``: both fused by reciprocal rank; see
    ``agentflow_env.retrieval.hybrid``), or, given ``retriever_url`` (default: the
    ``AGENTFLOW_RETRIEVER_URL`` environment variable; pass ``""`` to force local search), asks
    that Search-R1 style retriever server (several replicas: a list of URLs, or one string of
    comma-separated URLs, balanced by ``RemoteRetriever``) and ignores ``context.corpus`` (the
    server ranks as it was started to; ``retriever`` then only words the tool card). An
    unreachable server gives a failed ``ToolResult`` after ``max_retries`` retries, never an
    exception. A local dense model is loaded here, so a
    missing package or model fails when the tool is made, not at the first search.
    """

    def __init__(
        self,
        top_k: int = 3,
        max_chars_per_document: int = 2000,
        retriever_url: str | Sequence[str] | None = None,
        retriever_timeout_s: float = 5.0,
        max_retries: int = 2,
        retriever: str = "bm25",
        dense_model: str | None = None,
    ) -> None:
        if max_chars_per_document < 1:
            raise ValueError(f"max_chars_per_document must be >= 1, got {max_chars_per_document}")
        check_retriever(retriever)
        self.top_k = _clamp_top_k(top_k)
        self.max_chars_per_document = max_chars_per_document
        self.retriever = retriever
        self.dense_model = dense_model or DEFAULT_DENSE_MODEL
        if retriever_url is None:
            retriever_url = read_env_var(RETRIEVER_URL_ENV_VAR) or ""
        self.remote: RemoteRetriever | None = None
        urls = retriever_urls(retriever_url)
        if urls:
            self.remote = RemoteRetriever(urls, retriever_timeout_s, max_retries)
            # Let every try run; the session still caps this with its own tool_timeout_s.
            self.timeout_s = self.remote.worst_case_s() + 1.0
        elif retriever != "bm25":
            check_dense_dependencies()
            get_encoder(self.dense_model)
        how, matches = _MATCHING[retriever]
        self.card = ToolCard(
            name="Search",
            description=(
                f"{how} search over the document collection of this task. Returns the best "
                "matching documents, each as its title followed by its text."
            ),
            input_schema={
                "query": {
                    "type": "string",
                    "description": "keywords: an entity name or a short fact to look up",
                    "required": True,
                },
                "top_k": {
                    "type": "integer",
                    "description": f"how many documents to return (1-{MAX_TOP_K}, default {self.top_k})",
                    "required": False,
                },
            },
            output_type="ranked documents: '[rank] title' then the text; 'No results.' if none match",
            primary_argument="query",
            demo_commands=(
                {
                    "command": 'Search(query="Marie Curie")',
                    "description": "look up the document about an entity",
                },
                {
                    "command": 'Search(query="Eiffel Tower completion year", top_k=5)',
                    "description": "look up one fact, returning more documents",
                },
            ),
            limitations=(
                f"returns at most {MAX_TOP_K} short documents; search one entity or fact at a time",
                matches,
                f"long documents are cut after {max_chars_per_document} characters",
            ),
        )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        try:
            args = self.validate(arguments)
        except ToolArgumentError as error:
            return ToolResult.failure(str(error))
        top_k = _clamp_top_k(args.get("top_k", self.top_k))
        if self.remote is not None:
            try:
                hits = await self.remote.search(args["query"], top_k)
            except RetrieverError as error:
                return ToolResult.failure(f"Search: {error}", kind="retriever")
            return self._result(hits)
        corpus = context.corpus
        if corpus is None:
            return ToolResult.failure("Search: no document collection is available in this task")
        if self.retriever != "bm25" or len(corpus) > _THREAD_THRESHOLD_DOCS:
            hits = await asyncio.to_thread(self._search, corpus, args["query"], top_k)
        else:
            hits = self._search(corpus, args["query"], top_k)
        return self._result(hits)

    def _search(self, corpus: Corpus, query: str, top_k: int) -> list[tuple[Document, float]]:
        return get_searcher(corpus, self.retriever, self.dense_model).search(query, top_k)

    def _result(self, hits: list[tuple[Document, float]]) -> ToolResult:
        if not hits:
            return ToolResult(ok=True, output="No results.", metadata={"doc_ids": [], "scores": []})
        shown = [self._shorten(doc) for doc, _ in hits]
        return ToolResult(
            ok=True,
            output=format_documents(shown),
            metadata={
                "doc_ids": [doc.doc_id for doc, _ in hits],
                "scores": [score for _, score in hits],
            },
        )

    def _shorten(self, doc: Document) -> Document:
        if len(doc.text) <= self.max_chars_per_document:
            return doc
        cut = doc.text[: self.max_chars_per_document].rstrip()
        return Document(doc.doc_id, doc.title, cut + TRUNCATION_MARKER)


def _clamp_top_k(top_k: int) -> int:
    return max(1, min(MAX_TOP_K, int(top_k)))


__all__ = ["MAX_TOP_K", "RETRIEVER_URL_ENV_VAR", "TRUNCATION_MARKER", "SearchTool"]
