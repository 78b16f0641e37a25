"""The executor's command read and split as AgentFlow's executor does (under its scripts).

AgentFlow records the command as its executor model wrote it and runs every ``execution =
tool.execute(...)`` line of it, each with the code before it, in order; the step's result is the
list of what each gave. This module reimplements that reading from AgentFlow's behaviour, and
never executes anything: each piece is parsed with ``ast``, and only literal assignments and
``tool.execute`` calls whose arguments are literals (or names assigned literals earlier in the
same piece) are accepted. The turn (``turn.py``) runs the calls; ``agentflow_format`` renders the
record in the prompt pack's words.

How the command is found in the reply: a reply that is, as a whole, a JSON object with string
``analysis``, ``explanation`` and ``command`` gives its ``command``; else the first ```` ```python
```` block after a ``Generated Command:`` label (any case); else the longest ```` ```python ````
block; else there is no command (AgentFlow then records its "no command" text and runs nothing).
A leading ```` ```python ```` and trailing backticks are dropped.
"""

from __future__ import annotations

import ast
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Call",
    "CommandRecord",
    "Piece",
    "Uncaptured",
    "command_pieces",
    "read_agentflow_command",
    "read_command_reply",
    "read_piece",
]

_LABEL = "generated command:"
_OPENER = "```python"
_FENCE = "```"
_TARGET = "execution"
_CALL = "tool.execute("
_NOT_LITERAL = (ValueError, TypeError, SyntaxError, RecursionError, MemoryError)


# -- finding the command -------------------------------------------------------------------------
def read_agentflow_command(text: str) -> str | None:
    """The command AgentFlow's executor takes from ``text`` (``None``: it finds none)."""
    command = _json_command(text)
    if command is None:
        command = _labelled_block(text)
    if command is None:
        blocks = _python_blocks(text)
        command = max(blocks, key=lambda block: len(block.strip())) if blocks else None
    if command is None:
        return None
    command = command.strip()
    if command.startswith(_OPENER):
        command = command[len(_OPENER) :].lstrip()
    return command.rstrip("`").strip()


def _json_command(text: str) -> str | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    parts = [value.get(key) for key in ("analysis", "explanation", "command")]
    return parts[2] if all(isinstance(part, str) for part in parts) else None


def _labelled_block(text: str) -> str | None:
    """The first ```` ```python ```` block (opener, then a line break) after the label."""
    folded = text.lower()
    label = folded.find(_LABEL)
    if label < 0:
        return None
    opener = folded.find(_OPENER + "\n", label + len(_LABEL))
    if opener < 0:
        return None
    start = opener + len(_OPENER) + 1
    end = text.find(_FENCE, start)
    return None if end < 0 else text[start:end]


def _python_blocks(text: str) -> list[str]:
    """Every ```` ```python ```` block whose opener ends its line; the body starts after the
    last line break of the white space that follows the opener."""
    folded = text.lower()
    blocks: list[str] = []
    position = 0
    while True:
        opener = folded.find(_OPENER, position)
        if opener < 0:
            return blocks
        after = opener + len(_OPENER)
        space_end = after
        while space_end < len(text) and text[space_end].isspace():
            space_end += 1
        newline = text.rfind("\n", after, space_end)
        if newline < 0:
            position = opener + 1
            continue
        end = text.find(_FENCE, newline + 1)
        if end < 0:
            return blocks
        blocks.append(text[newline + 1 : end])
        position = end + len(_FENCE)


# -- splitting it into pieces --------------------------------------------------------------------
def command_pieces(command: str) -> list[str]:
    """The pieces AgentFlow runs one by one: everything up to and including each line that
    assigns ``execution = tool.execute(...)`` (the call closing on that line), stripped; what
    follows the last such line is not run."""
    pieces: list[str] = []
    start = 0
    search = 0
    while True:
        found = _execution_line_end(command, search)
        if found is None:
            return pieces
        line_end, resume = found
        piece = command[start:line_end].strip()
        if piece:
            pieces.append(piece)
        start = search = resume


def _execution_line_end(text: str, start: int) -> tuple[int, int] | None:
    """The end of the first qualifying ``execution = tool.execute(...)`` line at or after
    ``start``, and where the next piece starts."""
    position = start
    while True:
        at = text.find(_TARGET, position)
        if at < 0:
            return None
        position = at + 1
        index = _skip_space(text, at + len(_TARGET))
        if not text.startswith("=", index):
            continue
        index = _skip_space(text, index + 1)
        if not text.startswith(_CALL, index):
            continue
        line_start = index + len(_CALL)
        newline = text.find("\n", line_start)
        line_end = len(text) if newline < 0 else newline
        # the call's line qualifies only if nothing but white space follows its last ")"
        if not text[line_start:line_end].rstrip().endswith(")"):
            continue
        resume = _skip_space(text, line_end)
        return line_end, resume


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index].isspace():
        index += 1
    return index


# -- reading a piece -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One ``tool.execute(...)`` call: its arguments (the positional value under ``None``)."""

    arguments: Mapping[str | None, Any]
    records: bool
    """Whether its result is the piece's ``execution`` (the last such call's is)."""


@dataclass(frozen=True)
class Piece:
    """One piece of the command, read: its calls in order, or why it cannot run."""

    text: str
    calls: tuple[Call, ...] = ()
    refused: str | None = None
    """Why the piece is not run (AgentFlow's run of it fails, or it is more than literals)."""

    @property
    def captures(self) -> bool:
        """Whether the piece sets ``execution`` (else AgentFlow records it as uncaptured)."""
        return any(call.records for call in self.calls)


def read_piece(text: str) -> Piece:
    """``text`` read without running it (``Piece.refused`` says why it cannot run)."""
    try:
        tree = ast.parse(text, "<string>")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        return Piece(text, refused=str(error) or type(error).__name__)
    names: dict[str, Any] = {}
    calls: list[Call] = []
    for statement in tree.body:
        try:
            call = _statement(statement, names)
        except ValueError as error:
            return Piece(text, refused=str(error))
        if call is not None:
            calls.append(call)
    recording = [i for i, call in enumerate(calls) if call.records]
    last = recording[-1] if recording else -1
    calls = [Call(call.arguments, i == last) for i, call in enumerate(calls)]
    return Piece(text, tuple(calls))


def _statement(statement: ast.stmt, names: dict[str, Any]) -> Call | None:
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
        return None  # a bare string: nothing to run
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
        if isinstance(target, ast.Name):
            call = _execute_call(statement.value)
            if call is not None:
                names.pop(target.id, None)
                return Call(_arguments(call, names), target.id == _TARGET)
            names[target.id] = _literal(statement.value, names)
            return None
    if isinstance(statement, ast.Expr):
        call = _execute_call(statement.value)
        if call is not None:
            return Call(_arguments(call, names), False)
    raise ValueError(f"not run (only literals and tool.execute calls): {_source(statement)}")


def _execute_call(node: ast.expr) -> ast.Call | None:
    """``node`` if it is a ``tool.execute(...)`` call."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "execute"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "tool"
    ):
        return node
    return None


def _arguments(call: ast.Call, names: Mapping[str, Any]) -> dict[str | None, Any]:
    arguments: dict[str | None, Any] = {}
    for position, value in enumerate(call.args):
        if position > 0 or isinstance(value, ast.Starred):
            raise ValueError("tool.execute takes one positional value at most")
        arguments[None] = _literal(value, names)
    for keyword in call.keywords:
        if keyword.arg is None:
            raise ValueError(f"not run (not a literal): **{_source(keyword.value)}")
        arguments[keyword.arg] = _literal(keyword.value, names)
    return arguments


def _literal(node: ast.expr, names: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        if node.id in names:
            return names[node.id]
        if node.id not in ("True", "False", "None"):
            raise ValueError(f"name '{node.id}' is not defined")
    try:
        return ast.literal_eval(node)
    except _NOT_LITERAL:
        raise ValueError(f"not run (not a literal): {_source(node)}") from None


def _source(node: ast.AST) -> str:
    text = ""
    with contextlib.suppress(Exception):
        text = ast.unparse(node)
    return text[:80]


def read_command_reply(reply: str) -> tuple[str | None, list[Piece]]:
    """The command AgentFlow takes from the executor's ``reply`` (``None``: none) and its
    pieces, read (none when there is no command: nothing runs)."""
    command = read_agentflow_command(reply)
    if command is None:
        return None, []
    return command, [read_piece(piece) for piece in command_pieces(command)]


# -- what memory records -------------------------------------------------------------------------
@dataclass(frozen=True)
class Uncaptured:
    """A piece that set no ``execution`` (AgentFlow records it in its "no execution" words)."""

    piece: str


@dataclass(frozen=True)
class CommandRecord:
    """A step's command as AgentFlow's memory records it, for ``agentflow_format`` to render in
    the pack's words: ``text`` (``None``: the reply held no command), each piece's output in
    order (a tool's value, or ``Uncaptured``), or ``failure``: why the run stopped (AgentFlow
    then records its failure text in place of the whole list)."""

    text: str | None
    outputs: tuple[Any, ...] = field(default=())
    failure: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The record as plain data (an uncaptured piece as ``{"uncaptured": piece}``)."""
        outputs = [
            {"uncaptured": output.piece} if isinstance(output, Uncaptured) else output
            for output in self.outputs
        ]
        return {"text": self.text, "outputs": outputs, "failure": self.failure}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommandRecord:
        """The record ``as_dict`` wrote."""
        outputs = tuple(
            Uncaptured(str(output["uncaptured"]))
            if isinstance(output, dict) and set(output) == {"uncaptured"}
            else output
            for output in data.get("outputs", ())
        )
        text, failure = data.get("text"), data.get("failure")
        return cls(
            None if text is None else str(text),
            outputs,
            None if failure is None else str(failure),
        )
