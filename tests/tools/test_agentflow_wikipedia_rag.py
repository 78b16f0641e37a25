"""AgentFlow's Wikipedia tool as AgentFlow's code really runs it (``agentflow_wikipedia``): the
result its published code returns (no page picked) or the one it was written to return, with
its abstract ending, its URLs and its no-results sentence read from a fake checkout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import bounded
from test_agentflow_source import WIKI_CUT_END, WIKI_NO_RESULTS, make_checkout

from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.tools import ToolContext, ToolResult
from agentflow_env.tools.agentflow import WebRAGSearchTool, WikipediaRAGSearchTool
from agentflow_env.tools.runner import run_tool
from agentflow_env.tools.texts import AgentFlowToolTexts
from agentflow_env.workflow.agentflow_source import read_tool_texts

RELEVANT = "relevant_pages (to the query)"
BARE = "relevant_pages"
OTHER = "other_pages (may be irrelevant to the query)"
LONG = "Blue Harbor is a film directed by Ana Lim, released in 1998, shot in the old port of " * 2
CORPUS = Corpus.from_documents(
    [
        Document("d1", '"Blue Harbor"', LONG),
        Document("d2", "Ana Lim", "Ana Lim is a film director born in Port Ellis."),
    ],
    corpus_id="wiki-as-run",
)


@pytest.fixture(autouse=True)
def no_retriever(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTFLOW_RETRIEVER_URL", raising=False)


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> AgentFlowToolTexts:
    checkout = make_checkout(Path(tmp_path_factory.mktemp("wiki")) / "AgentFlow")
    return read_tool_texts(checkout)


def search(query: str, mode: Any, texts: AgentFlowToolTexts) -> ToolResult:
    context = ToolContext(
        corpus=CORPUS, agentflow_shapes=True, agentflow_wikipedia=mode, agentflow_texts=texts
    )
    return bounded(run_tool(WikipediaRAGSearchTool(), {"query": query}, context, timeout_s=20.0))


def test_as_run_picks_no_page_and_lists_every_page_among_the_others(
    texts: AgentFlowToolTexts,
) -> None:
    result = search("Blue Harbor director", "as_run", texts)
    value: dict[str, Any] = result.value
    assert list(value) == ["query", BARE, OTHER]  # the bare key, as AgentFlow's code returns
    assert value[BARE] == []
    assert [page["title"] for page in value[OTHER]] == ['"Blue Harbor"', "Ana Lim"]
    assert all(set(page) == {"title", "url", "abstract"} for page in value[OTHER])
    assert result.output == str(value)
    assert "relevant_titles" not in result.metadata  # no model was asked to pick


@pytest.mark.parametrize("mode", ["as_run", "as_intended"])
def test_pages_take_agentflows_abstract_ending_and_keep_quotes_in_urls(
    mode: str, texts: AgentFlowToolTexts
) -> None:
    value = search("Blue Harbor director", mode, texts).value
    pages = [*value.get(RELEVANT, []), *value[OTHER]]
    harbor = next(page for page in pages if page["title"] == '"Blue Harbor"')
    assert harbor["abstract"] == LONG[:100] + WIKI_CUT_END  # cut as it is, then the ending
    assert harbor["url"] == 'https://en.wikipedia.org/wiki/"Blue_Harbor"'
    assert (RELEVANT in value) == (mode == "as_intended")


@pytest.mark.parametrize(
    ("mode", "from_checkout", "sentence"),
    [
        ("as_run", True, WIKI_NO_RESULTS.replace("{query}", "zzqx")),
        ("as_intended", True, WIKI_NO_RESULTS.replace("{query}", "zzqx")),
        ("as_run", False, "No pages found for the query: zzqx"),
        (None, False, "No pages found for the query: zzqx"),
    ],
)
def test_a_search_that_finds_nothing_says_the_packs_sentence(
    mode: str | None, from_checkout: bool, sentence: str, texts: AgentFlowToolTexts
) -> None:
    value = search("zzqx", mode, texts if from_checkout else AgentFlowToolTexts()).value
    assert value[BARE] == []
    assert value[OTHER] == [{"title": None, "url": None, "abstract": None, "error": sentence}]


def test_without_a_mode_or_texts_the_result_is_this_projects() -> None:
    value = search("Blue Harbor director", None, AgentFlowToolTexts()).value
    pages = [*value[RELEVANT], *value[OTHER]]
    harbor = next(page for page in pages if page["title"] == '"Blue Harbor"')
    assert harbor["abstract"] == LONG[:100].rstrip() + " ..."
    assert harbor["url"] == "https://en.wikipedia.org/wiki/Blue_Harbor"


def test_the_web_rag_tool_reads_a_page_from_its_quoted_url(texts: AgentFlowToolTexts) -> None:
    (harbor, _) = search("Blue Harbor director", "as_run", texts).value[OTHER]
    context = ToolContext(corpus=CORPUS, agentflow_shapes=True)
    arguments = {"query": "Who directed it?", "url": harbor["url"]}
    read = bounded(run_tool(WebRAGSearchTool(), arguments, context, timeout_s=20.0))
    assert read.ok, read.error
    assert "directed by Ana Lim" in read.output
