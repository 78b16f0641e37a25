"""AgentFlow's Python tool speaking AgentFlow's own words (``ToolContext.agentflow_texts``, read
from a fake checkout): its middle cut, its note on the variables left out and its errors. The
model is a scripted stand-in; the programs run in the local sandbox."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import bounded
from test_agentflow_source import (
    PY_MIDDLE_CUT,
    PY_NO_CODE,
    PY_OMITTED,
    PY_TIMEOUT,
    make_checkout,
)

from agentflow_env.tools import ToolContext, ToolResult
from agentflow_env.tools.agentflow import PythonCodeGeneratorTool
from agentflow_env.tools.runner import run_tool
from agentflow_env.tools.sandbox import SandboxLimits
from agentflow_env.tools.texts import AgentFlowToolTexts
from agentflow_env.workflow.agentflow_source import read_tool_texts

MANY = "import math\n" + "\n".join(f"v{i} = {i}" for i in range(25)) + "\nprint('ok')"


@dataclass
class _Reply:
    text: str


class ScriptedModel:
    """Answers every request with one fixed reply."""

    def __init__(self, reply: str) -> None:
        self.reply = reply

    async def chat(self, messages: Sequence[Mapping[str, str]]) -> _Reply:
        return _Reply(self.reply)


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> AgentFlowToolTexts:
    return read_tool_texts(make_checkout(Path(tmp_path_factory.mktemp("py")) / "AgentFlow"))


def run(reply: str, texts: AgentFlowToolTexts, limits: SandboxLimits | None = None) -> ToolResult:
    tool = PythonCodeGeneratorTool(llm=ScriptedModel(reply), limits=limits)
    context = ToolContext(agentflow_shapes=True, agentflow_texts=texts)
    return bounded(run_tool(tool, {"query": "compute"}, context, timeout_s=30.0))


def code(program: str) -> str:
    return f"Here it is:\n```python\n{program}\n```"


def test_long_printed_output_is_cut_in_the_middle_as_agentflow_cuts(
    texts: AgentFlowToolTexts,
) -> None:
    value: dict[str, Any] = run(code("print('a' * 3000 + 'b' * 3000)"), texts).value
    kept = 3500 // 2 - 50  # AgentFlow keeps this much of each end, whatever its marker
    assert value["printed_output"] == "a" * kept + PY_MIDDLE_CUT + "b" * kept


def test_a_long_variable_is_cut_with_agentflows_marker(texts: AgentFlowToolTexts) -> None:
    value = run(code("big = 'x' * 1500 + 'y' * 1500\nprint(len(big))"), texts).value
    kept = 2000 // 2 - 50
    assert value["variables"]["big"] == "x" * kept + PY_MIDDLE_CUT + "y" * kept


@pytest.mark.parametrize(
    ("own", "note"),
    [
        # AgentFlow counts every name the program left, its modules too: 26 - 20.
        (False, PY_OMITTED.replace("{count}", "6")),
        (True, "5 more variables left out"),  # this project's: the variables only
    ],
)
def test_the_note_on_variables_left_out(own: bool, note: str, texts: AgentFlowToolTexts) -> None:
    value = run(code(MANY), AgentFlowToolTexts() if own else texts).value
    assert len(value["variables"]) == 21 and value["variables"]["__truncated__"] == note


@pytest.mark.parametrize(
    ("reply", "limits", "error"),
    [
        ("The answer is 42.", None, PY_NO_CODE),
        (code("print(1 / 0)"), None, "division by zero"),  # the exception's message alone
        (code("raise KeyError('k')"), None, "'k'"),
        (code("raise RuntimeError"), None, ""),
        (code("while True:\n    pass"), SandboxLimits(timeout_s=1.0, cpu_s=5), PY_TIMEOUT),
    ],
)
def test_errors_are_agentflows_words(
    reply: str, limits: SandboxLimits | None, error: str, texts: AgentFlowToolTexts
) -> None:
    result = run(reply, texts, limits)
    assert not result.ok and result.value == {"error": error}
    assert result.output == str({"error": error})


def test_without_agentflows_words_the_errors_are_this_projects() -> None:
    result = run(code("print(1 / 0)"), AgentFlowToolTexts())
    assert "ZeroDivisionError" in result.value["error"]
    assert result.value["error"].startswith("running the code failed")
