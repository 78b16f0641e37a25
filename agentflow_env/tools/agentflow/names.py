"""AgentFlow's tool names: the long names its planner sees and the short names of its classes."""

from __future__ import annotations

GENERALIST = "Generalist_Solution_Generator_Tool"
PYTHON_CODER = "Python_Code_Generator_Tool"
WIKIPEDIA_RAG = "Wikipedia_RAG_Search_Tool"
GOOGLE_SEARCH = "Ground_Google_Search_Tool"

SHORT_NAMES: dict[str, str] = {
    "Base_Generator_Tool": GENERALIST,
    "Python_Coder_Tool": PYTHON_CODER,
    "Wikipedia_Search_Tool": WIKIPEDIA_RAG,
    "Google_Search_Tool": GOOGLE_SEARCH,
}
"""AgentFlow's short (class) name -> long (planner-facing) name of each tool."""

AGENTFLOW_TOOLS: tuple[str, ...] = (GENERALIST, PYTHON_CODER, GOOGLE_SEARCH, WIKIPEDIA_RAG)
"""The four tools in the order AgentFlow's training and test configs enable them."""


def short_names_of(long_name: str) -> tuple[str, ...]:
    """The short names AgentFlow also uses for ``long_name``."""
    return tuple(short for short, full in SHORT_NAMES.items() if full == long_name)


__all__ = [
    "AGENTFLOW_TOOLS",
    "GENERALIST",
    "GOOGLE_SEARCH",
    "PYTHON_CODER",
    "SHORT_NAMES",
    "WIKIPEDIA_RAG",
    "short_names_of",
]
