"""Parsers for the planner's action text and the verifier's verdict.

The planner writes AgentFlow's four-field block::

    Justification: <why this tool now>
    Context: <all information the tool needs>
    Sub-Goal: <what this step should achieve>
    Tool Name: <one of the available tools>

With ``termination="planner"`` or ``"both"`` the planner may instead end the episode with the
finish action: ``Tool Name: Finish`` (a name no tool may take) and its answer in a ``Final
Answer:`` field, read only when ``parse_planner_action(text, finish=True)``. Without ``finish``
that key is not a field (a ``Final Answer:`` line belongs to the field above it, as it always
has) and ``Finish`` is just a tool name the session does not know.

LLM output is messy, so the parser accepts markdown decoration, key spelling variants, any key
order, multi-line values, code fences, surrounding prose and the same keys as a JSON object.
All scanning is line by line or with bounded regular expressions, so parsing is linear in the
length of the text (no catastrophic backtracking on adversarial input).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from agentflow_env.tools.registry import canonical_tool_name

__all__ = [
    "FINISH_TOOL_NAME",
    "ActionParseError",
    "PlannerAction",
    "Verdict",
    "format_finish_action",
    "format_planner_action",
    "is_finish",
    "parse_planner_action",
    "parse_verdict",
]

FINISH_TOOL_NAME = "Finish"
"""The tool name of the finish action; a tool of that name (in any spelling ``ToolSet`` accepts)
cannot be used where the planner may finish."""

FIELDS = ("justification", "context", "sub_goal", "tool_name")
_DISPLAY_NAMES = {
    "justification": "Justification",
    "context": "Context",
    "sub_goal": "Sub-Goal",
    "tool_name": "Tool Name",
}
# Keys are compared after lowercasing and dropping everything but letters.
_KEY_ALIASES = {
    "justification": "justification",
    "context": "context",
    "subgoal": "sub_goal",
    "toolname": "tool_name",
}
_FINISH_KEY = "finalanswer"  # the finish action's answer field, a key only with finish=True
_EXPECTED_FORMAT = (
    "Justification: <why this tool now>\n"
    "Context: <all information the tool needs>\n"
    "Sub-Goal: <what this step should achieve>\n"
    "Tool Name: <one of the available tools>"
)
_EXPECTED_FINISH_FORMAT = (
    "or, to end the episode with your answer:\n"
    "Justification: <why the evidence is enough>\n"
    "Final Answer: <the answer>\n"
    f"Tool Name: {FINISH_TOOL_NAME}"
)


class ActionParseError(ValueError):
    """The planner output holds no usable action. The message is shown to the planner."""


@dataclass(frozen=True)
class PlannerAction:
    """One planner turn: which tool to call next and what it needs."""

    justification: str
    context: str
    sub_goal: str
    tool_name: str
    final_answer: str | None = None
    """The ``Final Answer:`` field (read only when parsing with ``finish=True``), else None."""


@dataclass(frozen=True)
class Verdict:
    """The verifier's decision: ``stop`` ends the episode; ``rationale`` is the text before it."""

    stop: bool
    rationale: str


def format_planner_action(justification: str, context: str, sub_goal: str, tool_name: str) -> str:
    """The canonical text form of an action; ``parse_planner_action`` reads it back."""
    return (
        f"Justification: {justification}\n"
        f"Context: {context}\n"
        f"Sub-Goal: {sub_goal}\n"
        f"Tool Name: {tool_name}"
    )


def format_finish_action(
    answer: str, justification: str = "The evidence answers the query."
) -> str:
    """The canonical text form of the finish action (``parse_planner_action(finish=True)``)."""
    return f"Justification: {justification}\nFinal Answer: {answer}\nTool Name: {FINISH_TOOL_NAME}"


def is_finish(action: PlannerAction) -> bool:
    """Whether ``action`` names the finish action (any spelling ``ToolSet`` would accept)."""
    return canonical_tool_name(action.tool_name) == _FINISH_CANONICAL


_FINISH_CANONICAL = canonical_tool_name(FINISH_TOOL_NAME)


# --- text form -----------------------------------------------------------------------------

# "Key: value" at the start of a line, with optional markdown/quote decoration around the key.
# The key is at most 25 characters, so the only backtracking is bounded.
_KEY_LINE = re.compile(
    r"(?P<lead>[ \t#>*_\-\"'`\d.)]*)"
    r"(?P<key>[A-Za-z][A-Za-z _\-]{0,24}?)"
    r"(?P<trail>[\"'`*_ \t]*)"
    r"[:\uff1a]"
    r"(?P<value>.*)",
    re.DOTALL,
)
# A header line holding only a key ("### Context", "**Tool Name**"); the value follows below.
_HEADER_LINE = re.compile(
    r"(?P<lead>[ \t#>*_\-]*)(?P<key>[A-Za-z][A-Za-z _\-]{0,24}?)(?P<trail>[*_ \t]*)",
)
_LETTERS_ONLY = re.compile(r"[^a-z]+")
_LINE_BREAKS = "\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@functools.lru_cache(maxsize=1024)
def _field_for(key: str, finish: bool = False) -> str | None:
    letters = _LETTERS_ONLY.sub("", key.lower())
    if finish and letters == _FINISH_KEY:
        return "final_answer"
    return _KEY_ALIASES.get(letters)


def _match_key_line(line: str, finish: bool = False) -> tuple[str, str] | None:
    """Return ``(field, first value fragment)`` if ``line`` starts a field."""
    m = _KEY_LINE.match(line)
    if m is not None:
        field = _field_for(m.group("key"), finish)
        if field is not None:
            lead, trail, value = m.group("lead", "trail", "value")
            if lead.strip(" \t"):
                value = _strip_decoration(lead, trail, value)
            return field, value
    if line.lstrip(" \t")[:1] in ("#", "*", "_"):
        m = _HEADER_LINE.fullmatch(line.rstrip(_LINE_BREAKS))
        if m is not None:
            field = _field_for(m.group("key"), finish)
            if field is not None:
                return field, ""
    return None


def _strip_decoration(lead: str, trail: str, value: str) -> str:
    """Drop bold/italic markers around the key ("**Context:** x", "**Context: x**") and the
    quotes of a ``"key": "value",`` line (broken JSON that the decoder rejected)."""
    body = value.rstrip(_LINE_BREAKS)
    line_break = value[len(body) :]
    marker = lead.strip(" \t#>-\"'`0123456789.)")
    if marker and not any(c in trail for c in "*_"):
        stripped = body.lstrip(" \t")
        if stripped.startswith(marker):
            body = stripped[len(marker) :]
        elif body.rstrip().endswith(marker):
            body = body.rstrip()[: -len(marker)]
    if any(q in lead for q in "\"'`"):
        body = _unquote_json_like(body)
    return body + line_break


def _unquote_json_like(value: str) -> str:
    """A ``"key": "value",`` line (broken JSON the decoder rejected): take the string value."""
    value = value.strip()
    if value.endswith(","):
        value = value[:-1].rstrip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        try:
            decoded = json.loads(value) if value[0] == '"' else value[1:-1]
        except ValueError:
            decoded = value[1:-1]
        return decoded if isinstance(decoded, str) else value[1:-1]
    return value


@dataclass
class _Block:
    start: int
    parts: dict[str, list[str]]

    def complete(self) -> bool:
        return "tool_name" in self.parts


def _text_blocks(
    text: str, skip_spans: list[tuple[int, int]], finish: bool = False
) -> list[_Block]:
    """Split line-form output into blocks; a repeated key after a Tool Name starts a new block.

    Inside a block that has no Tool Name yet, a repeated key replaces the earlier value. Lines
    that start inside ``skip_spans`` (sorted JSON actions, parsed separately) are ignored.
    """
    blocks: list[_Block] = []
    current: _Block | None = None
    field: str | None = None  # the field whose value is being collected
    field_in_fence = False
    in_fence = False
    offset = 0
    span_index = 0
    for line in text.splitlines(keepends=True):
        line_start = offset
        offset += len(line)
        while span_index < len(skip_spans) and skip_spans[span_index][1] <= line_start:
            span_index += 1
        if span_index < len(skip_spans) and skip_spans[span_index][0] <= line_start:
            field = None
            continue
        if line.lstrip(" \t").startswith(("```", "~~~")):
            if field is not None and current is not None and not (field_in_fence and in_fence):
                current.parts[field].append(line)  # a code block inside the value
            else:
                field = None  # the fence that wrapped the block closes it
            in_fence = not in_fence
            continue
        matched = _match_key_line(line, finish)
        if matched is None:
            if field is not None and current is not None:
                current.parts[field].append(line)
            continue
        field, first = matched
        field_in_fence = in_fence
        if current is None or (field in current.parts and current.complete()):
            current = _Block(start=line_start, parts={})
            blocks.append(current)
        current.parts[field] = [first]
    return blocks


def _block_values(block: _Block) -> dict[str, str]:
    return {name: "".join(lines).strip() for name, lines in block.parts.items()}


# Fallback for all keys on one line: "Context: x Sub-Goal: y Tool Name: z".
_INLINE_KEY = re.compile(
    r"(?<![A-Za-z])(justification|context|sub[ _\-]?goal|tool[ _\-]?name)[*_ \t]{0,4}[:\uff1a]",
    re.IGNORECASE,
)
_INLINE_KEY_FINISH = re.compile(
    r"(?<![A-Za-z])(justification|context|sub[ _\-]?goal|tool[ _\-]?name|final[ _\-]?answer)"
    r"[*_ \t]{0,4}[:\uff1a]",
    re.IGNORECASE,
)


def _inline_block(text: str, finish: bool = False) -> dict[str, str] | None:
    """The last value of each key found anywhere in the text (looking at the last 64 keys)."""
    pattern = _INLINE_KEY_FINISH if finish else _INLINE_KEY
    matches = list(pattern.finditer(text))[-64:]
    values: dict[str, str] = {}
    end = len(text)
    for m in reversed(matches):
        field = _field_for(m.group(1), finish)
        if field is not None and field not in values:
            values[field] = text[m.end() : end].strip(" \t\r\n*_")
        end = m.start()
    return values if "tool_name" in values else None


# --- JSON form -----------------------------------------------------------------------------

_JSON_TOOL_KEY = re.compile(r"[\"']\s{0,4}tool[ _\-]?name\s{0,4}[\"']\s{0,4}:", re.IGNORECASE)
_JSON_OBJECT_START = re.compile(r"\{\s{0,64}\"")
_JSON_DECODER = json.JSONDecoder(strict=False)
# Only the last few JSON tool keys matter (the last block wins); bounding the attempts keeps
# parsing linear however many braces or keys the text holds.
_JSON_KEYS_TRIED = 8
_JSON_OPENERS_TRIED = 6


def _find_action_dict(obj: object, depth: int = 0, finish: bool = False) -> dict[str, str] | None:
    """The last dict (depth first) with a tool-name key, its keys mapped to field names."""
    if depth > 8:
        return None
    if isinstance(obj, dict):
        values: dict[str, str] = {}
        for key, value in obj.items():
            field = _field_for(str(key), finish)
            if field is not None and value is not None and not isinstance(value, (dict, list)):
                values[field] = str(value).strip()
        if "tool_name" in values:
            return values
        children = list(obj.values())
    elif isinstance(obj, list):
        children = list(obj)
    else:
        return None
    found = None
    for child in children:
        found = _find_action_dict(child, depth + 1, finish) or found
    return found


def _last_json_action(text: str, finish: bool = False) -> tuple[int, int, dict[str, str]] | None:
    """``(start, end, fields)`` of the last JSON object holding a tool-name key, if any."""
    key_positions = [m.start() for m in _JSON_TOOL_KEY.finditer(text)][-_JSON_KEYS_TRIED:]
    for key_pos in reversed(key_positions):
        opener = key_pos
        for _ in range(_JSON_OPENERS_TRIED):
            opener = text.rfind("{", 0, opener)
            if opener < 0:
                break
            if not _JSON_OBJECT_START.match(text, opener):
                continue
            try:
                obj, end = _JSON_DECODER.raw_decode(text, opener)
            except (ValueError, RecursionError):
                continue
            if end <= key_pos:
                continue
            values = _find_action_dict(obj, finish=finish)
            if values is not None:
                return opener, end, values
    return None


# --- public parser -------------------------------------------------------------------------


def parse_planner_action(text: str, *, finish: bool = False) -> PlannerAction:
    """Read the planner's action; the last complete block (one with a Tool Name) wins.

    ``finish``: the planner may finish (``termination`` "planner" or "both"), so ``Final
    Answer`` is a field (``PlannerAction.final_answer``) and the error messages show the finish
    action too. Without it the parse is exactly that of a workflow with no finish action.
    Raises ``ActionParseError`` with a message meant for the planner when there is none.
    """
    expected = _EXPECTED_FORMAT + ("\n" + _EXPECTED_FINISH_FORMAT if finish else "")
    if not text or not text.strip():
        raise ActionParseError(
            "The planner output is empty. Reply with exactly these four fields:\n" + expected
        )
    candidates: list[tuple[int, dict[str, str]]] = []
    action_spans: list[tuple[int, int]] = []
    json_action = _last_json_action(text, finish)
    if json_action is not None:
        start, end, json_values = json_action
        candidates.append((start, json_values))
        action_spans.append((start, end))

    blocks = _text_blocks(text, action_spans, finish)
    last_complete = next((b for b in reversed(blocks) if b.complete()), None)
    if last_complete is not None:
        candidates.append((last_complete.start, _block_values(last_complete)))

    if not candidates:
        inline = _inline_block(text, finish)
        if inline is not None:
            candidates.append((0, inline))
    if not candidates:
        seen = {name for block in blocks for name in block.parts}
        found = ", ".join(_DISPLAY_NAMES[f] for f in FIELDS if f in seen)
        detail = f" (found {found}, but no Tool Name)" if found else ""
        raise ActionParseError(
            f"Could not find a 'Tool Name:' line in the planner output{detail}. "
            "Reply with exactly these four fields:\n" + expected
        )
    values = max(candidates, key=lambda item: item[0])[1]
    tool_name = _clean_tool_name(values.get("tool_name", ""))
    if not tool_name:
        raise ActionParseError(
            "The 'Tool Name:' field is empty. Name one of the available tools, in this format:\n"
            + expected
        )
    return PlannerAction(
        justification=values.get("justification", ""),
        context=values.get("context", ""),
        sub_goal=values.get("sub_goal", ""),
        tool_name=tool_name,
        final_answer=values.get("final_answer"),
    )


_TOOL_EDGE_CHARS = " \t\"'`*_<>[]()\u201c\u201d\u2018\u2019"
_TOOL_TRAILING_PUNCTUATION = ".,;:!?"


def _clean_tool_name(raw: str) -> str:
    """First non-empty line, without quotes, backticks, bold or trailing punctuation."""
    for line in raw.splitlines():
        name = line.strip()
        previous = None
        while name != previous:
            previous = name
            name = name.strip(_TOOL_EDGE_CHARS).rstrip(_TOOL_TRAILING_PUNCTUATION)
        if name:
            return name
    return ""


# --- verifier verdict ----------------------------------------------------------------------

_CONCLUSION = re.compile(
    r"conclusion[\"'`*_ \t]{0,8}[:\uff1a][\"'`*_\s]{0,12}(stop|continue)(?![A-Za-z])",
    re.IGNORECASE,
)


def parse_verdict(text: str) -> Verdict | None:
    """The verifier's last ``Conclusion: STOP|CONTINUE``, or ``None`` if it gave none."""
    last = None
    for match in _CONCLUSION.finditer(text or ""):
        last = match
    if last is None:
        return None
    rationale = text[: last.start()].rstrip(" \t\r\n*_#>-\"'`")
    return Verdict(stop=last.group(1).lower() == "stop", rationale=rationale.strip())
