"""What AgentFlow's own tools say, as plain values a tool is handed (``ToolContext``), and the
rule by which AgentFlow's scripts cut long tool results.

The strings are read from the user's AgentFlow checkout by the prompt-pack reader (the
workflow's ``agentflow_source``) and reach the tools only as these values: a tool never reads a
checkout itself. A field left ``None`` keeps this project's own text.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

AgentFlowWikipedia = Literal["as_run", "as_intended"]
"""Which result AgentFlow's Wikipedia tool gives (``ToolContext.agentflow_wikipedia``):
``"as_run"``, the one its published code returns (no page picked: its page reader cannot be
built, so every page lands among the others), or ``"as_intended"``, the picked pages answered."""
AGENTFLOW_WIKIPEDIA_MODES: tuple[str, ...] = get_args(AgentFlowWikipedia)

QUERY_FIELD = "{query}"
"""Where ``AgentFlowToolTexts.wikipedia_no_results`` takes the query."""
COUNT_FIELD = "{count}"
"""Where ``AgentFlowToolTexts.python_omitted`` takes the number of variables left out."""


@dataclass(frozen=True)
class AgentFlowToolTexts:
    """AgentFlow's tools' own strings (each ``None``: this project's)."""

    wikipedia_abstract_end: str | None = None
    """Appended to a page's abstract when its text was cut."""
    wikipedia_no_results: str | None = None
    """The error of a search that found no page; ``{query}`` marks the query."""
    python_middle_cut: str | None = None
    """Put in place of the middle of long printed output or a long variable's text."""
    python_omitted: str | None = None
    """The ``__truncated__`` entry of the variables; ``{count}`` marks how many were left out."""
    python_no_code: str | None = None
    """The error when the model's reply holds no Python code block."""
    python_timeout: str | None = None
    """The error when the program ran out of time."""

    @property
    def given(self) -> bool:
        """Whether these are AgentFlow's words (read from a checkout), not this project's."""
        return any(getattr(self, item.name) is not None for item in fields(self))


def fill(template: str, field: str, value: object) -> str:
    """``template`` with ``field`` (``QUERY_FIELD``, ``COUNT_FIELD``) replaced by ``value``."""
    return template.replace(field, str(value))


AGENTFLOW_CUT_MARK = "..."
"""What AgentFlow's scripts end a cut string with (the cut keeps ``limit - 3`` characters)."""


def agentflow_cut(value: Any, limit: int) -> Any:
    """``value`` cut as AgentFlow's scripts cut a tool's result before keeping it in memory:
    every string longer than ``limit`` (dict keys included, inside lists and dicts) keeps its
    first ``limit - 3`` characters and ends with three dots; a number whose text is that long
    becomes that cut text; an object becomes its attributes' dict, anything else its text."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        text = str(value)
        return _cut(text, limit) if len(text) > limit else value
    if isinstance(value, str):
        return _cut(value, limit)
    if isinstance(value, dict):
        return {agentflow_cut(k, limit): agentflow_cut(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [agentflow_cut(item, limit) for item in value]
    if hasattr(value, "__dict__"):
        return agentflow_cut(vars(value), limit)
    return _cut(str(value), limit)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + AGENTFLOW_CUT_MARK


__all__ = [
    "AGENTFLOW_CUT_MARK",
    "AGENTFLOW_WIKIPEDIA_MODES",
    "COUNT_FIELD",
    "QUERY_FIELD",
    "AgentFlowToolTexts",
    "AgentFlowWikipedia",
    "agentflow_cut",
    "fill",
]
