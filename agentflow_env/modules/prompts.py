"""Prompts of the LLM-backed frozen modules and tolerant readers of their replies.

The prompts follow AgentFlow's roles (query analysis, command generation, context verification,
final output) with two changes: the executor writes a JSON object of tool arguments instead of
Python to be executed, and the generalist ends with a short ``Answer:`` line so exact-match rewards
can score it. Every reader accepts markdown decoration and surrounding prose and scans line by line
or with bounded patterns. The judge's prompt is in ``agentflow_env.llm.prompts``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from typing import Any

from agentflow_env.llm.prompts import Message, chat_messages
from agentflow_env.tools.base import Tool, ToolCard
from agentflow_env.tools.registry import ToolSet, canonical_tool_name
from agentflow_env.workflow.actions import PlannerAction
from agentflow_env.workflow.memory import Memory, QueryAnalysis, cached_text
from agentflow_env.workflow.prompts import analysis_render, cards_text

# Each system prompt names its role in its first sentence; scripted test servers key on it.
INITIALIZER_SYSTEM = (
    "You are the query analyzer of a tool-using agent. You read a query and the available tools "
    "and lay out what answering it takes. You never answer the query yourself."
)
EXECUTOR_SYSTEM = (
    "You are the command generator of a tool-using agent. You turn the planner's chosen step "
    "into the arguments of one tool call, written as a single JSON object. You never write code."
)
VERIFIER_SYSTEM = (
    "You are the context verifier of a tool-using agent. You judge whether the memory of tool "
    "results already holds everything needed to answer the query, and you end with a conclusion."
)
GENERALIST_SYSTEM = (
    "You are the final answer writer of a tool-using agent. You answer the query using only the "
    "memory of tool results, and you end with a short answer line."
)

INITIALIZER_USER = """Task: Analyze the query and determine what is needed to answer it with the \
available tools.

Query: {question}

Available tools:
{tool_cards}

Instructions:
1. State the main objective of the query in one sentence.
2. List constraints the answer must respect (format, units, entities it must be about), if any.
3. Break the query into the sub-questions that must be answered in order; do not answer them.
4. Name the tools that are relevant.

Reply in exactly this format:
Objective: <one sentence>
Constraints:
- <constraint, or "none">
Sub-questions:
1. <first sub-question>
2. <next sub-question>
Relevant tools: <comma-separated tool names>"""

EXECUTOR_USER = """Task: Generate the arguments for one call of the selected tool.

Query: {question}
Sub-Goal: {sub_goal}
Context from the planner: {context}
Selected tool:
{tool_card}

Argument schema (JSON): {schema}

Instructions:
1. Use the planner's Context and Sub-Goal; do not invent facts that are not in them.
2. Give every required argument; leave out optional ones unless they help.
3. Reply with one JSON object mapping argument names to values, e.g. {example}
   No code, no function call syntax."""

VERIFIER_USER = """Task: Thoroughly evaluate whether the memory is complete and accurate enough \
to answer the query, or whether more tool calls are needed.

Query: {question}

{analysis}

Available tools: {tool_names}

Memory (the tool calls so far and their results):
{memory}

Instructions:
1. Check each sub-question of the query against the memory: is its answer stated in a result?
2. Ignore claims that no tool result supports; a failed or empty call answers nothing.
3. List the questions that are still open.

Reply in this format:
Analysis: <your reasoning>
Open questions:
- <question still open, or "none">
Conclusion: STOP (the memory answers the query) or CONTINUE (more tool calls are needed)"""

GENERALIST_USER = """Task: Write the final answer to the query from the memory of tool results.

Query: {question}

{analysis}

Memory (the tool calls and their results):
{memory}

Instructions:
1. Use only facts stated in the tool results; do not guess.
2. Explain briefly how the results lead to the answer.
3. End with one line "Answer: <short answer>" holding only the answer (a name, a number, a year \
or a short phrase), or "Answer: unknown" if the memory does not contain it."""


# --- building messages -------------------------------------------------------------------------


def initializer_messages(question: str, tools: ToolSet) -> list[Message]:
    user = INITIALIZER_USER.format(question=question, tool_cards=cards_text(tools))
    return chat_messages(INITIALIZER_SYSTEM, user)


def executor_messages(action: PlannerAction, tool: Tool, question: str) -> list[Message]:
    card = tool.card
    user = EXECUTOR_USER.format(
        question=question,
        sub_goal=action.sub_goal or "(none)",
        context=action.context or "(none)",
        tool_card=cached_text(card, "card", card.render),
        schema=cached_text(card, "schema_json", _schema_json, card),
        example=cached_text(card, "example_json", _example_json, card),
    )
    return chat_messages(EXECUTOR_SYSTEM, user)


def _schema_json(card: ToolCard) -> str:
    schema = {name: dict(spec) for name, spec in card.input_schema.items()}
    return json.dumps(schema, ensure_ascii=False)


def _example_json(card: ToolCard) -> str:
    return json.dumps({card.primary_argument: "..."})


def verifier_messages(memory: Memory, tool_names: Sequence[str]) -> list[Message]:
    user = VERIFIER_USER.format(
        question=memory.query,
        analysis=_analysis_text(memory),
        tool_names=", ".join(tool_names) or "(none)",
        memory=memory_text(memory),
    )
    return chat_messages(VERIFIER_SYSTEM, user)


def generalist_messages(memory: Memory) -> list[Message]:
    user = GENERALIST_USER.format(
        question=memory.query, analysis=_analysis_text(memory), memory=memory_text(memory)
    )
    return chat_messages(GENERALIST_SYSTEM, user)


def memory_text(memory: Memory) -> str:
    """Every step with its full result: the verifier and generalist need all the evidence."""
    return memory.render(keep_full=max(len(memory), 1))


def _analysis_text(memory: Memory) -> str:
    return f"Query analysis:\n{analysis_render(memory.analysis)}" if memory.analysis else ""


# --- reading replies ---------------------------------------------------------------------------

_HEADER = re.compile(
    r"^[\s#>*_\-]*(?P<key>[A-Za-z][A-Za-z \-]{1,30}?)[\s*_]*[:\uff1a](?P<rest>.*)$"
)
_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d{1,2}[.)]|\(\d{1,2}\))\s+(?P<item>.+)$")
_SECTIONS = {
    "objective": "objective",
    "mainobjective": "objective",
    "summary": "objective",
    "constraints": "constraints",
    "constraint": "constraints",
    "subquestions": "sub_questions",
    "subquestion": "sub_questions",
    "subgoals": "sub_questions",
    "steps": "sub_questions",
    "relevanttools": "tools",
    "tools": "tools",
    "tool": "tools",
    "openquestions": "open_questions",
    "openquestion": "open_questions",
    "remainingquestions": "open_questions",
    "analysis": "analysis",
    "conclusion": "conclusion",
}
_NOT_A_TO_Z = re.compile(r"[^a-z]")
_NONE_WORDS = {"none", "n/a", "na", "nothing", "-", "no", "none.", "(none)"}
_MAX_ITEMS = 8


@functools.lru_cache(maxsize=256)  # headers are at most 31 characters, and a few recur
def _section_key(header: str) -> str | None:
    """The section a header's words name ("Open Questions" -> "open_questions"), if known."""
    return _SECTIONS.get(_NOT_A_TO_Z.sub("", header.lower()))


def read_sections(text: str) -> dict[str, list[str]]:
    """Known ``Header: value`` sections and the list items or lines under them."""
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        # A header needs a colon: most item and prose lines skip the (backtracking) pattern.
        header = _HEADER.match(line) if ":" in line or "\uff1a" in line else None
        key = _section_key(header.group("key")) if header else None
        if header is not None and key is not None:
            current = key
            sections[current] = []
            rest = header.group("rest").strip().strip("*_ ")
            if rest:
                sections[current].append(rest)
            continue
        if current is None or not line.strip():
            continue
        item = _ITEM.match(line)
        sections[current].append((item.group("item") if item else line).strip().strip("*_ "))
    return sections


def _items(values: Sequence[str]) -> tuple[str, ...]:
    items = []
    for value in values:
        value = value.strip()
        if not value or value.lower().rstrip(".") in _NONE_WORDS:
            continue
        items.append(value)
    return tuple(items[:_MAX_ITEMS])


def parse_query_analysis(
    text: str, question: str, tool_names: Sequence[str]
) -> tuple[QueryAnalysis, str | None]:
    """The analysis in ``text`` and a note on what was missing; the bare query if nothing parses."""
    sections = read_sections(text)
    fallback_objective = f"Answer the question: {question}"
    if not any(key in sections for key in ("objective", "constraints", "sub_questions", "tools")):
        note = "no analysis sections found; using the bare query"
        return QueryAnalysis(objective=fallback_objective, tools=tuple(tool_names)), note
    objective = " ".join(sections.get("objective", [])).strip()
    tools = _known_tools(sections.get("tools", []), tool_names)
    missing = [k for k in ("objective", "sub_questions", "tools") if not sections.get(k)]
    analysis = QueryAnalysis(
        objective=objective or fallback_objective,
        constraints=_items(sections.get("constraints", [])),
        sub_questions=_items(sections.get("sub_questions", [])),
        tools=tools or tuple(tool_names),
    )
    return analysis, (f"missing sections {missing}; defaults used" if missing else None)


def _known_tools(values: Sequence[str], tool_names: Sequence[str]) -> tuple[str, ...]:
    by_key = {canonical_tool_name(name): name for name in tool_names}
    found: list[str] = []
    for value in values:
        for word in re.split(r"[,;/]|\band\b", value):
            name = by_key.get(canonical_tool_name(word.strip(" `*_\"'.():")))
            if name is not None and name not in found:
                found.append(name)
    return tuple(found)


def parse_open_questions(text: str) -> tuple[str, ...] | None:
    """The verifier's open questions, ``()`` for "none", ``None`` when it listed none at all."""
    values = read_sections(text).get("open_questions")
    return None if values is None else _items(values)


_FENCE = re.compile(r"```[A-Za-z]*[ \t]*\n(.*?)```", re.DOTALL)
_JSON_DECODER = json.JSONDecoder(strict=False)
_OBJECTS_TRIED = 32
_WRAPPER_KEYS = ("arguments", "args", "parameters", "params", "input", "tool_input")


def parse_json_objects(text: str) -> list[dict[str, Any]]:
    """JSON objects in ``text``, most likely first: fenced ones, then the rest, last to first.

    An object wrapping the arguments (``{"tool": ..., "arguments": {...}}``) also yields the
    inner object, right before itself.
    """
    spans = [(m.start(1), m.group(1)) for m in _FENCE.finditer(text)]
    found: list[dict[str, Any]] = []
    for _, body in reversed(spans):
        found.extend(_objects_in(body))
    found.extend(_objects_in(text))
    unique: list[dict[str, Any]] = []
    for obj in found:
        for candidate in (*_unwrapped(obj), obj):
            if candidate not in unique:
                unique.append(candidate)
    return unique


def _objects_in(text: str) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    starts: list[int] = []  # the last _OBJECTS_TRIED "{", found from the end
    at = text.rfind("{")
    while at >= 0 and len(starts) < _OBJECTS_TRIED:
        starts.append(at)
        at = text.rfind("{", 0, at)
    starts.reverse()
    for start in reversed(starts):
        try:
            obj, _ = _JSON_DECODER.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            objects.append(obj)
    return objects


def _unwrapped(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [obj[key] for key in _WRAPPER_KEYS if isinstance(obj.get(key), dict)]


_ANSWER_LINE = re.compile(
    r"^[\s#>*_\-\d.)]*(?:final[ _]answer|short[ _]answer|answer)[\s*_]*[:\uff1a](?P<value>.*)$",
    re.IGNORECASE,
)
_BOXED = re.compile(r"\\boxed\{([^{}]{1,200})\}")
_UNKNOWN = re.compile(
    r"^(unknown|none|n/?a|not (?:known|found|available|stated)|cannot (?:be )?(?:answer|determine)"
    r"|i (?:cannot|can't|don't know)|insufficient|no answer)",
    re.IGNORECASE,
)


def extract_short_answer(text: str) -> tuple[str | None, str | None]:
    """``(answer, note)``: the last ``Answer:`` line, else ``\\boxed{}``, else the last line.

    "unknown" and similar give ``None``. The note says which fallback was used, if any.
    """
    lines = text.splitlines()
    for line in reversed(lines):
        match = _ANSWER_LINE.match(line)
        if match is not None and match.group("value").strip(" *_"):
            return _clean_answer(match.group("value")), None
    boxed = _BOXED.findall(text)
    if boxed:
        return _clean_answer(boxed[-1]), "no 'Answer:' line; used the last \\boxed{} value"
    last = next((line for line in reversed(lines) if line.strip()), "")
    if not last:
        return None, "empty reply"
    return _clean_answer(last), "no 'Answer:' line; used the last line"


def _clean_answer(value: str) -> str | None:
    value = value.strip().strip("*_`\"' ").rstrip(".").strip()
    if not value or _UNKNOWN.match(value):
        return None
    return value
