"""A name -> factory registry of tools, and ``ToolSet``: the tools of one environment."""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable, Iterator, Sequence

from agentflow_env.tools.base import Tool

_SEPARATORS = re.compile(r"[\s_\-]+")

_factories: dict[str, Callable[..., Tool]] = {}
_lock = threading.Lock()


@functools.lru_cache(maxsize=1024)  # bounded: names come from the planner's text too
def canonical_tool_name(name: str) -> str:
    """The key names are matched by: lowercase, no spaces/underscores/hyphens, no "Tool" suffix.

    "Base_Generator_Tool", "base generator" and "BaseGenerator" all map to "basegenerator".
    Cached: the same few names are looked up several times a turn (tool lookup, diagnostics).
    """
    key = _SEPARATORS.sub("", name).lower()
    if key.endswith("tool") and len(key) > len("tool"):
        key = key[: -len("tool")]
    return key


def register_tool(name: str, factory: Callable[..., Tool], *, overwrite: bool = False) -> None:
    """Make ``make_tool(name, **kwargs)`` call ``factory(**kwargs)``.

    The factory's ``aliases`` attribute (a ``Tool`` subclass's class attribute) names further
    spellings ``make_tool`` accepts. A registered name wins over another factory's alias, so a
    tool registered under an alias of a built-in one shadows it; an alias clashing with another
    registered name or alias is refused unless ``overwrite``.
    """
    with _lock:
        clash = _find_registered(name, with_aliases=False)
        if clash is not None and not overwrite:
            raise ValueError(
                f"tool {name!r} is already registered (as {clash!r}); pass overwrite=True"
            )
        if clash is not None:
            del _factories[clash]
        for alias in _aliases_of(factory):
            owner = _find_registered(alias)
            if owner is not None and owner != name and not overwrite:
                raise ValueError(
                    f"alias {alias!r} of tool {name!r} clashes with the registered tool "
                    f"{owner!r}; pass overwrite=True"
                )
        _factories[name] = factory


def make_tool(name: str, **kwargs: object) -> Tool:
    """A new instance of the registered tool ``name`` (forgiving name matching, aliases too)."""
    return tool_factory(name)(**kwargs)


def tool_factory(name: str) -> Callable[..., Tool]:
    """The factory registered as ``name`` or under an alias; ``KeyError`` if there is none."""
    with _lock:
        registered = _find_registered(name)
        factory = _factories[registered] if registered is not None else None
    if factory is None:
        raise KeyError(f"unknown tool {name!r}; registered tools: {registered_tools()}")
    return factory


def registered_tools() -> list[str]:
    """Registered tool names (not their aliases), sorted."""
    with _lock:
        return sorted(_factories)


def _aliases_of(factory: Callable[..., Tool]) -> tuple[str, ...]:
    aliases = getattr(factory, "aliases", ())
    return tuple(alias for alias in aliases if isinstance(alias, str))


def _find_registered(name: str, *, with_aliases: bool = True) -> str | None:
    if name in _factories:
        return name
    key = canonical_tool_name(name)
    found = next((known for known in _factories if canonical_tool_name(known) == key), None)
    if found is not None or not with_aliases:
        return found
    return next(
        (
            known
            for known, factory in _factories.items()
            if any(canonical_tool_name(alias) == key for alias in _aliases_of(factory))
        ),
        None,
    )


class ToolSet:
    """An immutable, ordered set of tools with forgiving lookup by name.

    Planners misspell tool names ("search_tool", "SEARCH"); ``get`` accepts any spelling with the
    same ``canonical_tool_name`` as a tool's name or one of its ``aliases``. Two tools whose
    names or aliases share a canonical name are rejected.
    """

    def __init__(self, tools: Sequence[Tool]) -> None:
        self._tools: tuple[Tool, ...] = tuple(tools)
        self._by_key: dict[str, Tool] = {}
        for tool in self._tools:
            for label in (tool.name, *tool.aliases):
                key = canonical_tool_name(label)
                known = self._by_key.get(key)
                if known is tool:
                    continue
                if known is not None:
                    raise ValueError(
                        f"duplicate tool name {label!r} of {tool.name!r} (clashes with "
                        f"{known.name!r})"
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
        """A new set with ``tool`` added, replacing (in place) the tool its name resolves to."""
        replaced = self.get(tool.name)
        if replaced is None:
            return ToolSet((*self._tools, tool))
        return ToolSet([tool if t is replaced else t for t in self._tools])

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


__all__ = [
    "ToolSet",
    "canonical_tool_name",
    "make_tool",
    "register_tool",
    "registered_tools",
    "tool_factory",
]
