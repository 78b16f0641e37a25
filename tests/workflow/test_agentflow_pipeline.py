"""The faithful preset end to end: scripted model replies over a real loopback HTTP server, and
the trace AgentFlow's pipeline builds for the same replies, written out by hand.

AgentFlow's loop for each step: the planner's reply -> (Context, Sub-Goal, Tool Name) -> the
executor model writes ``execution = tool.execute(...)`` -> the tool runs -> the step is added to
memory as ``{'tool_name', 'sub_goal', 'command', 'result'}`` (the result: the list of what the
tool returned, a dict for its Wikipedia and Python tools) -> the verifier model concludes STOP or
CONTINUE; after STOP (or the step limit) the generalist model writes the direct answer.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import pytest
from fake_openai_server import FakeOpenAIServer, user_text

import agentflow_env  # noqa: F401  (registers the env ids)
from agentflow_env.retrieval.corpus import Corpus, Document
from agentflow_env.tasks.base import Task
from agentflow_env.tools.agentflow.names import AGENTFLOW_TOOLS, SHORT_NAMES
from agentflow_env.workflow.actions import format_planner_action
from agentflow_env.workflow.agentflow_format import AGENTFLOW_SYSTEM, memory_actions

CORPUS = Corpus.from_documents(
    [
        Document("1", "Zorblat", "The Zorblat is a kitchen robot made by Quonko Corp."),
        Document("2", "Quonko Corp", "Quonko Corp is a company founded by Ada Lin in 1987."),
        Document("3", "Ada Lin", "Ada Lin is an engineer."),
    ],
    corpus_id="pipeline-test",
)
SEARCH_TASK = Task(
    "zorblat", "Who founded the company that makes the Zorblat?", ("Ada Lin",), CORPUS
)
PYTHON_TASK = Task("product", "What is 17 * 23 + 5?", ("396",), CORPUS)

CONDENSED = {
    "Zorblat maker": "The Zorblat is made by Quonko Corp.",
    "Quonko Corp founder": "Quonko Corp was founded by Ada Lin.",
}
RELEVANT = "relevant_pages (to the query)"
OTHER = "other_pages (may be irrelevant to the query)"


def responder(role: str, request: dict[str, Any]) -> str:
    """Scripted models: each reply is keyed on what the request asks (AgentFlow's prompts)."""
    messages = request["messages"]
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    text = user_text(request)
    if "choose which encyclopedia pages" in system:  # the Wikipedia tool picking pages
        query = re.search(r"^Question: (.*)$", text, re.MULTILINE).group(1)
        listed = re.findall(r"^(\d+)\. (.*)$", text, re.MULTILINE)
        return str([int(number) for number, title in listed if title in query])
    if "excerpts of one web page" in system:  # ... and answering from a picked page
        query = re.search(r"^Question: (.*)$", text, re.MULTILINE).group(1)
        return CONDENSED[query]
    if "Python 3 programs" in system:  # the code generator tool
        return "Here is the program.\n```python\nprint(17 * 23 + 5)\n```"
    assert system == AGENTFLOW_SYSTEM, system
    if "Task: Analyze the query" in text:
        return (
            "Concise Summary: Find the answer.\nRequired Skills:\n- Search\n"
            "Relevant Tools:\n- Wikipedia_RAG_Search_Tool\nAdditional Considerations:\n- None"
        )
    if "Task: Write the exact command" in text:
        sub_goal = re.search(r"\*\*Sub-Goal:\*\* (.*)", text).group(1)
        query = {
            "Find the maker of the Zorblat": "Zorblat maker",
            "Find who founded Quonko Corp": "Quonko Corp founder",
            "Compute 17 * 23 + 5": "Compute 17 * 23 + 5",
        }[sub_goal]
        return f'Generated Command:\n```python\nexecution = tool.execute(query="{query}")\n```'
    if "Task: Judge whether the memory" in text:
        done = "Ada Lin" in text or "396" in text
        return (
            "The memory answers it.\nConclusion: STOP"
            if done
            else "More is needed.\nConclusion: CONTINUE"
        )
    if "Task: Write a concise final answer" in text:
        answer = "Ada Lin" if "Ada Lin" in text else "396"
        return f"1.  **Process Summary:** Looked it up.\n2.  **Answer:** {answer}"
    raise AssertionError(f"unexpected request: {text[:200]}")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    with FakeOpenAIServer(responder) as running:
        monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", running.base_url)
        monkeypatch.setenv("AGENTFLOW_LLM_MODEL", "fake")
        yield running


def run(actions: list[tuple[str, str, str]], task: Task, **settings: Any) -> tuple[dict, Any]:
    env = gym.make("AgentFlow-Search-v0", preset="agentflow_eval", tasks=[task], **settings)
    observation, info = env.reset(seed=0)
    assert "**Available Tools:** " + str(list(AGENTFLOW_TOOLS)) in observation["text"]
    for context, sub_goal, tool in actions:
        action = format_planner_action(
            justification="Next step.", context=context, sub_goal=sub_goal, tool_name=tool
        )
        observation, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    session = env.unwrapped.session
    env.close()
    return info, session


def test_a_search_task_follows_agentflows_pipeline(server: FakeOpenAIServer) -> None:
    info, session = run(
        [
            (
                "The question names the Zorblat.",
                "Find the maker of the Zorblat",
                "Wikipedia_RAG_Search_Tool",
            ),
            (
                "The Zorblat is made by Quonko Corp.",
                "Find who founded Quonko Corp",
                "wikipedia rag search tool",  # matched as AgentFlow matches: case, spaces aside
            ),
        ],
        SEARCH_TASK,
        agentflow_wikipedia="as_intended",  # the pages picked and answered, as AgentFlow meant
    )
    zorblat = {
        "title": "Zorblat",
        "url": "https://en.wikipedia.org/wiki/Zorblat",
        "abstract": "The Zorblat is a kitchen robot made by Quonko Corp.",
    }
    quonko = {
        "title": "Quonko Corp",
        "url": "https://en.wikipedia.org/wiki/Quonko_Corp",
        "abstract": "Quonko Corp is a company founded by Ada Lin in 1987.",
    }
    assert memory_actions(session.memory) == {
        "Action Step 1": {
            "tool_name": "Wikipedia_RAG_Search_Tool",
            "sub_goal": "Find the maker of the Zorblat",
            "command": 'execution = tool.execute(query="Zorblat maker")',
            "result": [
                {
                    "query": "Zorblat maker",
                    RELEVANT: [{**zorblat, "retrieved_information": CONDENSED["Zorblat maker"]}],
                    OTHER: [],
                }
            ],
        },
        "Action Step 2": {
            "tool_name": "Wikipedia_RAG_Search_Tool",
            "sub_goal": "Find who founded Quonko Corp",
            "command": 'execution = tool.execute(query="Quonko Corp founder")',
            "result": [
                {
                    "query": "Quonko Corp founder",
                    RELEVANT: [
                        {**quonko, "retrieved_information": CONDENSED["Quonko Corp founder"]}
                    ],
                    OTHER: [zorblat],
                }
            ],
        },
    }
    assert info["end_reason"] == "verifier_stop" and info["answer"] == "Ada Lin"
    assert info["success"] and info["reward"] == 1.0
    roles = [_kind(r) for r in server.requests]
    assert roles == [
        "analysis",
        "command",
        "pick",
        "page",
        "verifier",
        "command",
        "pick",
        "page",
        "verifier",
        "answer",
    ]


def test_a_python_task_follows_agentflows_pipeline(server: FakeOpenAIServer) -> None:
    info, session = run(
        [("Numbers: 17, 23, 5.", "Compute 17 * 23 + 5", "Python_Code_Generator_Tool")],
        PYTHON_TASK,
    )
    (step,) = memory_actions(session.memory).values()
    assert step["tool_name"] == "Python_Code_Generator_Tool"
    assert step["command"] == 'execution = tool.execute(query="Compute 17 * 23 + 5")'
    assert step["result"] == [
        {"printed_output": "396", "variables": {}, "execution_code": "print(17 * 23 + 5)"}
    ]
    assert info["answer"] == "396" and info["success"]
    assert [_kind(r) for r in server.requests] == [
        "analysis",
        "command",
        "code",
        "verifier",
        "answer",
    ]


def test_a_short_name_is_an_unmatched_step_the_verifier_still_judges(
    server: FakeOpenAIServer,
) -> None:
    info, session = run(
        [
            ("x", "Find the maker of the Zorblat", "Web_Search_Tool"),
            ("y", "Find the maker of the Zorblat", "Wikipedia_RAG_Search_Tool"),
        ],
        SEARCH_TASK,
    )
    steps = memory_actions(session.memory)
    # The short name of a tool the planner is shown: AgentFlow's planner matches none.
    assert steps["Action Step 1"]["tool_name"] == "No matched tool given: Web_Search_Tool"
    assert [_kind(r) for r in server.requests][:3] == ["analysis", "verifier", "command"]
    assert info["turn"] == 2 and not info.get("answer")  # 10 steps allowed: still running


def test_every_agentflow_tool_name_resolves_in_the_presets_tool_set(
    server: FakeOpenAIServer,
) -> None:
    """The tool set still knows the short names (``make_tool``, other prompt styles); the
    episode in AgentFlow's format does not accept them (above)."""
    env = gym.make("AgentFlow-Search-v0", preset="agentflow_eval", tasks=[SEARCH_TASK])
    tools = env.unwrapped.tools
    for name in (*AGENTFLOW_TOOLS, *SHORT_NAMES):
        assert tools.get(name) is not None, name
    for short, long in SHORT_NAMES.items():
        assert tools.get(short).name == long
    env.close()


def _kind(request: dict[str, Any]) -> str:
    system = next((m["content"] for m in request["messages"] if m["role"] == "system"), "")
    text = user_text(request)
    if "choose which encyclopedia pages" in system:
        return "pick"
    if "excerpts of one web page" in system:
        return "page"
    if "Python 3 programs" in system:
        return "code"
    for marker, kind in (
        ("Task: Analyze the query", "analysis"),
        ("Task: Write the exact command", "command"),
        ("Task: Judge whether the memory", "verifier"),
        ("Task: Write a concise final answer", "answer"),
    ):
        if marker in text:
            return kind
    return "other"
