"""The planner's reply read by AgentFlow's rules (``agentflow_reply``), under AgentFlow's
scripts: one row per kind of reply, with what AgentFlow's planner records and whether the tool
runs, beside what this project's own reader makes of it."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import gymnasium as gym
import pytest
from fake_openai_server import FakeOpenAIServer
from hypothesis import given, settings
from hypothesis import strategies as st
from test_agentflow_pipeline import SEARCH_TASK, responder

import agentflow_env  # noqa: F401  (registers the env ids)
from agentflow_env.tools.agentflow.names import AGENTFLOW_TOOLS, match_agentflow_tool
from agentflow_env.workflow.actions import (
    ActionParseError,
    format_finish_action,
    parse_planner_action,
)
from agentflow_env.workflow.agentflow_format import memory_actions
from agentflow_env.workflow.agentflow_reply import parse_agentflow_action, read_agentflow_step
from agentflow_env.workflow.own_pack import OWN_PACK

WIKI = "Wikipedia_RAG_Search_Tool"
UNREAD = None  # AgentFlow reads no fields: no tool, no sub-goal recorded


def _json(**fields: str) -> str:
    return json.dumps(fields)


# kind, reply, AgentFlow's (context, sub-goal, tool name as written) or UNREAD, whether the
# tool runs there, whether it runs under this project's own reader.
REPLIES = [
    (
        "plain",
        f"Justification: j\nContext: c\nSub-Goal: s\nTool Name: {WIKI}",
        ("c", "s", WIKI),
        True,
        True,
    ),
    (
        "bold labels",
        f"**Context:** c\n**Sub-Goal:** s\n**Tool Name:** {WIKI}",
        ("c", "s", WIKI),
        True,
        True,
    ),
    (
        "bold inside the sub-goal",
        f"Context: c\nSub-Goal: find **the** maker\nTool Name: {WIKI}",
        ("c", "find the maker", WIKI),
        True,
        True,
    ),
    (
        "name in backticks",
        f"Context: c\nSub-Goal: s\nTool Name: `{WIKI}`",
        ("c", "s", f"`{WIKI}`"),
        False,
        True,
    ),
    (
        "trailing period",
        f"Context: c\nSub-Goal: s\nTool Name: {WIKI}.",
        ("c", "s", f"{WIKI}."),
        False,
        True,
    ),
    (
        "a line after the name",
        f"Context: c\nSub-Goal: s\nTool Name: {WIKI}\nRunning it now.",
        ("c", "s", f"{WIKI}\nRunning it now."),
        False,
        True,
    ),
    (
        "a paragraph after a blank line",
        f"Context: c\nSub-Goal: s\nTool Name: {WIKI}\n\nRunning it now.",
        ("c", "s", WIKI),
        True,
        True,
    ),
    ("no Context field", f"Justification: j\nSub-Goal: s\nTool Name: {WIKI}", UNREAD, False, True),
    ("### headers", f"### Context\nc\n### Sub-Goal\ns\n### Tool Name\n{WIKI}", UNREAD, False, True),
    (
        "numbered labels",
        f"1. Context: c\n2. Sub-Goal: s\n3. Tool Name: {WIKI}",
        ("c\n2.", "s\n3.", WIKI),
        True,
        True,
    ),
    ("lower-case labels", f"context: c\nsub-goal: s\ntool name: {WIKI}", UNREAD, False, True),
    (
        "name with spaces, any case",
        "Context: c\nSub-Goal: s\nTool Name: wikipedia  RAG search_tool",
        ("c", "s", "wikipedia  RAG search_tool"),
        True,
        True,
    ),
    (
        "a JSON object",
        _json(justification="j", context=" c ", sub_goal="**s**", tool_name=f" {WIKI} "),
        ("c", "**s**", WIKI),
        True,
        True,
    ),
    (
        "a JSON object without a justification",
        _json(context="c", sub_goal="s", tool_name=WIKI),
        UNREAD,
        False,
        True,
    ),
    (
        "two blocks: the last",
        f"Context: a\nSub-Goal: b\nTool Name: Nope\n\nContext: c\nSub-Goal: s\nTool Name: {WIKI}",
        ("c", "s", WIKI),
        True,
        True,
    ),
    (
        "in a code fence",
        f"```\nContext: c\nSub-Goal: s\nTool Name: {WIKI}\n```",
        ("c", "s", WIKI),
        True,
        True,
    ),
]


@pytest.mark.parametrize(
    ("reply", "fields", "runs", "own_runs"),
    [pytest.param(*row[1:], id=row[0]) for row in REPLIES],
)
def test_each_kind_of_reply_is_read_as_agentflow_reads_it(
    reply: str, fields: tuple[str, str, str] | None, runs: bool, own_runs: bool
) -> None:
    step = read_agentflow_step(reply)
    if fields is None:
        assert step is None
        with pytest.raises(ActionParseError):
            parse_agentflow_action(reply)
    else:
        assert step is not None
        assert (step.context, step.sub_goal, step.tool_name) == fields
        action = parse_agentflow_action(reply)
        assert (action.context, action.sub_goal, action.tool_name) == fields
    matched = None if step is None else match_agentflow_tool(step.tool_name, AGENTFLOW_TOOLS)
    assert (matched is not None) == runs
    own = parse_planner_action(reply)
    assert (match_agentflow_tool(own.tool_name, AGENTFLOW_TOOLS) is not None) == own_runs


def test_the_own_reader_runs_a_tool_where_agentflows_runs_none() -> None:
    only_own = [row[0] for row in REPLIES if row[4] and not row[3]]
    assert only_own == [
        "name in backticks",
        "trailing period",
        "a line after the name",
        "no Context field",
        "### headers",
        "lower-case labels",
        "a JSON object without a justification",
    ]


def test_the_finish_action_is_read_first_where_the_planner_may_finish() -> None:
    action = parse_agentflow_action(format_finish_action("42"), finish=True)
    assert action.final_answer == "42"
    with pytest.raises(ActionParseError):  # without it AgentFlow reads no fields
        parse_agentflow_action(format_finish_action("42"))


PIECES = ["Context:", "Sub-Goal:", "Tool Name:", "```", "\n", "\n\n", " ", "x", "**", "`", "{"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=20).map("".join) | st.text())
def test_any_text_is_read_or_refused_without_raising_anything_else(text: str) -> None:
    with contextlib.suppress(ActionParseError):
        parse_agentflow_action(text, finish=True)


# --- under the preset, end to end ---------------------------------------------------------------
def _first_step(monkeypatch: pytest.MonkeyPatch, reply: str, **settings: Any) -> dict[str, Any]:
    with FakeOpenAIServer(responder) as server:
        monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("AGENTFLOW_LLM_MODEL", "fake")
        env = gym.make("AgentFlow-Search-v0", tasks=[SEARCH_TASK], **settings)
        env.reset(seed=0)
        env.step(reply)
        session = env.unwrapped.session
        env.close()
    return memory_actions(session.memory)["Action Step 1"]


STEP = "Context: The question names the Zorblat.\nSub-Goal: Find the maker of the Zorblat\n"


@pytest.mark.parametrize(
    ("reply", "tool_name", "sub_goal"),
    [
        (
            STEP + f"Tool Name: `{WIKI}`",
            f"No matched tool given: `{WIKI}`",
            "Find the maker of the Zorblat",
        ),
        (f"Sub-Goal: Find the maker of the Zorblat\nTool Name: {WIKI}", None, None),
        (
            f"1. Context: c\n2. Sub-Goal: Find the maker of the **Zorblat**\n3. Tool Name: {WIKI}",
            WIKI,
            "Find the maker of the Zorblat\n3.",
        ),
    ],
    ids=["backticks: an unknown tool", "no Context: nothing read", "numbered labels"],
)
def test_the_preset_records_what_agentflow_records(
    monkeypatch: pytest.MonkeyPatch, reply: str, tool_name: str | None, sub_goal: str | None
) -> None:
    step = _first_step(monkeypatch, reply, preset="agentflow_eval")
    assert (step["tool_name"], step["sub_goal"]) == (tool_name, sub_goal)
    if tool_name != WIKI:
        assert step["result"] == OWN_PACK.no_tool_texts[1]


def test_the_agentflow_style_without_a_preset_keeps_its_forgiving_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    step = _first_step(
        monkeypatch,
        STEP + f"Tool Name: `{WIKI}`.",
        prompt_style="agentflow",
        modules="llm",
        tools=AGENTFLOW_TOOLS,
    )
    assert step["tool_name"] == WIKI
