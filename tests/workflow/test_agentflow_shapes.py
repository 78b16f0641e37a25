"""AgentFlow's tools as its planner knows them (``prompt_style="agentflow"``): the facts of their
toolbox metadata, their results in the shapes AgentFlow's tools return (a dict for its Python and
Wikipedia tools) and memory showing those, and tool names matched as AgentFlow's planner matches
them. Models are scripted over a real loopback HTTP server."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from fake_openai_server import FakeOpenAIServer, Reply, bounded, user_text  # noqa: E402

import agentflow_env  # noqa: E402, F401  (registers the env ids)
from agentflow_env.envs.config import build_tool  # noqa: E402
from agentflow_env.llm import LLMEndpoint, as_backend  # noqa: E402
from agentflow_env.retrieval.corpus import Corpus, Document  # noqa: E402
from agentflow_env.tasks.base import Task  # noqa: E402
from agentflow_env.tools import ToolContext, ToolResult, ToolSet, make_tool  # noqa: E402
from agentflow_env.tools.agentflow import (  # noqa: E402
    AGENTFLOW_TOOLS,
    PythonCodeGeneratorTool,
    WikipediaRAGSearchTool,
    match_agentflow_tool,
)
from agentflow_env.tools.base import Tool  # noqa: E402
from agentflow_env.tools.runner import run_tool  # noqa: E402
from agentflow_env.workflow.actions import format_planner_action  # noqa: E402
from agentflow_env.workflow.agentflow_format import memory_actions, tool_metadata  # noqa: E402
from agentflow_env.workflow.memory import Memory, MemoryEntry  # noqa: E402

GENERALIST = "Generalist_Solution_Generator_Tool"
GOOGLE = "Ground_Google_Search_Tool"
CODER = "Python_Code_Generator_Tool"
WEB = "Web_RAG_Search_Tool"
WIKI = "Wikipedia_RAG_Search_Tool"
RELEVANT = "relevant_pages (to the query)"
OTHER = "other_pages (may be irrelevant to the query)"
CORPUS = Corpus.from_documents(
    [
        Document(
            "d1", "Blue Harbor", "Blue Harbor is a film directed by Ana Lim, released in 1998."
        ),
        Document(
            "d2", "Ana Lim", "Ana Lim is a film director born in Port Ellis. She made Blue Harbor."
        ),
        Document("d3", "Port Ellis", "Port Ellis is a city in Veldara with 41000 inhabitants."),
        Document("d4", "Blue Harbor", "Blue Harbor won a prize at the Veldara film festival."),
    ],
    corpus_id="shapes-test",
)
TASK = Task("blue", "Who directed Blue Harbor?", ("Ana Lim",), CORPUS)


@pytest.fixture(autouse=True)
def no_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for prefix in ("AGENTFLOW_TOOLS", "AGENTFLOW_LLM"):
        for key in ("BASE_URL", "MODEL"):
            monkeypatch.delenv(f"{prefix}_{key}", raising=False)
    monkeypatch.delenv("AGENTFLOW_RETRIEVER_URL", raising=False)


def responder(role: str, request: dict[str, Any]) -> str:
    """The tools' model: picks pages, answers from a page, writes a program."""
    system = request["messages"][0]["content"]
    text = user_text(request)
    if "choose which encyclopedia pages" in system:
        listed = text.split("Pages found:\n")[1].split("\n\n")[0].split("\n")
        number = next(line.split(".")[0] for line in listed if line.endswith("Blue Harbor"))
        return f"The page about the film: [{number}]"
    if "excerpts of one web page" in system:
        return "Blue Harbor was directed by Ana Lim."
    if "Python 3 programs" in system:
        return "```python\nx = 17 * 23 + 5\nprint('result:', x)\n```"
    raise AssertionError(f"unexpected request: {text[:200]}")


@pytest.fixture
def model_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(responder) as server:
        yield server


def backend(server: FakeOpenAIServer) -> Any:
    endpoint = LLMEndpoint(base_url=server.base_url, model="m", max_retries=0, timeout_s=10)
    return as_backend(endpoint)


def shaped(tool: Tool, arguments: dict[str, Any], corpus: Corpus | None = CORPUS) -> ToolResult:
    context = ToolContext(corpus=corpus, agentflow_shapes=True)
    return bounded(run_tool(tool, arguments, context, timeout_s=20.0))


# -- the toolbox metadata ---------------------------------------------------------------------------


def test_metadata_carries_agentflows_keys_flags_and_types() -> None:
    metadata = {name: tool_metadata(make_tool(name)) for name in AGENTFLOW_TOOLS}
    plural = {GOOGLE, CODER}
    for name, data in metadata.items():
        keys = (
            ("limitations", "best_practices") if name in plural else ("limitation", "best_practice")
        )
        assert tuple(data["user_metadata"]) == keys, name
    assert {name: data["require_llm_engine"] for name, data in metadata.items()} == {
        GENERALIST: True,
        GOOGLE: False,
        CODER: True,
        WEB: True,
        WIKI: False,
    }
    dicts = {name for name, data in metadata.items() if data["output_type"].startswith("dict - ")}
    assert dicts == {CODER, WIKI}
    assert all(metadata[n]["output_type"].startswith("str - ") for n in (GENERALIST, GOOGLE, WEB))
    assert metadata[WEB]["input_types"] == {
        "query": "str - the question to answer from the page",
        "url": "str - the URL of the page to read (or the title of an article)",
    }


@pytest.mark.parametrize("name", AGENTFLOW_TOOLS)
def test_metadata_values_are_multi_line_numbered_lists(name: str) -> None:
    tool = make_tool(name)
    limits, practices = tool_metadata(tool)["user_metadata"].values()
    for value, items in ((limits, tool.card.limitations), (practices, tool.card.best_practices)):
        assert value.startswith("\n") and value.endswith("\n")
        lines = value.strip("\n").split("\n")
        numbered = lines if name == GOOGLE else lines[1:]  # AgentFlow's Google tool: no intro
        assert [line.split(" ", 1)[0] for line in numbered] == [
            f"{i}." for i in range(1, len(items) + 1)
        ]
        assert all(line[3].isupper() and line.endswith(".") for line in numbered)
        if name != GOOGLE:
            assert name in lines[0]
    rendered = str({"user_metadata": {"limitation": limits}})
    assert "\\n1. " in rendered  # as AgentFlow's metadata dict prints: one string, newlines


def test_a_renamed_variant_keeps_the_facts_under_its_own_name() -> None:
    renamed = build_tool({"name": CODER, "rename": "Coder"})
    data = tool_metadata(renamed)
    assert data["output_type"].startswith("dict - ") and data["require_llm_engine"] is True
    assert "Coder cannot" in data["user_metadata"]["limitations"]
    assert CODER not in str(data)


# -- tool names ----------------------------------------------------------------------------------------


def test_names_match_as_agentflows_planner_matches_them() -> None:
    for spelling in (WIKI, "wikipedia rag search tool", "WIKIPEDIA__RAG  search_Tool"):
        assert match_agentflow_tool(spelling, AGENTFLOW_TOOLS) == WIKI, spelling
    for spelling in (
        "Wikipedia_Search_Tool",  # AgentFlow's short class name: not an available name
        "Wikipedia-RAG-Search-Tool",
        "WikipediaRAGSearchTool",
        "Wikipedia_RAG_Search",
        " Wikipedia_RAG_Search_Tool",
    ):
        assert match_agentflow_tool(spelling, AGENTFLOW_TOOLS) is None, spelling


def run_preset(tool_names: list[str], **settings: Any) -> tuple[dict[str, Any], Any]:
    env = gym.make(
        "AgentFlow-Search-v0", preset="agentflow_eval", modules="rule", tasks=[TASK], **settings
    )
    env.reset(seed=0)
    info: dict[str, Any] = {}
    for name in tool_names:
        action = format_planner_action("Next.", "Blue Harbor director", "Find the director", name)
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    session = env.unwrapped.session
    env.close()
    return info, session


def test_in_the_preset_short_names_are_unmatched_and_results_keep_agentflows_shapes() -> None:
    names = ["Wikipedia_Search_Tool", "wikipedia rag search tool"]
    _, session = run_preset(names, agentflow_wikipedia="as_intended")  # the picked pages' shape
    steps = memory_actions(session.memory)
    assert steps["Action Step 1"]["tool_name"] == "No matched tool given: Wikipedia_Search_Tool"
    second = steps["Action Step 2"]
    assert second["tool_name"] == WIKI
    (value,) = second["result"]  # AgentFlow's executor returns a list of results
    assert isinstance(value, dict) and list(value) == ["query", RELEVANT, OTHER]
    assert "Blue Harbor" in [page["title"] for page in value[RELEVANT]]  # no model: by rank
    entry = session.memory.entries[1]
    assert entry.tool_value == value and entry.tool_result == str(value)


def test_outside_agentflows_format_short_names_resolve_and_results_stay_text() -> None:
    env = gym.make("AgentFlow-Search-v0", tools=[WIKI, "Search"], tasks=[TASK], max_turns=3)
    env.reset(seed=0)
    action = format_planner_action(
        "Next.", "Blue Harbor director", "Find it", "Wikipedia_Search_Tool"
    )
    info = env.step(action)[4]
    env.close()
    entry = info["memory"][-1]
    assert entry["selected_tool"] == WIKI and entry["tool_value"] is None
    assert entry["tool_result"].startswith("Raw passages")


# -- results in AgentFlow's shapes -------------------------------------------------------------------


def test_wikipedia_returns_agentflows_dict_of_pages(model_server: FakeOpenAIServer) -> None:
    tool = WikipediaRAGSearchTool(llm=backend(model_server))
    result = shaped(tool, {"query": "Who directed Blue Harbor?"})
    assert result.ok and result.output == str(result.value), result.error
    value = result.value
    assert (
        list(value) == ["query", RELEVANT, OTHER] and value["query"] == "Who directed Blue Harbor?"
    )
    (page,) = value[RELEVANT]
    assert page == {
        "title": "Blue Harbor",
        "url": "https://en.wikipedia.org/wiki/Blue_Harbor",
        "abstract": (  # the page's first 100 characters
            "Blue Harbor is a film directed by Ana Lim, released in 1998.\n"
            "Blue Harbor won a prize at the Veldara ..."
        ),
        "retrieved_information": "Blue Harbor was directed by Ana Lim.",
    }
    assert value[OTHER] and all(list(p) == ["title", "url", "abstract"] for p in value[OTHER])
    assert "Blue Harbor" not in [p["title"] for p in value[OTHER]]
    answer_prompt = user_text(model_server.requests[-1])
    assert "won a prize" in answer_prompt  # both passages of the page are read
    assert result.metadata["picked_by"] == "model"


def test_wikipedia_without_a_model_answers_from_the_best_ranked_pages() -> None:
    result = shaped(WikipediaRAGSearchTool(), {"query": "Blue Harbor Ana Lim Port Ellis"})
    value = result.value
    assert result.ok and len(value[RELEVANT]) == 3 and value[OTHER] == []
    assert all(p["retrieved_information"].startswith("Best matching") for p in value[RELEVANT])


def test_wikipedia_pick_failure_and_no_pages_keep_agentflows_keys(
    model_server: FakeOpenAIServer,
) -> None:
    model_server.push(Reply.error(500))
    failed_pick = shaped(WikipediaRAGSearchTool(llm=backend(model_server)), {"query": "Ana Lim"})
    assert failed_pick.ok and failed_pick.value[RELEVANT] == []  # as in AgentFlow: none picked
    assert failed_pick.value[OTHER] and "pick_error" in failed_pick.metadata
    nothing = shaped(WikipediaRAGSearchTool(), {"query": "zzz qqq"})
    assert list(nothing.value) == ["query", "relevant_pages", OTHER]
    assert nothing.value[OTHER][0]["title"] is None and "error" in nothing.value[OTHER][0]
    failed = shaped(WikipediaRAGSearchTool(), {"query": "x"}, corpus=None)
    assert not failed.ok and failed.value is None  # no collection: a recorded failure


def test_python_returns_printed_output_variables_and_code(model_server: FakeOpenAIServer) -> None:
    result = shaped(PythonCodeGeneratorTool(llm=backend(model_server)), {"query": "17 * 23 + 5"})
    assert result.ok, result.error
    assert result.value == {
        "printed_output": "result: 396",
        "variables": {"x": "396"},
        "execution_code": "x = 17 * 23 + 5\nprint('result:', x)",
    }
    assert result.output == str(result.value) and result.metadata["exit_code"] == 0


def test_python_failures_are_agentflows_error_dict(model_server: FakeOpenAIServer) -> None:
    tool = PythonCodeGeneratorTool(llm=backend(model_server))
    model_server.push(Reply("```python\nprint('before')\nprint(1 / 0)\n```"))
    crashed = shaped(tool, {"query": "divide"})
    assert not crashed.ok and list(crashed.value) == ["error"]
    assert "ZeroDivisionError" in crashed.value["error"] and crashed.error is not None
    model_server.push(Reply("It is 42."))
    no_code = shaped(tool, {"query": "anything"})
    assert not no_code.ok and "no ```python code block" in no_code.value["error"]
    assert no_code.metadata["kind"] == "no_code"


def test_python_reports_functions_classes_and_cuts_long_values(
    model_server: FakeOpenAIServer,
) -> None:
    program = (
        "import math\nclass Box: pass\ndef area(r):\n    return math.pi * r * r\n"
        "big = list(range(3000))\n_hidden = 1\n__private = 2\nprint(round(area(2), 3))\n"
        "str = list = 'shadowed builtins'"  # the report must not rely on them
    )
    model_server.push(Reply(f"```python\n{program}\n```"))
    result = shaped(PythonCodeGeneratorTool(llm=backend(model_server)), {"query": "area"})
    variables = result.value["variables"]
    # No modules, no __names; shadowed builtins are variables like any other.
    assert list(variables) == ["Box", "area", "big", "_hidden", "str", "list"]
    assert variables["Box"] == "<type: Box>" and variables["area"] == "<function: area>"
    assert len(variables["big"]) <= 2000 and "[middle cut]" in variables["big"]
    assert result.value["printed_output"] == "12.566"


def test_memory_shows_the_value_and_otherwise_the_text() -> None:
    memory = Memory("q", ToolSet([make_tool(CODER)]))
    value = {"printed_output": "396", "variables": {}, "execution_code": "print(396)"}
    base = {
        "justification": "",
        "context": "",
        "sub_goal": "compute",
        "selected_tool": CODER,
        "tool_arguments": {"query": "17 * 23 + 5"},
        "verification_status": "CONTINUE",
    }
    memory.add_entry(
        MemoryEntry(turn=1, tool_result=str(value), tool_ok=True, tool_value=value, **base)
    )
    error = {"error": "exited with code 1: ZeroDivisionError: division by zero"}
    memory.add_entry(
        MemoryEntry(turn=2, tool_result=str(error), tool_ok=False, tool_value=error, **base)
    )
    memory.add_entry(MemoryEntry(turn=3, tool_result="plain text", tool_ok=True, **base))
    results = [step["result"] for step in memory_actions(memory).values()]
    assert results == [[value], [error], ["plain text"]]
    assert "'result': [{'printed_output': '396'" in str(memory_actions(memory))
