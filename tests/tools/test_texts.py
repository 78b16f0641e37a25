"""AgentFlow's cut of long tool results (``agentflow_cut``), alone and in ``run_tool`` under
``ToolContext.agentflow_cut``, beside this project's cut of the whole text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from fake_openai_server import bounded

from agentflow_env.tools import Tool, ToolCard, ToolContext, ToolResult
from agentflow_env.tools.runner import run_tool
from agentflow_env.tools.texts import agentflow_cut, fill


class _Cell:
    def __init__(self) -> None:
        self.note = "abcdefghij"


@pytest.mark.parametrize(
    ("value", "cut"),
    [
        ("abcdefghij", "abcdefghij"),  # at the limit: kept
        ("abcdefghijk", "abcdefg..."),  # past it: limit - 3 characters, then three dots
        (12345678901, "1234567..."),  # a number whose text is too long becomes that text
        (1234567890, 1234567890),
        (True, True),
        (None, None),
        ({"k" * 11: ["x" * 12, 3]}, {"kkkkkkk...": ["xxxxxxx...", 3]}),  # keys too, nested
        (("x" * 12,), "('xxxxx..."),  # a tuple becomes its text
        (_Cell(), {"note": "abcdefghij"}),  # an object becomes its attributes
    ],
)
def test_agentflow_cut(value: Any, cut: Any) -> None:
    assert agentflow_cut(value, 10) == cut


def test_fill_replaces_the_field() -> None:
    assert fill("found none for {query}.", "{query}", "x y") == "found none for x y."


class _Long(Tool):
    card = ToolCard("Long", "returns long text", {}, "str", "")

    def __init__(self, value: Any = None) -> None:
        self.value = value

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        if self.value is None:
            return ToolResult(ok=True, output="w" * 50)
        return ToolResult(ok=True, output=str(self.value), value=self.value)


@pytest.mark.parametrize(
    ("value", "agentflow", "output"),
    [
        (None, False, "w" * 20 + "\n...[output cut: 30 more characters]"),
        (None, True, "w" * 17 + "..."),
        ({"a": "v" * 30, "b": "short"}, True, str({"a": "v" * 17 + "...", "b": "short"})),
    ],
)
def test_run_tool_cuts_by_the_contexts_rule(value: Any, agentflow: bool, output: str) -> None:
    context = ToolContext(agentflow_cut=agentflow)
    result = bounded(run_tool(_Long(value), {}, context, max_output_chars=20))
    assert result.output == output
    if value is not None:
        assert result.value == {"a": "v" * 17 + "...", "b": "short"}
        assert result.metadata["agentflow_cut"] is True


def test_agentflows_rule_keeps_a_value_whose_every_string_fits() -> None:
    value = {"a": "v" * 15, "b": "w" * 15}  # 40 characters of text, each string within 20
    result = bounded(
        run_tool(_Long(value), {}, ToolContext(agentflow_cut=True), max_output_chars=20)
    )
    assert result.value == value and result.output == str(value)
    assert "agentflow_cut" not in result.metadata
