"""``Web_RAG_Search_Tool``: a page from the task's documents (by Wikipedia URL or title), from a
local file, or over HTTP from a real loopback server started here; every page that cannot be had
is a recorded failure, never an exception."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

sys.path.insert(0, str(Path(__file__).parents[1]))
from fake_openai_server import FakeOpenAIServer, Reply, bounded, user_text  # noqa: E402

import agentflow_env  # noqa: E402, F401  (registers the env ids)
from agentflow_env.envs.config import build_tool  # noqa: E402
from agentflow_env.llm import LLMEndpoint, as_backend  # noqa: E402
from agentflow_env.retrieval.corpus import Corpus, Document  # noqa: E402
from agentflow_env.tools import ToolContext, ToolResult, make_tool  # noqa: E402
from agentflow_env.tools.agentflow import WEB_FETCH_ENV_VAR, WebRAGSearchTool  # noqa: E402
from agentflow_env.tools.agentflow.pages import html_text, title_of  # noqa: E402
from agentflow_env.tools.agentflow.web_rag import (  # noqa: E402
    NO_MODEL_NOTE,
    best_chunks,
    chunk_words,
)
from agentflow_env.tools.runner import run_tool  # noqa: E402

WEB = "Web_RAG_Search_Tool"
FILLER = " ".join(f"filler{i}" for i in range(400))
CORPUS = Corpus.from_documents(
    [
        Document(
            "d1", "Blue Harbor", "Blue Harbor is a film directed by Ana Lim, released in 1998."
        ),
        Document("d2", "Ana Lim", "Ana Lim is a film director born in Port Ellis."),
        Document("d3", "Blue Harbor", f"{FILLER} The film's score was written by Oren Vale."),
        Document("d4", '"Port Ellis"', "Port Ellis is a city in Veldara with 41000 inhabitants."),
    ]
)
PAGE = """<!doctype html><html><head><title>Grey Peak</title>
<script>var secret = "not page text";</script><style>p { color: red; }</style></head>
<body><h1>Grey Peak</h1><p>Grey Peak is a mountain in Veldara.</p>
<p>Its summit is 3120&nbsp;m above sea level.</p></body></html>"""


@pytest.fixture(autouse=True)
def no_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (WEB_FETCH_ENV_VAR, "AGENTFLOW_RETRIEVER_URL", "AGENTFLOW_TOOLS_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AGENTFLOW_LLM_BASE_URL", raising=False)


@pytest.fixture
def model_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(lambda role, request: "unscripted") as server:
        yield server


def backend(server: FakeOpenAIServer) -> Any:
    endpoint = LLMEndpoint(base_url=server.base_url, model="m", max_retries=0, timeout_s=10)
    return as_backend(endpoint)


def call(tool: WebRAGSearchTool, query: str, url: str) -> ToolResult:
    context = ToolContext(corpus=CORPUS)
    return bounded(run_tool(tool, {"query": query, "url": url}, context, timeout_s=20.0))


class PageServer:
    """A loopback aiohttp server with an HTML page, a text page, an image and a 404."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    def __enter__(self) -> PageServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_get("/grey-peak", self._page)
        app.router.add_get("/notes.txt", self._text)
        app.router.add_get("/photo.png", self._image)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _page(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        return web.Response(text=PAGE, content_type="text/html")

    async def _text(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        return web.Response(text="Grey Peak was first climbed in 1911.")

    async def _image(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        return web.Response(body=b"\x89PNG\r\n", content_type="image/png")


@pytest.fixture
def pages() -> Iterator[PageServer]:
    with PageServer() as server:
        yield server


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the task's documents, offline ---------------------------------------------------------------


def test_a_wikipedia_url_or_a_title_opens_the_tasks_documents(
    model_server: FakeOpenAIServer,
) -> None:
    model_server.push(Reply("The score is by Oren Vale."))
    tool = WebRAGSearchTool(llm=backend(model_server))
    result = call(tool, "Who wrote the score?", "https://en.wikipedia.org/wiki/Blue_Harbor")
    assert result.ok and result.output == "The score is by Oren Vale.", result.error
    assert result.metadata["source"] == "corpus" and result.metadata["answered"] is True
    prompt = user_text(model_server.requests[-1])
    assert "Who wrote the score?" in prompt
    # Both documents titled Blue Harbor form the page; the chunk naming the score ranks first.
    assert prompt.index("Oren Vale") < prompt.index("directed by Ana Lim")
    model_server.push(Reply("41000 people."))
    by_title = call(tool, "How many people live there?", "port ellis")  # quotes, case aside
    assert by_title.ok and by_title.output == "41000 people."
    assert "41000 inhabitants" in user_text(model_server.requests[-1])


def test_without_a_model_the_best_chunks_come_back_as_they_are() -> None:
    result = call(WebRAGSearchTool(), "score", "Blue Harbor")
    assert result.ok and result.output.startswith(NO_MODEL_NOTE)
    assert result.metadata["answered"] is False
    assert "Oren Vale" in result.output.split("\n")[1]  # the best matching chunk first


def test_a_missing_article_is_a_recorded_failure() -> None:
    result = call(WebRAGSearchTool(), "anything", "Green Harbor")
    assert not result.ok and result.metadata["kind"] == "page"
    assert result.error == (
        f"{WEB}: no article titled 'Green Harbor' in this task's document collection"
    )


def test_an_unreachable_retriever_is_a_recorded_service_failure() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    tool = WebRAGSearchTool(retriever_url=url, max_retries=0, retriever_timeout_s=2.0)
    result = call(tool, "anything", "Blue Harbor")
    assert not result.ok and result.metadata["kind"] == "retriever" and result.service_broken
    assert (result.error or "").startswith(f"{WEB}: cannot look up 'Blue Harbor': ")


# -- local files -------------------------------------------------------------------------------------


def test_a_file_url_reads_only_inside_the_pages_directory(tmp_path: Path) -> None:
    pages_dir = tmp_path / "pages"
    pages_dir.mkdir()
    (pages_dir / "grey-peak.html").write_text(PAGE)
    (tmp_path / "secret.txt").write_text("gold answers")
    tool = WebRAGSearchTool(pages_dir=pages_dir)
    result = call(tool, "How high is the summit?", (pages_dir / "grey-peak.html").as_uri())
    assert result.ok and result.metadata["source"] == "file", result.error
    assert "3120 m above sea level" in result.output and "secret" not in result.output
    outside = call(tool, "q", (tmp_path / "secret.txt").as_uri())
    assert not outside.ok and "outside the pages directory" in (outside.error or "")
    no_dir = call(WebRAGSearchTool(), "q", (pages_dir / "grey-peak.html").as_uri())
    assert not no_dir.ok and no_dir.metadata["kind"] == "config"


# -- HTTP ------------------------------------------------------------------------------------------------


def test_a_web_page_is_fetched_over_http_when_allowed(
    pages: PageServer, model_server: FakeOpenAIServer
) -> None:
    model_server.push(Reply("The summit is 3120 m high."))
    tool = WebRAGSearchTool(llm=backend(model_server), allow_http=True)
    result = call(tool, "How high is Grey Peak?", pages.url("/grey-peak"))
    assert result.ok and result.output == "The summit is 3120 m high.", result.error
    assert result.metadata["source"] == "http" and pages.requests == ["/grey-peak"]
    prompt = user_text(model_server.requests[-1])
    assert "Grey Peak is a mountain in Veldara." in prompt and "3120 m above" in prompt
    assert "not page text" not in prompt and "color: red" not in prompt  # no script, no style
    text = call(WebRAGSearchTool(allow_http=True), "first climbed", pages.url("/notes.txt"))
    assert text.ok and "first climbed in 1911" in text.output


def test_the_environment_variable_allows_fetching(
    pages: PageServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = call(make_tool(WEB), "q", pages.url("/grey-peak"))
    assert not refused.ok and refused.metadata["kind"] == "config"
    assert WEB_FETCH_ENV_VAR in (refused.error or "") and pages.requests == []
    monkeypatch.setenv(WEB_FETCH_ENV_VAR, "1")
    assert call(build_tool(WEB), "summit", pages.url("/grey-peak")).ok
    assert not call(build_tool({"name": WEB, "allow_http": False}), "q", pages.url("/x")).ok


@pytest.mark.parametrize(
    ("path", "message"),
    [("/missing", "HTTP 404"), ("/photo.png", "not a text page (image/png)")],
)
def test_pages_that_cannot_be_read_are_recorded_failures(
    pages: PageServer, path: str, message: str
) -> None:
    result = call(WebRAGSearchTool(allow_http=True), "q", pages.url(path))
    assert not result.ok and result.output == "" and result.metadata["kind"] == "page"
    assert result.error is not None and result.error.startswith(f"{WEB}: ")
    assert message in result.error


def test_an_unreachable_url_is_a_recorded_failure() -> None:
    url = f"http://127.0.0.1:{closed_port()}/page"
    result = call(WebRAGSearchTool(allow_http=True, fetch_timeout_s=2.0), "q", url)
    assert not result.ok and result.metadata == {"kind": "page", "url": url, **_latency(result)}
    assert result.error is not None and result.error.startswith(f"{WEB}: cannot fetch {url}: ")


def _latency(result: ToolResult) -> dict[str, Any]:
    return {"latency_s": result.metadata["latency_s"]}


# -- pieces --------------------------------------------------------------------------------------------


def test_chunks_overlap_and_the_best_matching_come_first() -> None:
    words = [f"w{i}" for i in range(450)]
    chunks = chunk_words(" ".join(words))
    assert [len(c.split()) for c in chunks] == [200, 200, 90]
    assert chunks[1].split()[0] == "w180" and chunks[2].split()[0] == "w360"
    text = " ".join(words[:300]) + " zebra " + " ".join(words[300:])
    assert "zebra" in best_chunks("zebra", text)[0]
    assert len(best_chunks("nothing matches", text)) == 3  # the page's chunks still come back


def test_references_name_titles_and_html_gives_its_visible_text() -> None:
    assert title_of("https://en.wikipedia.org/wiki/Blue_Harbor") == "Blue Harbor"
    assert title_of("https://de.wikipedia.org/wiki/Caf%C3%A9_M%C3%BCller") == "Café Müller"
    assert title_of("https://example.org/wiki/Blue_Harbor") is None
    assert title_of(" Blue Harbor ") == "Blue Harbor"
    assert html_text(PAGE).split("\n") == [
        "Grey Peak",
        "Grey Peak",
        "Grey Peak is a mountain in Veldara.",
        "Its summit is 3120 m above sea level.",
    ]
