"""The planner's view in AgentFlow's own formats (``prompt_style="agentflow"``).

A planner trained with AgentFlow's code reads one user message under a plain system prompt, with
the query, its analysis, the tool names as a Python list, the toolbox metadata as a Python dict
and the previous steps as a Python dict ``{'Action Step n': {tool_name, sub_goal, command,
result}}``, then instructions, the response format and rules. What must match for a trained
planner to recognise its prompt, and is reproduced exactly here: the system prompt, the section
headers and their order, the field names and the renderings of the tool list, the metadata dict
(its keys, the ``"<type> - <description>"`` input types and the ``execution =
tool.execute(...)`` demo commands) and the memory dict (full results, no verifier output, no open
questions, no step counter). The sentences of the task, instructions and rules are this
project's own wording of the same requests; tool descriptions are the tools' own cards.

With the user's own AgentFlow checkout (``agentflow_source``, read by ``agentflow_source.py``)
AgentFlow's words replace this project's: the system prompt, the whole next-step prompt
(AgentFlow's f-string filled with the same values), the card of every tool the checkout has,
and the memory text of a step with no usable tool. The renderings stay the same.

AgentFlow has no finish action: where the planner may finish (``termination`` "planner" or
"both"), one rule of this project's wording (``FINISH_RULE``) is added after AgentFlow's rules,
and nothing else changes.
"""

from __future__ import annotations

import contextlib
import json
import operator
import re
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from agentflow_env.tools.agentflow.metadata import output_type as agentflow_output_type
from agentflow_env.tools.agentflow.metadata import require_llm_engine, user_metadata
from agentflow_env.tools.base import Tool
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.actions import FINISH_TOOL_NAME
from agentflow_env.workflow.agentflow_command import CommandRecord, Uncaptured
from agentflow_env.workflow.memory import Memory, MemoryEntry, QueryAnalysis, cached_text
from agentflow_env.workflow.own_pack import (
    AGENTFLOW_SYSTEM,
    NO_TOOL_COMMAND,
    NO_TOOL_RESULT,
    OWN_PACK,
)
from agentflow_env.workflow.prompt_pack import PromptPack

__all__ = [
    "AGENTFLOW_SYSTEM",
    "FINISH_RULE",
    "NO_TOOL_COMMAND",
    "NO_TOOL_RESULT",
    "agentflow_planner_messages",
    "analysis_text",
    "available_tools",
    "command_text",
    "memory_actions",
    "memory_actions_text",
    "memory_value",
    "recorded_command",
    "tool_metadata",
    "tool_metadata_text",
    "tool_value",
    "toolbox_metadata",
    "toolbox_metadata_text",
    "toolbox_value",
]

_PYTHON_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}
_DEMO_CALL = re.compile(r"^\s*[A-Za-z_][\w.]*\((.*)\)\s*$", re.DOTALL)

FINISH_RULE = (
    "- Once the previous steps answer the query, end the task instead of choosing a tool: reply "
    "with the Justification, then a **Final Answer:** section holding the answer, then "
    f"**Tool Name:** {FINISH_TOOL_NAME}, and add nothing after them.\n"
)
"""The rule that describes the finish action (this project's own; AgentFlow has none)."""


def agentflow_planner_messages(
    memory: Memory,
    tools: ToolSet,
    *,
    show_sub_questions: bool = False,
    finish: bool = False,
    wording: PromptPack | None = None,
    turn: int | None = None,
    max_turns: int | None = None,
) -> list[dict[str, str]]:
    """The planner's prompt as AgentFlow sends it: one user message under the plain system
    prompt. ``show_sub_questions`` adds the analysis's sub-questions (a hint AgentFlow never
    gives; off unless asked for); ``finish`` adds the rule describing the finish action.
    ``wording``: AgentFlow's own, read from a checkout (else this project's); ``turn`` and
    ``max_turns`` fill a step counter where its prompt has one (its text-only prompt has none).
    """
    pack = OWN_PACK if wording is None else wording
    step = len(memory) + 1 if turn is None else turn
    user = pack.planner.render(
        {
            "question": memory.query,
            "query_analysis": analysis_text(memory.analysis, show_sub_questions=show_sub_questions),
            "self.available_tools": available_tools(tools),
            "self.toolbox_metadata": toolbox_value(tools, pack),
            "memory.get_actions()": memory_value(memory, pack),
            "step_count": step,
            "max_step_count": max_turns,
            "max_step_count - step_count": None if max_turns is None else max_turns - step,
        }
    )
    if finish:
        if not user.endswith("\n"):  # AgentFlow's prompt ends in indentation: the rule goes
            user = user.rstrip(" \t")  # on the line after its last one
            user += "" if user.endswith("\n") else "\n"
        user += FINISH_RULE
    return [{"role": "system", "content": pack.system_prompt}, {"role": "user", "content": user}]


def available_tools(tools: ToolSet) -> list[str]:
    """The tool names, in order (rendered as a Python list)."""
    return list(tools.names)


def toolbox_value(tools: ToolSet, pack: PromptPack) -> Any:
    """What fills ``self.toolbox_metadata``: the metadata dict, or for the own pack its text
    (the same rendering, made once per tool set)."""
    return toolbox_metadata_text(tools) if pack is OWN_PACK else toolbox_metadata(tools, pack)


def tool_value(tool: Tool, pack: PromptPack) -> Any:
    """What fills ``tool_metadata`` (the executor's prompt), as ``toolbox_value``."""
    return tool_metadata_text(tool) if pack is OWN_PACK else tool_metadata(tool, pack)


def memory_value(memory: Memory, pack: PromptPack) -> Any:
    """What fills ``memory.get_actions()``, as ``toolbox_value`` (the own pack's text is made
    once per memory entry)."""
    return memory_actions_text(memory) if pack is OWN_PACK else memory_actions(memory, pack)


def toolbox_metadata(
    tools: ToolSet, wording: PromptPack | None = None
) -> dict[str, dict[str, Any]]:
    """Tool name -> its metadata dict, in order (rendered as a Python dict)."""
    return {tool.name: tool_metadata(tool, wording) for tool in tools}


def toolbox_metadata_text(tools: ToolSet) -> str:
    """``str(toolbox_metadata(tools))`` (this project's wording), made once per tool set and
    made again only when one of its tools has another card."""
    cards = tuple(tool.card for tool in tools)
    known = _known(_TOOLBOX_TEXTS, tools)
    same = known is not None and len(known[0]) == len(cards)
    if same and all(map(operator.is_, known[0], cards)):
        return str(known[1])
    text = str(toolbox_metadata(tools))
    _keep(_TOOLBOX_TEXTS, tools, (cards, text))
    return text


def tool_metadata_text(tool: Tool) -> str:
    """``str(tool_metadata(tool))`` (this project's wording), made once per tool and made
    again only when the tool has another card."""
    card = tool.card
    known = _known(_TOOL_TEXTS, tool)
    if known is not None and known[0] is card:
        return str(known[1])
    text = str(tool_metadata(tool))
    _keep(_TOOL_TEXTS, tool, (card, text))
    return text


def _known(texts: weakref.WeakKeyDictionary[Any, Any], owner: object) -> Any:
    try:
        return texts.get(owner)
    except TypeError:  # an unhashable tool (an eq dataclass, say): made every time
        return None


def _keep(texts: weakref.WeakKeyDictionary[Any, Any], owner: object, value: Any) -> None:
    with contextlib.suppress(TypeError):
        texts[owner] = value


_TOOLBOX_TEXTS: weakref.WeakKeyDictionary[ToolSet, Any] = weakref.WeakKeyDictionary()
_TOOL_TEXTS: weakref.WeakKeyDictionary[Tool, Any] = weakref.WeakKeyDictionary()
"""Per tool set and per tool: the card(s) a text was made from, and the text."""


def tool_metadata(tool: Tool, wording: PromptPack | None = None) -> dict[str, Any]:
    """One tool's metadata with AgentFlow's keys: the checkout's own for a tool it has (by
    name, verbatim), else from the tool's card."""
    found = None if wording is None else wording.card(tool.name)
    if found is not None:
        return dict(found)
    card = tool.card
    return {
        "tool_name": card.name,
        "tool_description": card.description,
        "tool_version": getattr(card, "version", "1.0.0"),
        "input_types": {
            name: f"{_PYTHON_TYPES.get(str(spec.get('type', 'string')), 'str')} - "
            f"{spec.get('description', '')}"
            for name, spec in card.input_schema.items()
        },
        "output_type": agentflow_output_type(tool),
        "demo_commands": [
            {
                "command": demo_command(demo.get("command", "")),
                "description": demo.get("description", ""),
            }
            for demo in card.demo_commands
        ],
        "user_metadata": user_metadata(tool),
        "require_llm_engine": require_llm_engine(tool),
    }


def demo_command(command: str) -> str:
    """A card's demo call ``Name(query="...")`` as ``execution = tool.execute(query="...")``."""
    match = _DEMO_CALL.match(command)
    if match is None:
        return command
    return f"execution = tool.execute({match.group(1)})"


def command_text(arguments: Mapping[str, Any]) -> str:
    """The executor's call as AgentFlow's memory shows it: ``execution = tool.execute(...)``."""
    rendered = ", ".join(f"{name}={_python_literal(value)}" for name, value in arguments.items())
    return f"execution = tool.execute({rendered})"


def _python_literal(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a double-quoted, escaped Python string
    return repr(value)


def memory_actions(memory: Memory, wording: PromptPack | None = None) -> dict[str, dict[str, Any]]:
    """``{'Action Step n': {'tool_name', 'sub_goal', 'command', 'result'}}`` with full results
    (a list of the call's outputs, as AgentFlow's executor returns them); a step with no usable
    tool in ``wording``'s words where given."""
    return {f"Action Step {entry.turn}": _action(entry, wording) for entry in memory}


def memory_actions_text(memory: Memory) -> str:
    """``str(memory_actions(memory))`` (this project's wording), each step's part made once per
    entry (``cached_text``): a dict's text is its items' texts, in order, joined."""
    items = [
        repr(f"Action Step {entry.turn}")
        + ": "
        + cached_text(entry, "agentflow_action", _action_text, entry)
        for entry in memory
    ]
    return "{" + ", ".join(items) + "}"


def _action_text(entry: MemoryEntry) -> str:
    return repr(_action(entry))


def _action(entry: MemoryEntry, wording: PromptPack | None = None) -> dict[str, Any]:
    if entry.selected_tool is None:
        named = entry.unmatched_tool
        pack = OWN_PACK if wording is None else wording
        no_command, no_result = pack.no_tool_texts  # the pack's script picks whose (for_script)
        return {
            "tool_name": None
            if named is None
            else pack.unmatched_tool.render({"tool_name": named}),
            "sub_goal": entry.sub_goal or None,
            "command": no_command,
            "result": no_result,
        }
    if entry.agentflow_command is not None:  # under AgentFlow's scripts: as written, every call
        return {
            "tool_name": entry.selected_tool,
            "sub_goal": entry.sub_goal,
            **recorded_command(entry.agentflow_command, wording),
        }
    result: Any = [entry.tool_result] if entry.tool_ok else [f"Error: {' | '.join(entry.errors)}"]
    if entry.tool_value is not None:  # the value AgentFlow's tool returns (a dict, say)
        result = [entry.tool_value]
    return {
        "tool_name": entry.selected_tool,
        "sub_goal": entry.sub_goal,
        "command": command_text(entry.tool_arguments),
        "result": result,
    }


def recorded_command(record: CommandRecord, wording: PromptPack | None = None) -> dict[str, Any]:
    """The ``command`` and ``result`` AgentFlow's memory holds for a step whose tool was
    matched, in ``wording``'s words: the command as written (or the pack's "no command"
    text), and the list of what each call gave (or the pack's failure text)."""
    pack = OWN_PACK if wording is None else wording
    no_command = pack.no_command if pack.no_command is not None else OWN_PACK.no_command
    failure = pack.command_failure or OWN_PACK.command_failure
    uncaptured = pack.no_execution or OWN_PACK.no_execution
    assert failure is not None and uncaptured is not None
    result: Any = [
        uncaptured.render({"block": output.piece}) if isinstance(output, Uncaptured) else output
        for output in record.outputs
    ]
    if record.failure is not None:
        result = failure.render({"str(e)": record.failure})
    return {"command": no_command if record.text is None else record.text, "result": result}


def analysis_text(analysis: QueryAnalysis | None, *, show_sub_questions: bool = False) -> str:
    """The query analysis in AgentFlow's four sections (its model's own text when it wrote one)."""
    if analysis is None:
        return ""
    key = ("agentflow_analysis", show_sub_questions)
    return cached_text(analysis, key, _analysis_text, analysis, show_sub_questions)


def _analysis_text(analysis: QueryAnalysis, show_sub_questions: bool) -> str:
    if analysis.text:
        text = analysis.text.strip()
    else:
        considerations = list(analysis.constraints) or ["None."]
        text = (
            f"Concise Summary: {analysis.objective}\n\n"
            f"Required Skills:\n{_bullets(analysis.skills) or '- Finding and combining facts.'}\n\n"
            f"Relevant Tools:\n{_bullets(analysis.tools)}\n\n"
            f"Additional Considerations:\n{_bullets(considerations)}"
        )
    if show_sub_questions and analysis.sub_questions:
        numbered = "\n".join(f"{i}. {q}" for i, q in enumerate(analysis.sub_questions, start=1))
        text += f"\n\nSub-questions:\n{numbered}"
    return text


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {item}" for item in items)
