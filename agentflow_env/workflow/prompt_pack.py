"""A prompt pack: every sentence the ``agentflow`` prompt style puts in front of a model.

One interface for the wording, whoever wrote it. A pack holds the system prompt, the planner's
next-step prompt, the four module prompts (query analysis, executor command, verifier, direct
answer), the tool cards, the memory texts of a step with no usable tool and the answer-tag
sentence a training rollout appends to each question. Two fill it:

- this project's own pack (``own_pack()``, in ``agentflow_format``), its own sentences in
  AgentFlow's formats;
- AgentFlow's, read from the user's checkout (``agentflow_source.read_agentflow_source``), or
  from a pack file written from one (``agentflow-env agentflow-pack --from PATH --out
  pack.json``), so a trainer's workers need the JSON and not the checkout.

A prompt is a ``Template``: literal parts and placeholders named by the expressions AgentFlow's
f-strings use, so filling them with the same values gives the same text byte for byte. The
renderers fill every pack the same way; only where a pack's text comes from differs.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentflow_env.tools.texts import AgentFlowToolTexts

__all__ = [
    "OWN_WORDING",
    "PACK_FORMAT",
    "Placeholder",
    "PromptPack",
    "PromptPackError",
    "Template",
    "ToolCardSource",
    "read_pack",
    "source_label",
    "write_pack",
]

OWN_WORDING = "own"
"""How a summary names this project's own wording (and the own pack's name)."""
PACK_FORMAT = "agentflow-env prompt pack"
"""The ``format`` field of a pack file; ``version`` 1."""

_CONVERSIONS = {-1: None, ord("s"): str, ord("r"): repr, ord("a"): ascii}
TEMPLATE_NAMES = ("planner", "analysis", "command", "verifier", "generalist", "unmatched_tool")


class PromptPackError(ValueError):
    """A pack file that cannot be read as a pack; the message names the file and the reason."""


# -- templates -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Placeholder:
    """One ``{expression!conversion:spec}`` of an f-string; ``expression`` is its source text."""

    expression: str
    conversion: int = -1
    format_spec: str = ""

    def format(self, value: Any) -> str:
        convert = _CONVERSIONS[self.conversion]
        return format(convert(value) if convert is not None else value, self.format_spec)


@dataclass(frozen=True)
class Template:
    """An f-string as literal parts and placeholders, in order; ``where`` names its origin."""

    parts: tuple[str | Placeholder, ...]
    where: str

    @classmethod
    def from_format(cls, text: str, where: str, names: Mapping[str, str]) -> Template:
        """A ``str.format`` template (``{name}`` fields only) whose fields are named by the
        expressions in ``names`` (``{"query": "question"}``)."""
        parts: list[str | Placeholder] = []
        for literal, name, spec, conversion in _FORMATTER.parse(text):
            if literal:
                parts.append(literal)
            if name is not None:
                code = -1 if conversion is None else ord(conversion)
                parts.append(Placeholder(names[name], code, spec or ""))
        return cls(tuple(parts), where)

    @property
    def fields(self) -> tuple[str, ...]:
        """The placeholders' expressions, in order of first use."""
        seen: dict[str, None] = {}
        for part in self.parts:
            if isinstance(part, Placeholder):
                seen.setdefault(part.expression)
        return tuple(seen)

    @property
    def literal(self) -> str:
        """The literal parts alone (for messages and tests)."""
        return "".join(part for part in self.parts if isinstance(part, str))

    def render(self, values: Mapping[str, Any]) -> str:
        """The text the f-string gives when its expressions evaluate to ``values``."""
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            elif part.expression in values:
                out.append(part.format(values[part.expression]))
            else:
                raise KeyError(f"{self.where}: no value for {{{part.expression}}}")
        return "".join(out)


# -- the pack ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolCardSource:
    """One tool class of a pack: its directory under AgentFlow's ``tools/``, its class name and
    the metadata dict AgentFlow's initializer builds for it (the planner sees it verbatim)."""

    directory: str
    class_name: str
    metadata: Mapping[str, Any] = field(compare=False)

    @property
    def tool_name(self) -> str:
        return str(self.metadata["tool_name"])


@dataclass(frozen=True)
class PromptPack:
    """Everything the ``agentflow`` prompt style says to its models. ``name``: ``own`` or
    ``agentflow``; ``origin``: the checkout it was read from (``None`` for the own pack);
    ``commit``: the checkout's commit, where it could be told."""

    name: str
    origin: str | None
    commit: str | None
    system_prompt: str
    planner: Template
    analysis: Template
    command: Template
    verifier: Template
    generalist: Template
    unmatched_tool: Template
    """``tool_name`` of a step whose tool matched none (filled with the name the planner gave)."""
    no_tool_command: str
    no_tool_result: str
    answer_suffix: str
    """What a training rollout appends to each question (separator included)."""
    tools: tuple[ToolCardSource, ...] = ()
    """The pack's own tool cards; a tool it has none for shows the tool's own card."""
    module_tools: Mapping[str, tuple[str, ...]] = field(compare=False, default_factory=dict)
    """Tool directory -> the tool classes its ``tool.py`` holds, defined there or imported (the
    classes AgentFlow's initializer loads for that directory), by class name."""
    eval_no_tool_command: str | None = None
    """The command AgentFlow's evaluation script (``test/solve.py``) records for a step with no
    usable tool (``no_tool_command`` is its training solver's); ``None``: the solver's is used
    (a pack file written before this was read)."""
    eval_no_tool_result: str | None = None
    """The result that goes with ``eval_no_tool_command``."""
    script: str | None = None
    """The AgentFlow script the pack renders for (``for_script``): ``"eval"`` takes the
    evaluation script's no-tool texts, ``"train"`` and ``None`` the solver's."""
    analysis_fields: tuple[str, ...] = ()
    """The fields of the structured reply AgentFlow asks its analysis model for (its
    ``response_format`` class's, in order); ``()``: the analysis is asked for as free text."""
    analysis_shown: Template | None = None
    """How AgentFlow shows that structured reply to its modules (the class's ``__str__``; its
    placeholders are ``self.<field>``)."""
    engine_defaults: Mapping[str, Mapping[str, float]] = field(compare=False, default_factory=dict)
    """Backend (``openai``, ``dashscope``, ``vllm``) -> the per-call defaults of AgentFlow's
    engine for it (``max_tokens``, ``top_p``); a backend left out keeps the endpoint's."""
    tool_texts: AgentFlowToolTexts = AgentFlowToolTexts()
    """AgentFlow's tools' own strings (the Wikipedia tool's abstract ending and no-results
    sentence, the Python tool's markers and errors), handed to the tools under the presets;
    the own pack has none (this project's)."""
    no_command: str | None = None
    """The command AgentFlow's executor records when its model's reply holds none (nothing
    runs then); ``None``: this project's sentence (a pack file written before this was read)."""
    command_failure: Template | None = None
    """The result AgentFlow records when running a command fails (placeholder ``str(e)``: why)."""
    no_execution: Template | None = None
    """The result of a command piece that set no ``execution`` (placeholder ``block``)."""

    def for_script(self, script: str | None) -> PromptPack:
        """This pack, rendering as AgentFlow's ``script`` does (``SessionConfig.agentflow_script``:
        ``"eval"``, ``"train"`` or ``None``)."""
        return self if script == self.script else dataclasses.replace(self, script=script)

    @property
    def no_tool_texts(self) -> tuple[str, str]:
        """The command and result memory shows for a step with no usable tool: the evaluation
        script's under ``script="eval"`` (where the pack has them), else the solver's."""
        if self.script == "eval" and self.eval_no_tool_command is not None:
            return self.eval_no_tool_command, self.eval_no_tool_result or ""
        return self.no_tool_command, self.no_tool_result

    @property
    def label(self) -> str:
        """``own``, or ``AgentFlow's, from PATH at COMMIT``: what summaries say about it."""
        return source_label(self.origin, self.commit)

    def card(self, tool_name: str) -> Mapping[str, Any] | None:
        """A copy of the metadata of the tool named ``tool_name`` (``None`` if none has it)."""
        for tool in self.tools:
            if tool.tool_name == tool_name:
                return copy.deepcopy(dict(tool.metadata))
        return None

    def toolbox(self, enabled: Sequence[str]) -> tuple[str, ...]:
        """The tool list AgentFlow's initializer would give for ``enabled`` (class or tool
        names): every tool class the enabled directories' modules hold, sorted by tool name.
        A name it cannot place is left out, as AgentFlow leaves out a tool it fails to load."""
        by_class = {tool.class_name: tool for tool in self.tools}
        by_name = {tool.tool_name: tool for tool in self.tools}
        names: set[str] = set()
        for wanted in enabled:
            tool = by_class.get(wanted) or by_name.get(wanted)
            directory = tool.directory if tool else wanted.lower().replace("_tool", "")
            for class_name in self.module_tools.get(directory, ()):
                if class_name in by_class:
                    names.add(by_class[class_name].tool_name)
        return tuple(sorted(names))

    def to_dict(self) -> dict[str, Any]:
        """The pack as JSON-ready data (``read_pack`` gives back an equal pack)."""
        return {
            "format": PACK_FORMAT,
            "version": 1,
            "name": self.name,
            "origin": self.origin,
            "commit": self.commit,
            "system_prompt": self.system_prompt,
            "templates": {name: _template_data(getattr(self, name)) for name in TEMPLATE_NAMES},
            "no_tool_command": self.no_tool_command,
            "no_tool_result": self.no_tool_result,
            "answer_suffix": self.answer_suffix,
            "tools": [
                {
                    "directory": tool.directory,
                    "class_name": tool.class_name,
                    "metadata": _tagged(tool.metadata),
                }
                for tool in self.tools
            ],
            "module_tools": {name: list(classes) for name, classes in self.module_tools.items()},
            "eval_no_tool_command": self.eval_no_tool_command,
            "eval_no_tool_result": self.eval_no_tool_result,
            "script": self.script,
            "analysis_fields": list(self.analysis_fields),
            "analysis_shown": (
                None if self.analysis_shown is None else _template_data(self.analysis_shown)
            ),
            "engine_defaults": {k: dict(v) for k, v in self.engine_defaults.items()},
            "tool_texts": dataclasses.asdict(self.tool_texts),
            "no_command": self.no_command,
            "command_failure": _template_or_none(self.command_failure),
            "no_execution": _template_or_none(self.no_execution),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "a pack") -> PromptPack:
        """The pack ``to_dict`` wrote; ``PromptPackError`` naming ``where`` otherwise."""
        if data.get("format") != PACK_FORMAT or data.get("version") != 1:
            raise PromptPackError(f"{where}: not a prompt pack (format {PACK_FORMAT!r}, version 1)")
        try:
            templates = data["templates"]
            return cls(
                name=str(data["name"]),
                origin=data["origin"],
                commit=data["commit"],
                system_prompt=str(data["system_prompt"]),
                **{name: _template(templates[name]) for name in TEMPLATE_NAMES},
                no_tool_command=str(data["no_tool_command"]),
                no_tool_result=str(data["no_tool_result"]),
                answer_suffix=str(data["answer_suffix"]),
                tools=tuple(
                    ToolCardSource(t["directory"], t["class_name"], _untagged(t["metadata"]))
                    for t in data["tools"]
                ),
                module_tools={k: tuple(v) for k, v in data["module_tools"].items()},
                eval_no_tool_command=_text_or_none(data.get("eval_no_tool_command")),
                eval_no_tool_result=_text_or_none(data.get("eval_no_tool_result")),
                script=_text_or_none(data.get("script")),
                analysis_fields=tuple(str(f) for f in data.get("analysis_fields", ())),
                analysis_shown=(
                    None
                    if data.get("analysis_shown") is None
                    else _template(data["analysis_shown"])
                ),
                engine_defaults={
                    str(k): {str(n): float(x) for n, x in v.items()}
                    for k, v in data.get("engine_defaults", {}).items()
                },
                tool_texts=AgentFlowToolTexts(
                    **{k: _text_or_none(v) for k, v in data.get("tool_texts", {}).items()}
                ),
                no_command=_text_or_none(data.get("no_command")),
                command_failure=_template_from(data.get("command_failure")),
                no_execution=_template_from(data.get("no_execution")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PromptPackError(f"{where}: a malformed prompt pack ({exc!r:.200})") from exc


def source_label(origin: str | os.PathLike[str] | None, commit: str | None = None) -> str:
    """How summaries name the wording: ``own``, or ``AgentFlow's, from PATH at COMMIT``."""
    if origin is None:
        return OWN_WORDING
    at = f"at {commit}" if commit else "at an unknown commit (no readable .git)"
    return f"AgentFlow's, from {origin} {at}"


def write_pack(pack: PromptPack, path: str | os.PathLike[str]) -> Path:
    """Write ``pack`` as JSON to ``path``; returns the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(pack.to_dict(), ensure_ascii=False, indent=1)
    out.write_text(text + "\n", encoding="utf-8")
    return out


def read_pack(path: str | os.PathLike[str]) -> PromptPack:
    """The pack in the JSON file at ``path``; ``PromptPackError`` naming the file otherwise."""
    try:
        data = json.loads(Path(path).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PromptPackError(f"{path}: cannot read a prompt pack ({exc})") from exc
    if not isinstance(data, dict):
        raise PromptPackError(f"{path}: not a prompt pack (a JSON object)")
    return PromptPack.from_dict(data, where=os.fspath(path))


# -- JSON forms ----------------------------------------------------------------------------------
def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _template_or_none(template: Template | None) -> dict[str, Any] | None:
    return None if template is None else _template_data(template)


def _template_from(data: Any) -> Template | None:
    return None if data is None else _template(data)


def _template_data(template: Template) -> dict[str, Any]:
    parts = [
        part
        if isinstance(part, str)
        else {
            "expression": part.expression,
            "conversion": part.conversion,
            "spec": part.format_spec,
        }
        for part in template.parts
    ]
    return {"where": template.where, "parts": parts}


def _template(data: Mapping[str, Any]) -> Template:
    parts: list[str | Placeholder] = []
    for part in data["parts"]:
        if isinstance(part, str):
            parts.append(part)
        else:
            conversion = int(part["conversion"])
            if conversion not in _CONVERSIONS:
                raise ValueError(f"unknown conversion {conversion}")
            parts.append(Placeholder(str(part["expression"]), conversion, str(part["spec"])))
    return Template(tuple(parts), str(data["where"]))


# A card is shown as Python's ``str`` of its dict, so tuples must stay tuples and keys keep
# their types: those two are tagged in JSON; lists, strings, numbers, booleans and None are not.
def _tagged(value: Any) -> Any:
    if isinstance(value, tuple):
        return {"__tuple__": [_tagged(item) for item in value]}
    if isinstance(value, list):
        return [_tagged(item) for item in value]
    if isinstance(value, Mapping):
        if all(isinstance(key, str) and not key.startswith("__") for key in value):
            return {key: _tagged(item) for key, item in value.items()}
        return {"__items__": [[_tagged(key), _tagged(item)] for key, item in value.items()]}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"a tool card holds {type(value).__name__}, which a pack cannot keep")


def _untagged(value: Any) -> Any:
    if isinstance(value, list):
        return [_untagged(item) for item in value]
    if isinstance(value, dict):
        if set(value) == {"__tuple__"}:
            return tuple(_untagged(item) for item in value["__tuple__"])
        if set(value) == {"__items__"}:
            return {_untagged(key): _untagged(item) for key, item in value["__items__"]}
        return {key: _untagged(item) for key, item in value.items()}
    return value


_FORMATTER = string.Formatter()
