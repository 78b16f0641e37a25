"""Structured memory: an append-only event log and the per-turn entries derived for each module.

The log records everything that happened (module outputs, tool calls, errors) and is never
rewritten. Views for the planner and the other modules are rendered from it; a view may shorten
old tool outputs, never the query, the constraints or the open questions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any

from agentflow_env.base.untrusted import shorten
from agentflow_env.tasks.base import Evidence
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.agentflow_command import CommandRecord


@dataclass(frozen=True)
class QueryAnalysis:
    """The initializer's reading of the query."""

    objective: str
    constraints: tuple[str, ...] = ()
    sub_questions: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    skills: tuple[str, ...] = ()
    text: str = ""
    """The analysis as its model wrote it (AgentFlow's four sections); the ``agentflow`` prompt
    style shows it verbatim. Empty for analyses built from fields (the rule initializer)."""

    def as_dict(self) -> dict[str, Any]:
        """The four analysis fields as plain data (subclasses' extra fields left out)."""
        return {
            "objective": self.objective,
            "constraints": list(self.constraints),
            "sub_questions": list(self.sub_questions),
            "tools": list(self.tools),
        }

    def render(self) -> str:
        lines = [f"Objective: {self.objective}"]
        if self.constraints:
            lines.append("Constraints: " + " ".join(self.constraints))
        if self.sub_questions:
            lines.append("Sub-questions:")
            lines.extend(f"  {i}. {q}" for i, q in enumerate(self.sub_questions, start=1))
        if self.tools:
            lines.append("Relevant tools: " + ", ".join(self.tools))
        return "\n".join(lines)


class VerificationStatus(str, Enum):
    """What the verifier said about a turn (or why it could not say).

    A ``str`` enum: a status compares equal to its string (``status == "STOP"``), formats as it
    (``f"{status}"`` gives ``STOP``) and serialises to JSON as it.
    """

    STOP = "STOP"
    """The evidence in memory answers the query: the episode ends."""
    CONTINUE = "CONTINUE"
    """More evidence is needed."""
    INVALID = "INVALID"
    """The action could not be used (unreadable, malformed, unknown tool)."""
    ERROR = "ERROR"
    """A frozen module (executor or verifier) failed on this turn."""
    PENDING = "PENDING"
    """The turn's provisional entry, shown to the verifier before its verdict."""

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class MemoryEntry:
    """One planner turn: what was asked for, what ran, what came back, what the verifier said."""

    turn: int
    justification: str
    context: str
    sub_goal: str
    selected_tool: str | None
    tool_arguments: Mapping[str, Any]
    tool_result: str
    tool_ok: bool
    verification_status: VerificationStatus
    open_questions: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    tool_identity: str | None = None
    """The tool's own name when the planner saw it renamed (an evaluation variant), else None."""
    unmatched_tool: str | None = None
    """The tool name the action gave when no tool answers to it (an unknown tool), else None."""
    tool_value: Any = None
    """The tool's result as a Python value where it gave one (``ToolResult.value``: what one of
    AgentFlow's tools returns under ``prompt_style="agentflow"``), else None."""
    agentflow_command: CommandRecord | None = None
    """Under AgentFlow's scripts: the executor's command as written and what each of its calls
    gave, as AgentFlow's memory records them (``agentflow_command``), else None."""

    @property
    def tool_key(self) -> str | None:
        """The name evidence readers match on: the tool's own name, not the shown one."""
        return self.tool_identity or self.selected_tool

    def __post_init__(self) -> None:
        # Entries read back from dicts (e.g. JSON records) carry the status as a plain string.
        status = VerificationStatus(self.verification_status)
        object.__setattr__(self, "verification_status", status)
        if isinstance(self.agentflow_command, Mapping):  # read back from ``as_dict``
            record = CommandRecord.from_dict(self.agentflow_command)
            object.__setattr__(self, "agentflow_command", record)

    def as_dict(self) -> dict[str, Any]:
        """The entry as plain data: the status is its string, the containers are lists/dicts.

        Built field by field: ``dataclasses.asdict`` deep-copies every value, and this runs for
        every entry on every step (``info["memory"]``). The fields are read once per entry; each
        call copies them and makes its own containers."""
        fields_read = self.__dict__.get("_fields_read")
        if fields_read is None:
            fields_read = {item.name: getattr(self, item.name) for item in _ENTRY_FIELDS}
            fields_read["verification_status"] = self.verification_status.value
            object.__setattr__(self, "_fields_read", fields_read)
        record = dict(fields_read)
        record["tool_arguments"] = dict(self.tool_arguments)
        record["open_questions"] = list(self.open_questions)
        record["errors"] = list(self.errors)
        command = record.pop("agentflow_command", None)  # records without it stay as they were
        if command is not None:
            record["agentflow_command"] = command.as_dict()
        return record

    def evidence(self) -> Evidence | None:
        """The tool call as evidence (``Memory.evidence``), or ``None`` without a tool; made
        once per entry (``Evidence`` is frozen)."""
        if self.tool_key is None:
            return None
        made = self.__dict__.get("_evidence")
        if made is None:
            made = Evidence(self.tool_key, self.tool_arguments, self.tool_result, self.tool_ok)
            object.__setattr__(self, "_evidence", made)
        return made


_ENTRY_FIELDS = fields(MemoryEntry)
_ATOMS = (str, int, float, bool, type(None))


def _as_plain_dict(record: Any) -> dict[str, Any]:
    """``dataclasses.asdict(record)``, without its per-value deep copies where the fields hold
    only strings, numbers, booleans, ``None`` and tuples, lists and dicts of them (a deep copy
    of those is the value itself); any other value: ``asdict`` itself."""
    plain = {}
    for item in fields(record):
        value = _plain_copy(getattr(record, item.name))
        if value is _NOT_PLAIN:
            return asdict(record)
        plain[item.name] = value
    return plain


_NOT_PLAIN: Any = object()


def _plain_copy(value: Any) -> Any:
    """What ``asdict`` makes of ``value`` (new containers, the same atoms), or ``_NOT_PLAIN``."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is tuple or kind is list:
        items = [_plain_copy(item) for item in value]
        return _NOT_PLAIN if any(item is _NOT_PLAIN for item in items) else kind(items)
    if kind is dict:
        pairs = [(_plain_copy(key), _plain_copy(item)) for key, item in value.items()]
        if any(key is _NOT_PLAIN or item is _NOT_PLAIN for key, item in pairs):
            return _NOT_PLAIN
        return dict(pairs)
    return _NOT_PLAIN


@dataclass(frozen=True)
class Event:
    """One line of the append-only log. Never changed once logged (its payload included):
    forked memories share their events."""

    kind: str
    turn: int
    payload: Mapping[str, Any]
    time: float = field(default_factory=time.time)


class Memory:
    """The episode's memory: query, analysis, entries and the event log behind them."""

    def __init__(self, query: str, tools: ToolSet | None = None) -> None:
        self.query = query
        self.tools = tools
        """The episode's tools (modules that show the toolbox, e.g. AgentFlow's verifier)."""
        self.analysis: QueryAnalysis | None = None
        self._entries: list[MemoryEntry] = []
        self._events: list[Event] = []

    # -- writing (append only) -------------------------------------------------------------
    def log(self, kind: str, turn: int, **payload: Any) -> Event:
        event = Event(kind=kind, turn=turn, payload=payload)
        self._events.append(event)
        return event

    def set_analysis(self, analysis: QueryAnalysis) -> None:
        if self.analysis is not None:
            raise RuntimeError("the query analysis is written once per episode")
        self.analysis = analysis
        self.log("analysis", 0, analysis=_as_plain_dict(analysis))

    def add_entry(self, entry: MemoryEntry) -> None:
        if entry.turn != len(self._entries) + 1:
            raise ValueError(f"entry for turn {entry.turn} out of order after {len(self._entries)}")
        self._entries.append(entry)
        self.log("entry", entry.turn, entry=entry.as_dict())

    def preview(self, entry: MemoryEntry) -> Memory:
        """A copy with ``entry`` appended, for modules that judge a turn before it is recorded."""
        return self._copy_with([*self._entries, entry], list(self._events))

    def fork(self) -> Memory:
        """An independent copy for a forked episode: writing to either leaves the other as it is.

        Only the two lists are new (shallow copies); the entries and events in them are shared,
        since both are frozen and nothing mutates a payload or an entry's arguments in place.
        """
        return self._copy_with(list(self._entries), list(self._events))

    def prefix(self, turns: int) -> Memory:
        """A copy holding only the first ``turns`` entries (what memory was after that turn)."""
        return self._copy_with(self._entries[:turns], [e for e in self._events if e.turn <= turns])

    def _copy_with(self, entries: list[MemoryEntry], events: list[Event]) -> Memory:
        """A memory of the same query, tools and analysis holding these (new) lists."""
        copy = Memory(self.query, self.tools)
        copy.analysis = self.analysis
        copy._entries = entries
        copy._events = events
        return copy

    # -- reading ---------------------------------------------------------------------------
    @property
    def entries(self) -> tuple[MemoryEntry, ...]:
        return tuple(self._entries)

    @property
    def events(self) -> tuple[Event, ...]:
        return tuple(self._events)

    @property
    def event_count(self) -> int:
        return len(self._events)

    def events_since(self, start: int) -> tuple[Event, ...]:
        """The events logged after the first ``start`` (without copying the whole log)."""
        return tuple(self._events[start:])

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[MemoryEntry]:
        return iter(tuple(self._entries))

    def evidence(self) -> list[Evidence]:
        """Every executed tool call, full output, oldest first."""
        found = [entry.evidence() for entry in self._entries]
        return [evidence for evidence in found if evidence is not None]

    def open_questions(self) -> tuple[str, ...]:
        if self._entries:
            return self._entries[-1].open_questions
        return self.analysis.sub_questions if self.analysis else ()

    def as_dicts(self) -> list[dict[str, Any]]:
        return [entry.as_dict() for entry in self._entries]

    def render(
        self,
        *,
        keep_full: int = 2,
        max_old_result_chars: int = 400,
        max_old_field_chars: int = 200,
        max_field_chars: int = 2000,
    ) -> str:
        """The step history as text.

        Results older than the last ``keep_full`` turns are cut to ``max_old_result_chars``;
        the planner's own fields (sub-goal, command, errors) to ``max_old_field_chars`` there and
        to ``max_field_chars`` in recent turns, so a huge action cannot grow every later prompt.
        The log keeps everything.
        """
        if not self._entries:
            return "No steps taken yet."
        cutoff = len(self._entries) - keep_full
        old = (max_old_result_chars, max_old_field_chars)
        recent = (None, max_field_chars)
        return "\n\n".join(
            _entry_block(entry, *(old if index < cutoff else recent))
            for index, entry in enumerate(self._entries)
        )


def cached_text(owner: object, key: Hashable, make: Callable[..., str], *args: Any) -> str:
    """``make(*args)``, kept on ``owner`` under ``key`` for the next call.

    For text rendered from a frozen record (a memory entry, a query analysis, a tool card):
    what it renders to never changes, so each rendering is made once per record and reused by
    every later prompt of the episode and its forks, which share the record. The texts live in
    the record's ``__dict__``, outside its fields (equality, ``asdict`` and ``repr`` ignore
    them); a record without a ``__dict__`` renders every time.
    """
    try:
        return owner.__dict__["_cached_texts"][key]
    except KeyError:
        pass
    except AttributeError:
        return make(*args)
    cache = owner.__dict__.setdefault("_cached_texts", {})
    text = cache[key] = make(*args)
    return text


def _entry_block(entry: MemoryEntry, result_chars: int | None, field_chars: int) -> str:
    """One step of ``Memory.render``: its result cut to ``result_chars`` (``None``: whole)."""
    key = ("memory_block", result_chars, field_chars)
    return cached_text(entry, key, _make_block, entry, result_chars, field_chars)


def _make_block(entry: MemoryEntry, result_chars: int | None, field_chars: int) -> str:
    result = entry.tool_result
    if result_chars is not None:
        result = shorten(result, result_chars)
    return _render_entry(entry, result, field_chars)


def _render_entry(entry: MemoryEntry, result: str, field_chars: int) -> str:
    lines = [f"Step {entry.turn}:"]
    lines.append(f"  Tool: {entry.selected_tool or '(none)'}")
    lines.append(f"  Sub-Goal: {shorten(entry.sub_goal, field_chars) or '(none)'}")
    if entry.tool_arguments:
        args = ", ".join(f"{k}={v!r}" for k, v in entry.tool_arguments.items())
        lines.append(f"  Command: {shorten(args, field_chars)}")
    if entry.errors:
        lines.append("  Errors: " + shorten(" | ".join(entry.errors), field_chars))
    if result:
        lines.append("  Result:\n" + _indent(result, "    "))
    lines.append(f"  Verification: {entry.verification_status}")
    return "\n".join(lines)


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.split("\n"))
