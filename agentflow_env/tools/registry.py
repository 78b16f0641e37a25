"""A name -> factory registry of tools, and ``ToolSet``: the tools of one environment."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence

from agentflow_env.tools.base import Tool

_SEPARATORS = re.compile(r"[\s_\-]+")

_factories: dict[str, Callable[..., Tool]] = {}
_lock = threading.Lock()


def canonical_tool_name(name: str) -> str:
    """The key names are matched by: lowercase, no spaces/underscores/hyphens, no "Tool" suffix.

    "Base_Generator_Tool", "base generator" and "BaseGenerator" all map to "basegenerator".
    """
    key = _SEPARATORS.sub("", name).lower()
    if key.endswith("tool") and len(key) > len("tool"):
        key = key[: -len("tool")]
    return key


def register_tool(name: str, factory: Callable[..., Tool], *, overwrite: bool = False) -> None:
    """Make ``make_tool(name, **kwargs)`` call ``factory(**kwargs)``."""
    with _lock:
        clash = _find_registered(name)
        if clash is not None and not overwrite:
            raise ValueError(
                f"tool {name!r} is already registered (as {clash!r}); pass overwrite=True"
            )
        if clash is not None:
            del _factories[clash]
        _factories[name] = factory


def make_tool(name: str, **kwargs: object) -> Tool:
    """A new instance of the registered tool ``name`` (forgiving name matching)."""
    with _lock:
        registered = _find_registered(name)
        factory = _factories[registered] if registered is not None else None
    if factory is None:
        raise KeyError(f"unknown tool {name!r}; registered tools: {registered_tools()}")
    return factory(**kwargs)


def registered_tools() -> list[str]:
    """Registered tool names, sorted."""
    with _lock:
        return sorted(_factories)


def _find_registered(name: str) -> str | None:
    if name in _factories:
        return name
    key = canonical_tool_name(name)
    return next((known for known in _factories if canonical_tool_name(known) == key), None)


class ToolSet:
    """An immutable, ordered set of tools with forgiving lookup by name.

    Planners misspell tool names ("search_tool", "SEARCH"); ``get`` accepts any spelling with the
    same ``canonical_tool_name``. Two tools with the same canonical name are rejected.
    """

    def __init__(self, tools: Sequence[Tool]) -> None:
        self._tools: tuple[Tool, ...] = tuple(tools)
        self._by_key: dict[str, Tool] = {}
        for tool in self._tools:
            key = canonical_tool_name(tool.name)
            if key in self._by_key:
                raise ValueError(
                    f"duplicate tool name {tool.name!r} (clashes with {self._by_key[key].name!r})"
                )
            self._by_key[key] = tool

    def get(self, name: str) -> Tool | None:
        """The tool called ``name`` in any forgiving spelling, or ``None``."""
        return self._by_key.get(canonical_tool_name(name))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self._tools)

    def cards_text(self) -> str:
        """Every tool card rendered for the planner prompt, in order."""
        return "\n".join(tool.card.render() for tool in self._tools)

    def with_tool(self, tool: Tool) -> ToolSet:
        """A new set with ``tool`` added, replacing (in place) a tool of the same name."""
        key = canonical_tool_name(tool.name)
        if key not in self._by_key:
            return ToolSet((*self._tools, tool))
        return ToolSet([tool if canonical_tool_name(t.name) == key else t for t in self._tools])

    def without(self, name: str) -> ToolSet:
        """A new set without the tool called ``name``; ``KeyError`` if there is none."""
        removed = self.get(name)
        if removed is None:
            raise KeyError(f"no tool {name!r} in this set; tools: {list(self.names)}")
        return ToolSet([tool for tool in self._tools if tool is not removed])

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolSet({list(self.names)})"


__all__ = ["ToolSet", "canonical_tool_name", "make_tool", "register_tool", "registered_tools"]
