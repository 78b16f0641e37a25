"""AgentFlow's formats (``prompt_style="agentflow"``) against reference renderings written here
from AgentFlow's formats: the tool metadata dict, the ``Action Step`` memory, the planner prompt
and the query-analysis prompt; and reading the executor's command without running it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from agentflow_env.modules.agentflow_prompts import (
    CommandError,
    analysis_messages,
    read_analysis,
    read_command,
)
from agentflow_env.tools.base import Tool, ToolCard, ToolContext, ToolResult
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.agentflow_format import (
    AGENTFLOW_SYSTEM,
    agentflow_planner_messages,
    analysis_text,
    command_text,
    memory_actions,
    tool_metadata,
)
from agentflow_env.workflow.memory import Memory, MemoryEntry, QueryAnalysis


class LookupTool(Tool):
    card = ToolCard(
        name="Wikipedia_RAG_Search_Tool",
        description="Finds encyclopedia passages about a query.",
        input_schema={"query": {"type": "string", "description": "what to look up"}},
        output_type="str - the passages found",
        primary_argument="query",
        demo_commands=(
            {"command": 'Wikipedia_RAG_Search_Tool(query="Moon mass")', "description": "a fact"},
        ),
        limitations=("short passages only", "English only"),
    )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult(True, "")


class CountTool(Tool):
    card = ToolCard(
        name="Counter_Tool",
        description="Counts things.",
        input_schema={
            "items": {"type": "string", "description": "the items"},
            "exact": {"type": "boolean", "description": "exact count", "required": False},
        },
        output_type="int - the count",
        primary_argument="items",
    )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult(True, "")


TOOLS = ToolSet([LookupTool(), CountTool()])


def entry(turn: int, **fields: Any) -> MemoryEntry:
    base: dict[str, Any] = {
        "turn": turn,
        "justification": "because",
        "context": "ctx",
        "sub_goal": "Find the mass",
        "selected_tool": "Wikipedia_RAG_Search_Tool",
        "tool_arguments": {"query": 'Moon "mass"'},
        "tool_result": "The Moon's mass is 7.3e22 kg.",
        "tool_ok": True,
        "verification_status": "CONTINUE",
        "open_questions": ("What is the mass?",),
    }
    return MemoryEntry(**{**base, **fields})


def memory() -> Memory:
    mem = Memory("How heavy is the Moon?", TOOLS)
    mem.set_analysis(
        QueryAnalysis(
            objective="Find the Moon's mass.",
            constraints=("Give kilograms.",),
            sub_questions=("What is the Moon's mass?",),
            tools=("Wikipedia_RAG_Search_Tool",),
            skills=("Looking up facts.",),
        )
    )
    mem.add_entry(entry(1))
    mem.add_entry(
        entry(
            2,
            selected_tool="Counter_Tool",
            tool_arguments={"items": "moons", "exact": True},
            tool_result="",
            tool_ok=False,
            errors=("Counter_Tool raised ValueError: bad",),
        )
    )
    mem.add_entry(
        entry(
            3,
            selected_tool=None,
            tool_arguments={},
            tool_result="",
            tool_ok=False,
            verification_status="INVALID",
            errors=("unknown tool 'Google_Tool'; available tools: Wikipedia_RAG_Search_Tool",),
            unmatched_tool="Google_Tool",
        )
    )
    mem.add_entry(
        entry(
            4,
            sub_goal="",
            selected_tool=None,
            tool_arguments={},
            tool_result="",
            tool_ok=False,
            verification_status="INVALID",
            errors=("malformed action: no Tool Name",),
        )
    )
    return mem


LOOKUP_METADATA = {
    "tool_name": "Wikipedia_RAG_Search_Tool",
    "tool_description": "Finds encyclopedia passages about a query.",
    "tool_version": "1.0.0",
    "input_types": {"query": "str - what to look up"},
    "output_type": "str - the passages found",
    "demo_commands": [
        {"command": 'execution = tool.execute(query="Moon mass")', "description": "a fact"}
    ],
    "user_metadata": {  # one multi-line string per key, as AgentFlow's tools write them
        "limitation": (
            "\nWhat Wikipedia_RAG_Search_Tool cannot do well:\n1. Short passages only.\n"
            "2. English only.\n"
        ),
        "best_practice": "",
    },
    "require_llm_engine": False,
}


def test_tool_metadata_has_agentflows_keys_types_and_commands() -> None:
    assert tool_metadata(LookupTool()) == LOOKUP_METADATA
    assert list(tool_metadata(LookupTool())) == list(LOOKUP_METADATA)  # key order shows
    counter = tool_metadata(CountTool())
    assert counter["input_types"] == {"items": "str - the items", "exact": "bool - exact count"}
    assert counter["demo_commands"] == []


def test_memory_renders_as_the_action_step_dict() -> None:
    expected = (
        "{'Action Step 1': {'tool_name': 'Wikipedia_RAG_Search_Tool', 'sub_goal': "
        "'Find the mass', 'command': 'execution = tool.execute(query=\"Moon \\\\\"mass\\\\\"\")', "
        "'result': [\"The Moon's mass is 7.3e22 kg.\"]}, "
        "'Action Step 2': {'tool_name': 'Counter_Tool', 'sub_goal': 'Find the mass', "
        "'command': 'execution = tool.execute(items=\"moons\", exact=True)', "
        "'result': ['Error: Counter_Tool raised ValueError: bad']}, "
        "'Action Step 3': {'tool_name': 'No matched tool given: Google_Tool', 'sub_goal': "
        "'Find the mass', 'command': 'No command: the selected tool is not available.', "
        "'result': 'No result: the selected tool is not available.'}, "
        "'Action Step 4': {'tool_name': None, 'sub_goal': None, "
        "'command': 'No command: the selected tool is not available.', "
        "'result': 'No result: the selected tool is not available.'}}"
    )
    assert str(memory_actions(memory())) == expected
    assert "What is the mass?" not in expected  # no open questions, no verdicts


def test_command_text_is_a_python_call_with_literal_values() -> None:
    assert command_text({"query": 'say "hi"\n', "k": 3, "f": None}) == (
        'execution = tool.execute(query="say \\"hi\\"\\n", k=3, f=None)'
    )


ANALYSIS = """Concise Summary: Find the Moon's mass.

Required Skills:
- Looking up facts.

Relevant Tools:
- Wikipedia_RAG_Search_Tool

Additional Considerations:
- Give kilograms."""


def test_analysis_in_four_sections_without_hints_unless_asked() -> None:
    analysis = memory().analysis
    assert analysis_text(analysis) == ANALYSIS
    assert analysis_text(analysis, show_sub_questions=True) == (
        ANALYSIS + "\n\nSub-questions:\n1. What is the Moon's mass?"
    )
    written = QueryAnalysis(objective="x", text="  Concise Summary: as the model wrote it\n")
    assert analysis_text(written) == "Concise Summary: as the model wrote it"


PLANNER_PROMPT = (
    """
Task: Decide the most useful next step toward answering the query, using the available tools \
and what the previous steps found.

Context:
- **Query:** How heavy is the Moon?
- **Query Analysis:** """
    + ANALYSIS
    + """
- **Available Tools:** ['Wikipedia_RAG_Search_Tool', 'Counter_Tool']
- **Toolbox Metadata:** {TOOLBOX}
- **Previous Steps:** {STEPS}

Instructions:
1. Study the query, the steps taken so far and the tools that are available.
2. Pick the **single best tool** for the next step.
3. State a concrete **sub-goal** that this tool can achieve.
4. Give the tool every piece of **context** it needs (data, names, values from earlier steps).

Response Format:
1.  **Justification:** Why this tool and this sub-goal.
2.  **Context:** Everything the tool needs to know.
3.  **Sub-Goal:** The objective of this step for the tool.
4.  **Tool Name:** The exact name of the chosen tool.

Rules:
- Choose exactly ONE tool.
- The tool must be able to achieve the sub-goal directly.
- The Context section must hold all the information the tool needs.
- End the response with the Context, Sub-Goal and Tool Name sections, in that order, and add \
nothing after them.
"""
)


def test_planner_prompt_is_one_user_message_under_the_plain_system_prompt() -> None:
    mem = memory()
    messages = agentflow_planner_messages(mem, TOOLS)
    toolbox = {
        "Wikipedia_RAG_Search_Tool": LOOKUP_METADATA,
        "Counter_Tool": tool_metadata(CountTool()),
    }
    expected = PLANNER_PROMPT.replace("{TOOLBOX}", str(toolbox)).replace(
        "{STEPS}", str(memory_actions(mem))
    )
    assert messages == [
        {"role": "system", "content": "You are a helpful, creative, and smart assistant."},
        {"role": "user", "content": expected},
    ]
    assert messages[0]["content"] == AGENTFLOW_SYSTEM
    for absent in ("Step 5", "Open questions", "What is the Moon's mass?", "CONTINUE"):
        assert absent not in messages[1]["content"]


QUERY_ANALYSIS_PROMPT = """
Task: Analyze the query to work out which skills and tools answering it takes.

Inputs:
- Query: How heavy is the Moon?
- Available tools: ['Wikipedia_RAG_Search_Tool', 'Counter_Tool']
- Metadata for tools: {TOOLBOX}

Instructions:
1. Name the main objectives of the query.
2. List the skills and the tools it needs.
3. Say briefly how each skill and tool helps.
4. Note anything else that matters.

Reply with these four sections:
Concise Summary: <the query's main points and objectives>
Required Skills:
<one skill per line, with why it is needed>
Relevant Tools:
<one tool per line, with how it would be used and its limits>
Additional Considerations:
<anything else to keep in mind>

Keep it brief and precise.
"""


def test_query_analysis_prompt() -> None:
    toolbox = {
        "Wikipedia_RAG_Search_Tool": LOOKUP_METADATA,
        "Counter_Tool": tool_metadata(CountTool()),
    }
    assert analysis_messages("How heavy is the Moon?", TOOLS) == [
        {"role": "system", "content": AGENTFLOW_SYSTEM},
        {"role": "user", "content": QUERY_ANALYSIS_PROMPT.replace("{TOOLBOX}", str(toolbox))},
    ]


def test_analysis_replies_are_read_from_sections_or_json() -> None:
    text = (
        "**Concise Summary:** The mass.\n\n**Required Skills:**\n- lookup\n- units\n"
        "3. Relevant Tools: Wikipedia_RAG_Search_Tool\nAdditional Considerations:\nnone"
    )
    assert read_analysis(text) == {
        "concise_summary": "The mass.",
        "required_skills": "- lookup\n- units",
        "relevant_tools": "Wikipedia_RAG_Search_Tool",
        "additional_considerations": "none",
    }
    as_json = '{"concise_summary": "S", "required_skills": "K", "relevant_tools": "T"}'
    assert read_analysis(as_json)["additional_considerations"] == ""
    assert read_analysis("nothing useful")["concise_summary"] == ""


@pytest.mark.parametrize(
    ("reply", "arguments"),
    [
        (
            'Generated Command:\n```python\nexecution = tool.execute(query="Moon mass")\n```',
            {"query": "Moon mass"},
        ),
        ("```python\nexecution = tool.execute('Moon mass')\n```", {"query": "Moon mass"}),
        (
            '```python\nq = "Moon mass"\nexecution = tool.execute(query=q)\n```',
            {"query": "Moon mass"},
        ),
        ('execution = tool.execute(query="x")', {"query": "x"}),
        (
            '```python\nexecution = tool.execute(query="a")\n```\nthen\n'
            '```python\nexecution = tool.execute(query="b")\n```',
            {"query": "b"},
        ),
    ],
)
def test_commands_are_read_as_literals(reply: str, arguments: dict[str, Any]) -> None:
    assert read_command(reply, LookupTool())[0] == arguments


@pytest.mark.parametrize(
    "reply",
    [
        '```python\nexecution = tool.execute(query=__import__("os").system("touch PWNED"))\n```',
        "```python\nexecution = tool.execute(query=open('/etc/passwd').read())\n```",
        "no command here",
        "```python\nexecution = tool.execute(**{'query': 'x'})\n```",
        "```python\nexecution = tool.execute(query=" + "[" * 5000 + "]" * 5000 + ")\n```",
    ],
)
def test_commands_that_are_not_literal_are_refused_and_never_run(
    reply: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CommandError):
        read_command(reply, LookupTool())
    assert not (tmp_path / "PWNED").exists()


def test_an_unknown_tool_is_named_whatever_the_verifier_then_said() -> None:
    mem = Memory("q", TOOLS)
    mem.add_entry(
        entry(
            1,
            selected_tool=None,
            tool_arguments={},
            tool_result="",
            tool_ok=False,
            verification_status="STOP",  # verify_invalid_turns: the verifier may still stop
            errors=("unknown tool 'Web_Tool'; available tools: Counter_Tool",),
            unmatched_tool="Web_Tool",
        )
    )
    assert memory_actions(mem)["Action Step 1"]["tool_name"] == "No matched tool given: Web_Tool"
