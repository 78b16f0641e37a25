"""The faithful preset end to end: scripted model replies over a real loopback HTTP server, and
the trace AgentFlow's pipeline builds for the same replies, written out by hand.

AgentFlow's loop for each step: the planner's reply -> (Context, Sub-Goal, Tool Name) -> the
executor model writes ``execution = tool.execute(...)`` -> the tool runs -> the step is added to
memory as ``{'tool_name', 'sub_goal', 'command', 'result'}`` -> the verifier model concludes
STOP or CONTINUE; after STOP (or the step limit) the generalist model writes the direct answer.
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
    "Zorblat maker": "The Zorblat is made by Quonko Corp (article: Zorblat).",
    "Quonko Corp founder": "Quonko Corp was founded by Ada Lin (article: Quonko Corp).",
}


def responder(role: str, request: dict[str, Any]) -> str:
    """Scripted models: each reply is keyed on what the request asks (AgentFlow's prompts)."""
    messages = request["messages"]
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    text = user_text(request)
    if "reference passages" in system:  # the Wikipedia RAG tool condensing its passages
        query = re.search(r"^Query: (.*)$", text, re.MULTILINE).group(1)
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


def run(actions: list[tuple[str, str, str]], task: Task) -> tuple[dict, Any]:
    env = gym.make("AgentFlow-Search-v0", preset="agentflow_eval", tasks=[task])
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
                "Wikipedia_Search_Tool",
            ),
        ],
        SEARCH_TASK,
    )
    header = "Relevant information condensed from {} retrieved passage(s):\n"  # BM25 hits
    assert memory_actions(session.memory) == {
        "Action Step 1": {
            "tool_name": "Wikipedia_RAG_Search_Tool",
            "sub_goal": "Find the maker of the Zorblat",
            "command": 'execution = tool.execute(query="Zorblat maker")',
            "result": [header.format(1) + CONDENSED["Zorblat maker"]],
        },
        "Action Step 2": {
            "tool_name": "Wikipedia_RAG_Search_Tool",  # the short name resolved to the tool
            "sub_goal": "Find who founded Quonko Corp",
            "command": 'execution = tool.execute(query="Quonko Corp founder")',
            "result": [header.format(2) + CONDENSED["Quonko Corp founder"]],
        },
    }
    assert info["end_reason"] == "verifier_stop" and info["answer"] == "Ada Lin"
    assert info["success"] and info["reward"] == 1.0
    roles = [_kind(r) for r in server.requests]
    assert roles == [
        "analysis",
        "command",
        "condense",
        "verifier",
        "command",
        "condense",
        "verifier",
        "answer",
    ]


def test_a_python_task_follows_agentflows_pipeline(server: FakeOpenAIServer) -> None:
    info, session = run(
        [("Numbers: 17, 23, 5.", "Compute 17 * 23 + 5", "Python_Coder_Tool")], PYTHON_TASK
    )
    (step,) = memory_actions(session.memory).values()
    assert step["tool_name"] == "Python_Code_Generator_Tool"
    assert step["command"] == 'execution = tool.execute(query="Compute 17 * 23 + 5")'
    assert "print(17 * 23 + 5)" in step["result"][0] and "396" in step["result"][0]
    assert info["answer"] == "396" and info["success"]
    assert [_kind(r) for r in server.requests] == [
        "analysis",
        "command",
        "code",
        "verifier",
        "answer",
    ]


def test_an_unknown_tool_is_a_recorded_step_the_verifier_still_judges(
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
    assert steps["Action Step 1"]["tool_name"] == "No matched tool given: Web_Search_Tool"
    assert [_kind(r) for r in server.requests][:3] == ["analysis", "verifier", "command"]
    assert info["turn"] == 2 and not info.get("answer")  # 10 steps allowed: still running


def test_every_agentflow_tool_name_resolves_in_the_preset(server: FakeOpenAIServer) -> None:
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
    if "reference passages" in system:
        return "condense"
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
