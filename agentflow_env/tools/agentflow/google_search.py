"""``Ground_Google_Search_Tool``: web results from a Serper-compatible search API.

The API's URL and key come from the tool's options (``api_url``, ``api_key``) or from
``AGENTFLOW_SEARCH_API_URL`` / ``AGENTFLOW_SEARCH_API_KEY`` (the URL defaults to
google.serper.dev). Without a key every call fails with a recorded error saying how to set one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from agentflow_env.tools.agentflow.metadata import MetadataFacts
from agentflow_env.tools.agentflow.names import GOOGLE_SEARCH, short_names_of
from agentflow_env.tools.agentflow.web_search import (
    SEARCH_API_KEY_ENV_VAR,
    SEARCH_API_URL_ENV_VAR,
    SerperClient,
    WebResults,
    WebSearchError,
    search_api_settings,
)
from agentflow_env.tools.base import Tool, ToolCard, ToolContext, ToolResult

MAX_RESULTS = 10

CARD = ToolCard(
    name=GOOGLE_SEARCH,
    description=(
        "Searches the web and returns the top results, each with its title and a snippet of "
        "the page; with citations on, the results are numbered and each gives its source link."
    ),
    input_schema={
        "query": {
            "type": "string",
            "description": "the question or the keywords to search the web for",
            "required": True,
        },
        "add_citations": {
            "type": "boolean",
            "description": "number the results and give each one's link (default true)",
            "required": False,
        },
    },
    output_type="str - the top web results for the query, with their links when citing",
    primary_argument="query",
    demo_commands=(
        {
            "command": f'{GOOGLE_SEARCH}(query="What is the capital of Australia?")',
            "description": "a general fact, with numbered, linked results",
        },
        {
            "command": f'{GOOGLE_SEARCH}(query="Who won the 2022 FIFA World Cup?", add_citations=False)',
            "description": "the same kind of search without the links",
        },
    ),
    limitations=(
        "returns short snippets, not whole pages",
        "suits general knowledge; specialized or domain-specific material is thin",
        "not for finding or analyzing videos (YouTube and the like)",
    ),
    best_practices=(
        "use it for definitions, general facts and world knowledge",
        "phrase the query as a direct question or a few precise keywords",
        "keep citations on when the answer needs a source",
        "compare several results before trusting a single snippet",
    ),
)


class GroundGoogleSearchTool(Tool):
    """Web search over a Serper-compatible API; see the module docstring for its settings."""

    card = CARD
    aliases = short_names_of(GOOGLE_SEARCH)
    agentflow_facts: ClassVar[MetadataFacts] = MetadataFacts(plural_keys=True, intros=False)

    def __init__(
        self,
        api_url: str | None = None,
        api_key: str | None = None,
        max_results: int = 5,
        timeout_s: float = 10.0,
        max_retries: int = 1,
    ) -> None:
        url, key = search_api_settings(api_url, api_key)
        self.max_results = max(1, min(MAX_RESULTS, int(max_results)))
        self.client: SerperClient | None = None
        if key is not None:
            self.client = SerperClient(url, key, timeout_s=timeout_s, max_retries=max_retries)
            self.timeout_s = self.client.worst_case_s() + 1.0

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        if self.client is None:
            return ToolResult.failure(
                f"{self.name} has no search API key: set {SEARCH_API_KEY_ENV_VAR} (and "
                f"{SEARCH_API_URL_ENV_VAR} for a Serper-compatible API other than "
                f'google.serper.dev), or pass the tool as {{"name": "{self.name}", '
                '"api_key": ..., "api_url": ...}',
                kind="config",
            )
        try:
            found = await self.client.search(str(arguments["query"]), self.max_results)
        except WebSearchError as error:
            return ToolResult.failure(f"{self.name}: {error}", kind="search_api")
        citing = bool(arguments.get("add_citations", True))
        return ToolResult(
            ok=True,
            output=format_results(found, citing),
            metadata={"links": [result.link for result in found.results], "cited": citing},
        )


def format_results(found: WebResults, citing: bool) -> str:
    """The results as the planner reads them: numbered with links, or a plain list."""
    lines = [f"Direct answer: {found.answer}"] if found.answer else []
    for rank, result in enumerate(found.results, start=1):
        if citing:
            lines.append(f"[{rank}] {result.title}\n{result.snippet}\nSource: {result.link}")
        else:
            lines.append(f"- {result.title}: {result.snippet}")
    return "\n".join(lines) if lines else "No results."


__all__ = ["GroundGoogleSearchTool", "format_results"]
