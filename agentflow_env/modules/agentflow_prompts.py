"""The frozen modules' prompts in AgentFlow's formats (``prompt_style="agentflow"``), and the
readers of their replies.

As in ``agentflow_env.workflow.agentflow_format``: every call runs under AgentFlow's plain system
prompt and shows its inputs under AgentFlow's headers and renderings (the tool list, the metadata
dict, the ``Action Step`` memory dict); the task and instruction sentences are this project's
own. Two departures, both for safety: the executor's command ``execution = tool.execute(...)``
is read, never executed (its keyword arguments must be literals), and the query analysis is
asked for as four labelled sections (AgentFlow asks its fixed model for the same four fields as a
structured reply; a JSON reply with those keys is read too).

With the user's own AgentFlow checkout (``AgentFlowWording``) every prompt is AgentFlow's own
f-string filled with the same values, under its system prompt, with the checkout's tool cards.
Its analysis prompt asks for free text: the planner then sees the reply as written (stripped),
as AgentFlow's planner does when its analysis model answers in text (its evaluation scripts'
DashScope models); a JSON reply with the four keys is read as the structured reply its OpenAI
models give.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
from collections.abc import Mapping
from typing import Any

from agentflow_env.tools.base import Tool
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.agentflow_format import (
    AGENTFLOW_SYSTEM,
    analysis_text,
    available_tools,
    memory_actions,
    memory_actions_text,
    tool_metadata,
    tool_metadata_text,
    toolbox_metadata,
    toolbox_metadata_text,
)
from agentflow_env.workflow.agentflow_source import AgentFlowWording
from agentflow_env.workflow.memory import Memory, QueryAnalysis

Message = dict[str, str]

ANALYSIS_TEMPLATE = """
Task: Analyze the query to work out which skills and tools answering it takes.

Inputs:
- Query: {query}
- Available tools: {tools}
- Metadata for tools: {metadata}

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

COMMAND_TEMPLATE = """
Task: Write the exact command that runs the selected tool for this step.

Context:
- **Query:** {query}
- **Sub-Goal:** {sub_goal}
- **Tool Name:** {tool_name}
- **Tool Metadata:** {metadata}
- **Relevant Data:** {context}

Instructions:
1. Read the tool's parameters from its metadata.
2. Write one call `tool.execute(...)` that achieves the sub-goal with the given data.
3. Assign the call to a variable named **`execution`**.
4. Give every value literally (exact numbers and strings), not as expressions.

Output Format:
Generated Command:
```python
execution = tool.execute(<parameter>=<value>)
```
"""

VERIFIER_TEMPLATE = """
Task: Judge whether the memory already answers the query completely and correctly, or whether \
more tool calls are needed.

Context:
- **Query:** {query}
- **Available Tools:** {tools}
- **Toolbox Metadata:** {metadata}
- **Initial Analysis:** {analysis}
- **Memory (Tools Used & Results):** {memory}

Instructions:
1.  Read the query, the initial analysis and the memory.
2.  Check that every part of the query is answered by a result in memory.
3.  Look for contradictions, and for facts that are unclear or still need checking.
4.  Consider whether a tool not used yet could supply what is missing.

Final Determination:
-   If the memory is enough, say why and conclude with "STOP".
-   If something is missing, say what and which tool could find it, and conclude with "CONTINUE".

IMPORTANT: End the response with either "Conclusion: STOP" or "Conclusion: CONTINUE".
"""

GENERALIST_TEMPLATE = """
Task: Write a concise final answer to the query from everything gathered.

Context:
- **Query:** {query}
- **Initial Analysis:** {analysis}
- **Actions Taken:** {memory}

Instructions:
1. Review the query and the results of every action.
2. Summarise, step by step, how the query was addressed.
3. Give a direct, precise answer to the query.

Output Structure:
1.  **Process Summary:** The steps taken, with the purpose and key result of each.
2.  **Answer:** The direct, concise answer to the query.
"""


def _messages(user: str, wording: AgentFlowWording | None = None) -> list[Message]:
    system = AGENTFLOW_SYSTEM if wording is None else wording.system_prompt
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def analysis_messages(
    question: str, tools: ToolSet, wording: AgentFlowWording | None = None
) -> list[Message]:
    """The query-analysis request."""
    if wording is not None:
        values = {
            "question": question,
            "self.available_tools": available_tools(tools),
            "self.toolbox_metadata": toolbox_metadata(tools, wording),
        }
        return _messages(wording.analysis.render(values), wording)
    return _messages(
        ANALYSIS_TEMPLATE.format(
            query=question,
            tools=available_tools(tools),
            metadata=toolbox_metadata_text(tools),
        ),
        wording,
    )


def command_messages(
    question: str,
    sub_goal: str,
    context: str,
    tool: Tool,
    wording: AgentFlowWording | None = None,
) -> list[Message]:
    """The executor's request for an ``execution = tool.execute(...)`` command."""
    if wording is not None:
        values = {
            "question": question,
            "sub_goal": sub_goal,
            "tool_name": tool.name,
            "tool_metadata": tool_metadata(tool, wording),
            "context": context,
        }
        return _messages(wording.command.render(values), wording)
    return _messages(
        COMMAND_TEMPLATE.format(
            query=question,
            sub_goal=sub_goal,
            tool_name=tool.name,
            metadata=tool_metadata_text(tool),
            context=context,
        )
    )


def verifier_messages(
    memory: Memory, tools: ToolSet, wording: AgentFlowWording | None = None
) -> list[Message]:
    """The verifier's request: does the memory answer the query (STOP) or not (CONTINUE)?"""
    if wording is not None:
        values = {
            "question": memory.query,
            "self.available_tools": available_tools(tools),
            "self.toolbox_metadata": toolbox_metadata(tools, wording),
            "query_analysis": analysis_text(memory.analysis),
            "memory.get_actions()": memory_actions(memory, wording),
        }
        return _messages(wording.verifier.render(values), wording)
    return _messages(
        VERIFIER_TEMPLATE.format(
            query=memory.query,
            tools=available_tools(tools),
            metadata=toolbox_metadata_text(tools),
            analysis=analysis_text(memory.analysis),
            memory=memory_actions_text(memory),
        )
    )


def generalist_messages(memory: Memory, wording: AgentFlowWording | None = None) -> list[Message]:
    """The request for the direct answer from the whole memory."""
    if wording is not None:
        values = {
            "question": memory.query,
            "self.query_analysis": _analysis_object_text(memory.analysis),
            "memory.get_actions()": memory_actions(memory, wording),
        }
        return _messages(wording.generalist.render(values), wording)
    return _messages(
        GENERALIST_TEMPLATE.format(
            query=memory.query,
            analysis=analysis_text(memory.analysis),
            memory=memory_actions_text(memory),
        )
    )


def _analysis_object_text(analysis: QueryAnalysis | None) -> str:
    """The analysis as AgentFlow's direct-answer prompt shows it: its analysis model's reply
    itself, which, unlike what its planner and verifier get, is not stripped: a text reply as
    written, a structured one as its four sections with a newline before and after."""
    text = analysis_text(analysis)
    raw = getattr(analysis, "raw", "")
    if isinstance(raw, str) and raw and raw.strip() == text:
        return raw
    return f"\n{text}\n" if text else text


# --- reading replies ---------------------------------------------------------------------------

ANALYSIS_SECTIONS = {
    "concise_summary": "Concise Summary",
    "required_skills": "Required Skills",
    "relevant_tools": "Relevant Tools",
    "additional_considerations": "Additional Considerations",
}
_SECTION = re.compile(
    r"^[\s#>*_\-\d.]*(Concise Summary|Required Skills|Relevant Tools|Additional Considerations)"
    r"[\s*_]*:[\s*_]*(.*)$",
    re.IGNORECASE | re.MULTILINE,
)


def read_analysis(text: str) -> dict[str, str]:
    """The four sections of an analysis reply (labelled text, or a JSON object with AgentFlow's
    keys); a missing section is empty."""
    structured = read_structured_analysis(text)
    if structured is not None:
        return structured
    found = {key: "" for key in ANALYSIS_SECTIONS}
    matches = list(_SECTION.finditer(text))
    by_label = {label.lower(): key for key, label in ANALYSIS_SECTIONS.items()}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = (match.group(2) + text[match.end() : end]).strip()
        found[by_label[match.group(1).lower()]] = body
    return found


def read_structured_analysis(text: str) -> dict[str, str] | None:
    """The four sections of a JSON reply with AgentFlow's keys (the structured reply its OpenAI
    models give); ``None`` for any other reply."""
    for candidate in _json_objects(text):
        if any(key in candidate for key in ANALYSIS_SECTIONS):
            return {key: str(candidate.get(key, "")).strip() for key in ANALYSIS_SECTIONS}
    return None


def analysis_as_text(sections: Mapping[str, str]) -> str:
    """The four sections as the AgentFlow planner reads its analysis."""
    return (
        f"Concise Summary: {sections['concise_summary']}\n\n"
        f"Required Skills:\n{sections['required_skills']}\n\n"
        f"Relevant Tools:\n{sections['relevant_tools']}\n\n"
        f"Additional Considerations:\n{sections['additional_considerations']}"
    )


_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


_NOT_LITERAL = (ValueError, TypeError, SyntaxError, RecursionError, MemoryError)


class CommandError(ValueError):
    """The executor's reply holds no readable ``execution = tool.execute(...)`` call."""


def read_command(text: str, tool: Tool) -> tuple[dict[str, Any], str]:
    """``(arguments, command)`` from a command reply, without executing anything.

    The last code block (or the whole reply) is parsed as Python; the last ``tool.execute(...)``
    call gives the arguments: keyword values must be literals, or names assigned a literal
    earlier in the block; a positional value goes to the tool's primary argument.
    """
    blocks = _CODE_BLOCK.findall(text) or [text]
    problems: list[str] = []
    for block in reversed(blocks):
        try:
            return _call_arguments(block.strip(), tool), block.strip()
        except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
            problems.append(str(error) or type(error).__name__)
    raise CommandError("; ".join(problems[:2]) or "no command")


def _call_arguments(code: str, tool: Tool) -> dict[str, Any]:
    tree = ast.parse(code)
    names: dict[str, Any] = {}
    call: ast.Call | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and not isinstance(node.value, ast.Call):
                with contextlib.suppress(*_NOT_LITERAL):
                    names[target.id] = ast.literal_eval(node.value)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "execute"
        ):
            call = node
    if call is None:
        raise ValueError("no tool.execute(...) call in the command")
    arguments: dict[str, Any] = {}
    for position, value in enumerate(call.args):
        if position > 0:
            raise ValueError("tool.execute takes one positional value at most")
        arguments[tool.card.primary_argument] = _literal(value, names)
    for keyword in call.keywords:
        if keyword.arg is None:
            raise ValueError("tool.execute(**...) cannot be read")
        arguments[keyword.arg] = _literal(keyword.value, names)
    return arguments


def _literal(node: ast.expr, names: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    try:
        return ast.literal_eval(node)
    except _NOT_LITERAL:
        raise ValueError(
            f"a value of tool.execute is not a literal: {ast.unparse(node)[:80]}"
        ) from None


def _json_objects(text: str) -> list[dict[str, Any]]:
    start = text.find("{")
    if start < 0:
        return []
    try:
        value = json.JSONDecoder(strict=False).raw_decode(text[start:])[0]
    except ValueError:
        return []
    return [value] if isinstance(value, dict) else []
