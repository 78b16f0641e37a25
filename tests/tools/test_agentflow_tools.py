"""AgentFlow's tool set under AgentFlow's names: each tool against real loopback HTTP servers
(a scripted OpenAI-compatible model, a Serper-speaking search API), in env episodes and
through ``run_tool``."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from aiohttp import web

sys.path.insert(0, str(Path(__file__).parents[1]))
from fake_openai_server import FakeOpenAIServer, Reply, bounded, user_text  # noqa: E402

import agentflow_env  # noqa: E402, F401  (registers the env ids)
from agentflow_env.envs.config import build_tool  # noqa: E402
from agentflow_env.llm import LLMEndpoint, as_backend  # noqa: E402
from agentflow_env.retrieval.corpus import Corpus, Document  # noqa: E402
from agentflow_env.tools import ToolContext, ToolResult, ToolSet, make_tool  # noqa: E402
from agentflow_env.tools.agentflow import (  # noqa: E402
    AGENTFLOW_TOOLS,
    SHORT_NAMES,
    GeneralistSolutionGeneratorTool,
    GroundGoogleSearchTool,
    PythonCodeGeneratorTool,
    WebRAGSearchTool,
    WikipediaRAGSearchTool,
)
from agentflow_env.tools.agentflow.wikipedia_rag import NO_MODEL_NOTE  # noqa: E402
from agentflow_env.tools.base import Tool, ToolCard  # noqa: E402
from agentflow_env.tools.runner import run_tool  # noqa: E402
from agentflow_env.tools.sandbox import SandboxLimits  # noqa: E402
from agentflow_env.tools.variants import ToolVariant  # noqa: E402

GENERALIST = "Generalist_Solution_Generator_Tool"
CODER = "Python_Code_Generator_Tool"
WIKI = "Wikipedia_RAG_Search_Tool"
GOOGLE = "Ground_Google_Search_Tool"
WEB = "Web_RAG_Search_Tool"
CLASSES = {
    GENERALIST: GeneralistSolutionGeneratorTool,
    CODER: PythonCodeGeneratorTool,
    WIKI: WikipediaRAGSearchTool,
    GOOGLE: GroundGoogleSearchTool,
    WEB: WebRAGSearchTool,
}
CORPUS = Corpus.from_documents(
    [
        Document(
            "d1", "Blue Harbor", "Blue Harbor is a film directed by Ana Lim, released in 1998."
        ),
        Document("d2", "Ana Lim", "Ana Lim is a film director born in Port Ellis."),
        Document("d3", "Port Ellis", "Port Ellis is a city in Veldara with 41000 inhabitants."),
    ]
)
CONFIG_VARIABLES = (
    "AGENTFLOW_TOOLS_BASE_URL",
    "AGENTFLOW_TOOLS_MODEL",
    "AGENTFLOW_LLM_BASE_URL",
    "AGENTFLOW_LLM_MODEL",
    "AGENTFLOW_SEARCH_API_URL",
    "AGENTFLOW_SEARCH_API_KEY",
    "AGENTFLOW_RETRIEVER_URL",
)


@pytest.fixture(autouse=True)
def no_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """No endpoint, search key or retriever from the machine's environment."""
    for name in CONFIG_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def model_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(lambda role, request: "unscripted") as server:
        yield server


def endpoint_json(server: FakeOpenAIServer) -> dict[str, Any]:
    return {"base_url": server.base_url, "model": "tool-model", "max_retries": 0, "timeout_s": 10}


def backend(server: FakeOpenAIServer) -> Any:
    return as_backend(LLMEndpoint(**endpoint_json(server)))


def call(tool: Tool, arguments: dict[str, Any], corpus: Corpus | None = None) -> ToolResult:
    return bounded(run_tool(tool, arguments, ToolContext(corpus=corpus), timeout_s=20.0))


def action(tool_name: str, context: str) -> str:
    return (
        f"Justification: this tool fits\nContext: {context}\nSub-Goal: learn it\n"
        f"Tool Name: {tool_name}"
    )


def step(env: Any, tool_name: str, context: str) -> tuple[dict[str, Any], dict[str, Any], bool]:
    _, _, terminated, truncated, info = env.step(action(tool_name, context))
    return info["memory"][-1], info, terminated or truncated


# -- names and cards ------------------------------------------------------------------------------


def test_preset_lists_the_five_long_names_in_agentflow_order() -> None:
    # AgentFlow's planner sees its web RAG tool too, and the list sorted by name.
    assert AGENTFLOW_TOOLS == (GENERALIST, GOOGLE, CODER, WEB, WIKI)
    assert list(AGENTFLOW_TOOLS) == sorted(AGENTFLOW_TOOLS)
    assert set(SHORT_NAMES.values()) == set(AGENTFLOW_TOOLS)
    assert SHORT_NAMES["Web_Search_Tool"] == WEB


def test_every_long_and_short_name_resolves_in_a_tool_set_and_the_registry() -> None:
    tools = ToolSet([make_tool(name) for name in AGENTFLOW_TOOLS] + [make_tool("Search")])
    for long_name in AGENTFLOW_TOOLS:
        tool = tools.get(long_name)
        assert isinstance(tool, CLASSES[long_name]) and tool.name == long_name
        assert isinstance(make_tool(long_name), CLASSES[long_name])
    for short_name, long_name in SHORT_NAMES.items():
        assert tools.get(short_name) is tools.get(long_name)
        assert short_name in tools
        assert make_tool(short_name).name == long_name
    assert tools.get("python coder") is tools.get(CODER)  # forgiving spelling of an alias
    assert tools.get("Search").name == "Search"  # aliases do not shadow the plain Search tool
    assert tools.names == (*AGENTFLOW_TOOLS, "Search")  # the planner sees the long names only


def test_alias_clashes_are_refused_and_aliases_resolve_for_replacing_and_removing() -> None:
    generalist = make_tool(GENERALIST)

    class Named(Tool):
        def __init__(self, name: str) -> None:
            self.card = ToolCard(name, "d", {"query": {"type": "string"}}, "str", "query")

        async def run(self, arguments: Any, context: ToolContext) -> ToolResult:
            return ToolResult(ok=True, output="")

    with pytest.raises(ValueError, match="Base_Generator_Tool"):
        ToolSet([generalist, Named("Base_Generator_Tool")])
    tools = ToolSet([generalist, make_tool("Search")])
    newer = GeneralistSolutionGeneratorTool()
    replaced = tools.with_tool(newer)
    assert replaced.get("Base_Generator_Tool") is newer and len(replaced) == 2
    assert tools.without("Base_Generator_Tool").names == ("Search",)


def test_cards_carry_agentflow_names_arguments_and_best_practices() -> None:
    for name in AGENTFLOW_TOOLS:
        card = make_tool(name).card
        assert card.name == name and card.version == "1.0.0"
        expected = {"query", "add_citations"} if name == GOOGLE else {"query"}
        expected = {"query", "url"} if name == WEB else expected
        assert set(card.input_schema) == expected and card.primary_argument == "query"
        assert card.limitations and card.best_practices and card.output_type
        assert all(demo["command"].startswith(f'{name}(query="') for demo in card.demo_commands)
        rendered = card.render()
        assert rendered.startswith(f"- {name}: ") and "  Best practice: " in rendered
    assert make_tool(GOOGLE).card.input_schema["add_citations"]["type"] == "boolean"
    search = make_tool("Search").card
    assert search.best_practices == () and "Best practice" not in search.render()


# -- the generalist ----------------------------------------------------------------------------


def test_generalist_returns_the_models_answer_in_an_episode(model_server: FakeOpenAIServer) -> None:
    model_server.push(Reply("Paris is the capital of France."))
    tools = [{"name": GENERALIST, "llm": endpoint_json(model_server)}, "Search"]
    env = gym.make("AgentFlow-Search-v0", tools=tools, max_turns=3)
    try:
        observation, _ = env.reset(seed=0)
        assert GENERALIST in observation["text"]  # the card is in the planner prompt
        entry, info, _ = step(env, "Base_Generator_Tool", "What is the capital of France?")
    finally:
        env.close()
    assert entry["selected_tool"] == GENERALIST and entry["tool_ok"] is True
    assert entry["tool_result"] == "Paris is the capital of France."
    assert info["errors"] == []
    request = model_server.requests[-1]
    assert request["model"] == "tool-model"
    assert user_text(request) == "What is the capital of France?"


def test_a_failing_model_is_a_recorded_error(model_server: FakeOpenAIServer) -> None:
    model_server.push(Reply.error(500))
    result = call(GeneralistSolutionGeneratorTool(llm=backend(model_server)), {"query": "hi"})
    assert not result.ok and result.metadata["kind"] == "llm"
    assert result.error is not None and "model call failed" in result.error


# -- the Python code generator -------------------------------------------------------------------


def test_coder_runs_the_models_code_in_the_sandbox(model_server: FakeOpenAIServer) -> None:
    program = "squares = [n * n for n in range(1, 11)]\nprint('sum of squares:', sum(squares))"
    model_server.push(Reply(f"Step by step:\n```python\n{program}\n```\nDone."))
    tool = PythonCodeGeneratorTool(llm=backend(model_server))
    result = call(tool, {"query": "the sum of the squares of 1 to 10"})
    assert result.ok, result.error
    assert "sum of squares: 385" in result.output
    assert program in result.output and result.metadata["code"].strip() == program
    assert result.metadata["exit_code"] == 0
    assert "the sum of the squares of 1 to 10" in user_text(model_server.requests[-1])


def test_coder_code_that_loops_forever_is_stopped_by_the_sandbox(
    model_server: FakeOpenAIServer,
) -> None:
    model_server.push(Reply("```python\nprint('started', flush=True)\nwhile True:\n    pass\n```"))
    limits = SandboxLimits(timeout_s=1.0, cpu_s=5)
    tool = PythonCodeGeneratorTool(llm=backend(model_server), limits=limits)
    result = call(tool, {"query": "count to infinity"})
    assert not result.ok and result.metadata["timed_out"] is True
    assert result.error is not None and "timed out" in result.error
    assert "while True:" in result.output and "started" in result.output


def test_coder_reply_without_code_and_failing_code_are_errors(
    model_server: FakeOpenAIServer,
) -> None:
    tool = PythonCodeGeneratorTool(llm=backend(model_server))
    model_server.push(Reply("The answer is 42."))
    no_code = call(tool, {"query": "anything"})
    assert not no_code.ok and no_code.metadata["kind"] == "no_code"
    assert "The answer is 42." in no_code.output
    model_server.push(Reply("```python\nprint(1 / 0)\n```"))
    crashed = call(tool, {"query": "divide by zero"})
    assert not crashed.ok and crashed.error is not None and "ZeroDivisionError" in crashed.error
    assert "print(1 / 0)" in crashed.output


# -- Wikipedia RAG search -----------------------------------------------------------------------


def test_wiki_rag_condenses_the_retrieved_passages_with_a_model(
    model_server: FakeOpenAIServer,
) -> None:
    model_server.push(Reply("Blue Harbor was directed by Ana Lim (Blue Harbor)."))
    tool = WikipediaRAGSearchTool(llm=backend(model_server), top_k=2)
    result = call(tool, {"query": "Who directed Blue Harbor?"}, corpus=CORPUS)
    assert result.ok and result.metadata["condensed"] is True
    assert result.output.endswith("Blue Harbor was directed by Ana Lim (Blue Harbor).")
    assert "directed by Ana Lim, released in 1998" not in result.output  # passages not echoed
    assert result.metadata["doc_ids"][0] == "d1" and len(result.metadata["doc_ids"]) <= 2
    prompt = user_text(model_server.requests[-1])
    assert "Who directed Blue Harbor?" in prompt and "released in 1998" in prompt


def test_wiki_rag_without_a_model_returns_raw_passages_in_a_rule_episode() -> None:
    env = gym.make("AgentFlow-Search-v0", tools=["Search", "Wikipedia_Search_Tool"], max_turns=3)
    try:
        env.reset(seed=0)
        question = env.unwrapped.session.task.question
        entry, info, _ = step(env, "Wikipedia_Search_Tool", question)
    finally:
        env.close()
    assert entry["selected_tool"] == WIKI and entry["tool_ok"] is True, info["errors"]
    assert entry["tool_result"].startswith(NO_MODEL_NOTE)
    assert "[1] " in entry["tool_result"]


def test_wiki_rag_failed_retrieval_and_the_envs_retriever_url() -> None:
    result = call(WikipediaRAGSearchTool(), {"query": "anything"}, corpus=None)
    assert not result.ok and result.error is not None and result.error.startswith(f"{WIKI}: ")
    remote = build_tool(WIKI, retriever_url="http://127.0.0.1:9")
    assert isinstance(remote, WikipediaRAGSearchTool) and remote.search.remote is not None
    assert build_tool(WIKI).search.remote is None


# -- Google search over a Serper-compatible API --------------------------------------------------


class SerperStandIn:
    """A loopback aiohttp server answering ``POST /search`` like Serper (or failing, scripted)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests: list[tuple[dict[str, str], Any]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    def __enter__(self) -> SerperStandIn:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/search", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests.append((dict(request.headers), json.loads(await request.read())))
        if self.mode == "forbidden":
            return web.json_response({"message": "Unauthorized."}, status=403)
        if self.mode == "down":
            return web.json_response({"message": "overloaded"}, status=503)
        if self.mode == "garbage":
            return web.Response(text='{"organic": [', content_type="application/json")
        query = self.requests[-1][1]["q"]
        organic = [
            {
                "title": f"Result {rank} for {query}",
                "link": f"https://example.org/{rank}",
                "snippet": f"Snippet {rank}.",
                "position": rank,
            }
            for rank in (1, 2, 3)
        ]
        return web.json_response({"searchParameters": {"q": query}, "organic": organic})


@pytest.fixture
def serper() -> Iterator[SerperStandIn]:
    with SerperStandIn() as server:
        yield server


def test_google_search_in_an_episode_sends_the_key_and_cites(
    serper: SerperStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTFLOW_SEARCH_API_URL", serper.url)
    monkeypatch.setenv("AGENTFLOW_SEARCH_API_KEY", "secret-key")
    env = gym.make("AgentFlow-Search-v0", tools=["Search", "Google_Search_Tool"], max_turns=3)
    try:
        env.reset(seed=0)
        entry, _, _ = step(env, "Google_Search_Tool", "capital of Veldara")
    finally:
        env.close()
    assert entry["selected_tool"] == GOOGLE and entry["tool_ok"] is True
    headers, body = serper.requests[-1]
    assert headers["X-API-KEY"] == "secret-key" and body["q"] == "capital of Veldara"
    result = entry["tool_result"]
    assert result.startswith("[1] Result 1 for capital of Veldara\nSnippet 1.")
    assert "Source: https://example.org/3" in result


def test_google_search_without_citations_and_with_options(serper: SerperStandIn) -> None:
    tool = build_tool({"name": GOOGLE, "api_url": serper.url, "api_key": "k", "max_results": 2})
    result = call(tool, {"query": "q", "add_citations": False})
    assert (
        result.ok and result.output == "- Result 1 for q: Snippet 1.\n- Result 2 for q: Snippet 2."
    )
    assert result.metadata["links"] == ["https://example.org/1", "https://example.org/2"]
    assert serper.requests[-1][0]["X-API-KEY"] == "k"


@pytest.mark.parametrize(
    ("mode", "message"),
    [("forbidden", "HTTP 403"), ("down", "unreachable after 1 tries"), ("garbage", "non-JSON")],
)
def test_google_search_http_errors_and_garbage_are_recorded(
    serper: SerperStandIn, mode: str, message: str
) -> None:
    serper.mode = mode
    tool = GroundGoogleSearchTool(api_url=serper.url, api_key="secret-key-7", max_retries=0)
    result = call(tool, {"query": "anything"})
    assert not result.ok and result.metadata["kind"] == "search_api"
    assert result.error is not None and message in result.error
    assert "secret-key-7" not in result.error and serper.requests


def test_google_search_without_a_key_fails_each_call_with_the_hint() -> None:
    result = call(make_tool(GOOGLE), {"query": "anything"})
    assert not result.ok and result.metadata["kind"] == "config"
    assert result.error is not None and "AGENTFLOW_SEARCH_API_KEY" in result.error


# -- model configuration -------------------------------------------------------------------------


def test_tools_without_a_model_fail_their_calls_and_the_episode_goes_on() -> None:
    env = gym.make("AgentFlow-Search-v0", tools=["Search", GENERALIST, CODER], max_turns=4)
    try:
        env.reset(seed=0)
        first, _, done = step(env, "Base_Generator_Tool", "What is the capital of France?")
        assert not done
        second, _, done = step(env, CODER, "sum of 1 to 10")
        assert not done
        question = env.unwrapped.session.task.question
        third, _, _ = step(env, "Search", question)
    finally:
        env.close()
    for entry, name in ((first, GENERALIST), (second, CODER)):
        assert entry["tool_ok"] is False
        (error,) = entry["errors"]
        assert error.startswith(f"{name} has no language model configured")
        assert "AGENTFLOW_TOOLS_BASE_URL" in error and '"llm"' in error
    assert third["tool_ok"] is True


@pytest.mark.parametrize("prefix", ["AGENTFLOW_TOOLS", "AGENTFLOW_LLM"])
def test_build_tool_injects_the_endpoint_of_the_environment(
    model_server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch, prefix: str
) -> None:
    monkeypatch.setenv(f"{prefix}_BASE_URL", model_server.base_url)
    monkeypatch.setenv(f"{prefix}_MODEL", f"{prefix.lower()}-model")
    monkeypatch.setenv(f"{prefix}_MAX_RETRIES", "0")
    model_server.push(Reply("from the environment's endpoint"))
    env = gym.make("AgentFlow-Search-v0", tools=["Search", "Base_Generator_Tool"], max_turns=3)
    try:
        env.reset(seed=0)
        entry, _, _ = step(env, GENERALIST, "say something")
    finally:
        env.close()
    assert entry["tool_result"] == "from the environment's endpoint"
    assert model_server.requests[-1]["model"] == f"{prefix.lower()}-model"


def test_variant_options_still_apply_to_a_model_backed_tool(
    model_server: FakeOpenAIServer,
) -> None:
    entry = {"name": GENERALIST, "llm": endpoint_json(model_server), "rename": "Helper"}
    tool = build_tool(entry)
    assert isinstance(tool, ToolVariant) and tool.name == "Helper"
    assert tool.original_name == GENERALIST
    model_server.push(Reply("renamed but the same"))
    assert call(tool, {"query": "hello"}).output == "renamed but the same"


def test_bad_endpoint_settings_are_refused_when_the_env_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        gym.make("AgentFlow-Search-v0", tools=[{"name": GENERALIST, "llm": {"modle": "x"}}])
    monkeypatch.setenv("AGENTFLOW_TOOLS_BASE_URL", "http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="missing"):
        gym.make("AgentFlow-Search-v0", tools=[GENERALIST])
    assert build_tool("Search").name == "Search"  # tools without a model ignore the variables
