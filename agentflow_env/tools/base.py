"""The tool interface: a card the planner reads, argument validation, and an async ``run``."""

from __future__ import annotations

import abc
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentflow_env.retrieval.corpus import Corpus
from agentflow_env.tools.texts import AgentFlowToolTexts, AgentFlowWikipedia


class ToolArgumentError(ValueError):
    """The arguments do not match the tool's input schema. Recorded as an observation."""


@dataclass(frozen=True)
class ToolCard:
    """AgentFlow's tool-card fields, rendered into the planner prompt.

    ``input_schema`` maps argument name -> {"type": "string"|"integer"|"number"|"boolean",
    "description": str, "required": bool}. ``primary_argument`` is the argument a rule executor
    fills from the planner's Context (falling back to its Sub-Goal). ``version`` is metadata
    only (not rendered); ``best_practices`` are rendered after the limitations.
    """

    name: str
    description: str
    input_schema: Mapping[str, Mapping[str, Any]]
    output_type: str
    primary_argument: str
    demo_commands: tuple[Mapping[str, str], ...] = ()
    limitations: tuple[str, ...] = ()
    version: str = "1.0.0"
    best_practices: tuple[str, ...] = ()

    def render(self) -> str:
        """The card as prompt text."""
        args = ", ".join(
            f"{name} ({spec.get('type', 'string')}): {spec.get('description', '')}"
            for name, spec in self.input_schema.items()
        )
        lines = [
            f"- {self.name}: {self.description}",
            f"  Input: {args}",
            f"  Output: {self.output_type}",
        ]
        for demo in self.demo_commands:
            lines.append(f"  Example: {demo.get('command', '')}  # {demo.get('description', '')}")
        for limit in self.limitations:
            lines.append(f"  Limitation: {limit}")
        for practice in self.best_practices:
            lines.append(f"  Best practice: {practice}")
        return "\n".join(lines)


def _fresh_episode_key() -> int:
    return secrets.randbits(63)


@dataclass(frozen=True)
class ToolContext:
    """What a tool may know about the episode it serves (never the gold answers).

    ``time_limit_s`` is this call's wall-clock limit, set by ``run_tool`` for tools that stop
    themselves (``Tool.stop_grace_s``). ``episode_key`` is a random number drawn when the context
    is built (once per episode) and kept by every copy of it (``dataclasses.replace``, a fork of
    the episode): a tool that draws randomness per episode without a ``seed`` derives it from
    this key, never from shared state, so a forked episode given the same calls draws the same.
    ``agentflow_shapes`` (set under ``prompt_style="agentflow"``) asks AgentFlow's tools for
    the results AgentFlow's own tools return (``ToolResult.value``), since its planner was
    trained on those. ``agentflow_wikipedia`` picks which result AgentFlow's Wikipedia tool
    gives (``AgentFlowWikipedia``; ``None``: this project's), ``agentflow_texts`` holds
    AgentFlow's tools' own strings read from the user's checkout, and ``agentflow_cut`` asks
    ``run_tool`` to cut long results as AgentFlow's scripts do (``agentflow_cut``).
    """

    corpus: Corpus | None = None
    seed: int | None = None
    time_limit_s: float | None = None
    episode_key: int = field(default_factory=_fresh_episode_key)
    agentflow_shapes: bool = False
    agentflow_wikipedia: AgentFlowWikipedia | None = None
    agentflow_texts: AgentFlowToolTexts = AgentFlowToolTexts()
    agentflow_cut: bool = False


@dataclass
class ToolResult:
    """The outcome of one call. A failed call has ``ok=False`` and a readable ``error``.

    ``value`` is the result as a Python value where a tool has a structured one to give (the
    dict one of AgentFlow's tools returns, under ``ToolContext.agentflow_shapes``); ``output``
    is always its text.
    """

    ok: bool
    output: str
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    value: Any = None

    @classmethod
    def failure(cls, error: str, **metadata: Any) -> ToolResult:
        return cls(ok=False, output="", error=error, metadata=dict(metadata))

    @property
    def service_broken(self) -> bool:
        """Whether the call failed because the tool's service is broken, not the call."""
        return not self.ok and self.metadata.get("kind") in SERVICE_FAILURE_KINDS


SERVICE_FAILURE_KINDS = frozenset({"retriever", "sandbox", "search_api", "crash"})
"""``ToolResult.failure`` kinds that say the tool's service is broken (an unreachable retriever,
a sandbox that cannot start, a search API refusing, a tool that raised), not the planner's call."""


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


class Tool(abc.ABC):
    """Base class of every tool. Subclasses set ``card`` and implement ``run``.

    ``run`` is async so that remote tools (retriever servers, sandboxes) do not block the event
    loop; the session enforces ``timeout_s`` and turns any exception into a failed result.

    A tool that can stop itself and still report what it got (a sandbox keeps the partial output
    of a program it stops) sets ``stop_grace_s``: ``run_tool`` then passes it the limit as
    ``context.time_limit_s`` and cancels it only ``stop_grace_s`` seconds after that.

    ``aliases`` are further names the tool answers to in a ``ToolSet`` and in the registry
    (AgentFlow's short tool names, for instance); the planner is shown only ``name``.
    """

    card: ToolCard
    aliases: tuple[str, ...] = ()
    timeout_s: float = 10.0
    stop_grace_s: float | None = None

    @property
    def name(self) -> str:
        return self.card.name

    @property
    def original_name(self) -> str:
        """The tool's own name, even when an evaluation variant shows it under another one
        (``agentflow_env.tools.variants``); evidence readers and diagnostics match on it."""
        return self.name

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``arguments`` against the card's schema; return a clean copy or raise."""
        if not isinstance(arguments, Mapping):
            raise ToolArgumentError(
                f"{self.name}: arguments must be an object, got {type(arguments).__name__}"
            )
        schema = self.card.input_schema
        unknown = sorted(set(arguments) - set(schema))
        if unknown:
            raise ToolArgumentError(
                f"{self.name}: unknown argument(s) {unknown}; expected {sorted(schema)}"
            )
        clean: dict[str, Any] = {}
        for name, spec in schema.items():
            if name not in arguments:
                if spec.get("required", True):
                    raise ToolArgumentError(f"{self.name}: missing required argument '{name}'")
                continue
            value = arguments[name]
            expected = _TYPES.get(str(spec.get("type", "string")), (object,))
            if isinstance(value, bool) and bool not in expected or not isinstance(value, expected):
                raise ToolArgumentError(
                    f"{self.name}: argument '{name}' must be {spec.get('type', 'string')}, got {type(value).__name__}"
                )
            if isinstance(value, str) and spec.get("required", True) and not value.strip():
                raise ToolArgumentError(f"{self.name}: argument '{name}' is empty")
            clean[name] = value
        return clean

    @abc.abstractmethod
    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        """Execute with validated ``arguments``. May raise; the session records the error."""
