"""The frozen modules' prompts in AgentFlow's formats (``prompt_style="agentflow"``), and the
readers of their replies.

As in ``agentflow_env.workflow.agentflow_format``: every call runs under AgentFlow's plain system
prompt and shows its inputs under AgentFlow's headers and renderings (the tool list, the metadata
dict, the ``Action Step`` memory dict); the task and instruction sentences are this project's
own. Two departures, both for safety: the executor's command ``execution = tool.execute(...)``
is read, never executed (its keyword arguments must be literals), and the query analysis is
asked for as four labelled sections (AgentFlow asks its fixed model for the same four fields as a
structured reply; a JSON reply with those keys is read too).

With the user's own AgentFlow checkout (``PromptPack``) every prompt is AgentFlow's own
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
    analysis_text,
    available_tools,
    memory_value,
    tool_value,
    toolbox_value,
)
from agentflow_env.workflow.memory import Memory, QueryAnalysis
from agentflow_env.workflow.own_pack import OWN_PACK
from agentflow_env.workflow.prompt_pack import PromptPack

Message = dict[str, str]


def _messages(user: str, pack: PromptPack) -> list[Message]:
    return [{"role": "system", "content": pack.system_prompt}, {"role": "user", "content": user}]


def analysis_messages(
    question: str, tools: ToolSet, wording: PromptPack | None = None
) -> list[Message]:
    """The query-analysis request; ``wording``: the prompt pack (``None``: this project's)."""
    pack = OWN_PACK if wording is None else wording
    values = {
        "question": question,
        "self.available_tools": available_tools(tools),
        "self.toolbox_metadata": toolbox_value(tools, pack),
    }
    return _messages(pack.analysis.render(values), pack)


def command_messages(
    question: str,
    sub_goal: str,
    context: str,
    tool: Tool,
    wording: PromptPack | None = None,
) -> list[Message]:
    """The executor's request for an ``execution = tool.execute(...)`` command."""
    pack = OWN_PACK if wording is None else wording
    values = {
        "question": question,
        "sub_goal": sub_goal,
        "tool_name": tool.name,
        "tool_metadata": tool_value(tool, pack),
        "context": context,
    }
    return _messages(pack.command.render(values), pack)


def verifier_messages(
    memory: Memory, tools: ToolSet, wording: PromptPack | None = None
) -> list[Message]:
    """The verifier's request: does the memory answer the query (STOP) or not (CONTINUE)?"""
    pack = OWN_PACK if wording is None else wording
    values = {
        "question": memory.query,
        "self.available_tools": available_tools(tools),
        "self.toolbox_metadata": toolbox_value(tools, pack),
        "query_analysis": analysis_text(memory.analysis),
        "memory.get_actions()": memory_value(memory, pack),
    }
    return _messages(pack.verifier.render(values), pack)


def generalist_messages(memory: Memory, wording: PromptPack | None = None) -> list[Message]:
    """The request for the direct answer from the whole memory (AgentFlow's prompt shows the
    analysis as its model wrote it, ``self.query_analysis``; the own one as the planner sees
    it, ``query_analysis``)."""
    pack = OWN_PACK if wording is None else wording
    values = {
        "question": memory.query,
        "self.query_analysis": _analysis_object_text(memory.analysis),
        "query_analysis": analysis_text(memory.analysis),
        "memory.get_actions()": memory_value(memory, pack),
    }
    return _messages(pack.generalist.render(values), pack)


def _analysis_object_text(analysis: QueryAnalysis | None) -> str:
    """The analysis as AgentFlow's direct-answer prompt shows it: its analysis model's reply
    itself, which, unlike what its planner and verifier get, is not stripped: a text reply as
    written, a structured one as its four sections with a newline before and after (as
    AgentFlow's analysis class shows it, where the reply was read with that class's fields)."""
    shown = getattr(analysis, "shown", "")
    if isinstance(shown, str) and shown:
        return shown
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
