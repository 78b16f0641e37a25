"""AgentFlow's tool names: the long names its planner sees, the short names of its classes, and
how its planner matches the name it wrote to one of them."""

from __future__ import annotations

import re
from collections.abc import Iterable

GENERALIST = "Generalist_Solution_Generator_Tool"
PYTHON_CODER = "Python_Code_Generator_Tool"
WIKIPEDIA_RAG = "Wikipedia_RAG_Search_Tool"
GOOGLE_SEARCH = "Ground_Google_Search_Tool"
WEB_RAG = "Web_RAG_Search_Tool"

SHORT_NAMES: dict[str, str] = {
    "Base_Generator_Tool": GENERALIST,
    "Python_Coder_Tool": PYTHON_CODER,
    "Wikipedia_Search_Tool": WIKIPEDIA_RAG,
    "Google_Search_Tool": GOOGLE_SEARCH,
    "Web_Search_Tool": WEB_RAG,
}
"""AgentFlow's short (class) name -> long (planner-facing) name of each tool."""

AGENTFLOW_TOOLS: tuple[str, ...] = (
    GENERALIST,
    GOOGLE_SEARCH,
    PYTHON_CODER,
    WEB_RAG,
    WIKIPEDIA_RAG,
)
"""The five tools AgentFlow's planner is shown, in the order it is shown them.

Its configs enable four, but its Wikipedia tool's module imports the web RAG tool and its
initializer loads every tool class a tool module holds, so the web RAG tool comes along; the
initializer then lists the tools sorted by name."""

_SEPARATORS = re.compile("[ _]+")


def agentflow_tool_key(name: str) -> str:
    """The form AgentFlow's planner compares tool names in: split at runs of spaces and
    underscores, lowercased, joined by single underscores (nothing else is forgiven)."""
    return "_".join(part.lower() for part in _SEPARATORS.split(name))


def match_agentflow_tool(name: str, available: Iterable[str]) -> str | None:
    """The first of ``available`` that ``name`` matches as AgentFlow's planner matches it, or
    ``None`` (AgentFlow then records ``No matched tool given: <name>``). Only the available
    names count: a short class name or another spelling matches nothing."""
    key = agentflow_tool_key(name)
    return next((known for known in available if agentflow_tool_key(known) == key), None)


def short_names_of(long_name: str) -> tuple[str, ...]:
    """The short names AgentFlow also uses for ``long_name``."""
    return tuple(short for short, full in SHORT_NAMES.items() if full == long_name)


__all__ = [
    "AGENTFLOW_TOOLS",
    "GENERALIST",
    "GOOGLE_SEARCH",
    "PYTHON_CODER",
    "SHORT_NAMES",
    "WEB_RAG",
    "WIKIPEDIA_RAG",
    "agentflow_tool_key",
    "match_agentflow_tool",
    "short_names_of",
]
