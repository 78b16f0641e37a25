"""What AgentFlow's toolbox metadata says of a tool beyond its card (``prompt_style="agentflow"``).

AgentFlow's tools differ in small ways a trained planner has seen in every prompt: the key names
under ``user_metadata`` (``limitations`` / ``best_practices`` for its Google and Python tools,
``limitation`` / ``best_practice`` for the others), whether ``require_llm_engine`` is set, and an
``output_type`` of ``dict`` for the tools that return one. Each value under ``user_metadata`` is
one string laid out as AgentFlow writes them: a leading newline, an opening line (not for its
Google tool), one numbered line per item, a trailing newline. The wording is the cards' own.

A tool states its differences in ``agentflow_facts``; any other tool gets the common layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentflow_env.tools.base import Tool
from agentflow_env.tools.variants import ToolVariant


@dataclass(frozen=True)
class MetadataFacts:
    """How one of AgentFlow's tools shows in its toolbox metadata."""

    plural_keys: bool = False
    """``limitations`` / ``best_practices`` rather than ``limitation`` / ``best_practice``."""
    intros: bool = True
    """Each list opens with a line naming the tool."""
    require_llm_engine: bool = False
    """What AgentFlow's metadata says, which need not be whether this project's tool calls a
    model (its Wikipedia tool says False and still uses one)."""
    output_type: str | None = None
    """The type AgentFlow's tool returns, where it is not the card's (a dict)."""


_PLURAL_KEYS = ("limitations", "best_practices")
_SINGULAR_KEYS = ("limitation", "best_practice")


def facts_of(tool: Tool) -> MetadataFacts | None:
    """The tool's ``agentflow_facts`` (a variant's are those of the tool it wraps), or None."""
    while isinstance(tool, ToolVariant):
        tool = tool.tool
    facts = getattr(tool, "agentflow_facts", None)
    return facts if isinstance(facts, MetadataFacts) else None


def numbered_text(items: Sequence[str], intro: str | None = None) -> str:
    """``items`` as one AgentFlow metadata value: ``"\\n<intro>\\n1. ...\\n2. ...\\n"``,
    each item a sentence (a card's items are lowercase phrases)."""
    if not items:
        return ""
    lines = [intro] if intro else []
    lines += [f"{number}. {_sentence(item)}" for number, item in enumerate(items, start=1)]
    return "\n" + "\n".join(lines) + "\n"


def _sentence(item: str) -> str:
    item = item.strip()
    if item and item[-1] not in ".!?":
        item += "."
    return item[:1].upper() + item[1:]


def user_metadata(tool: Tool) -> dict[str, str]:
    """``user_metadata`` of the toolbox metadata: the card's limitations and best practices."""
    facts = facts_of(tool) or MetadataFacts()
    card = tool.card
    name = card.name
    limits, practices = _PLURAL_KEYS if facts.plural_keys else _SINGULAR_KEYS
    return {
        limits: numbered_text(
            card.limitations, f"What {name} cannot do well:" if facts.intros else None
        ),
        practices: numbered_text(
            card.best_practices, f"How to get good results from {name}:" if facts.intros else None
        ),
    }


def require_llm_engine(tool: Tool) -> bool:
    """``require_llm_engine`` of the toolbox metadata: AgentFlow's value for its tools, else
    whether the tool calls a model."""
    facts = facts_of(tool)
    if facts is not None:
        return facts.require_llm_engine
    return bool(getattr(tool, "requires_llm", False))


def output_type(tool: Tool) -> str:
    """``output_type`` of the toolbox metadata: AgentFlow's type where it differs from the
    card's (the dict its Python and Wikipedia tools return), else the card's."""
    facts = facts_of(tool)
    if facts is not None and facts.output_type is not None:
        return facts.output_type
    return tool.card.output_type


__all__ = [
    "MetadataFacts",
    "facts_of",
    "numbered_text",
    "output_type",
    "require_llm_engine",
    "user_metadata",
]
