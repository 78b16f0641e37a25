"""Drawers: the tools of the probe tasks (``agentflow_env.tasks.probes``), one per colour.

A drawer takes no real argument: it shows what the episode's cabinet holds in it, the text of
every document of the task's corpus titled with the drawer's own name (``Red_Drawer``), or that
it is empty. So which drawer the planner names is its whole decision, and a probe can make
exactly one tool pay without the planner having to write a query.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentflow_env.tools.base import Tool, ToolArgumentError, ToolCard, ToolContext, ToolResult

DRAWER_COLOURS: tuple[str, ...] = ("Red", "Green", "Blue", "Yellow", "White", "Black")
"""The colours a drawer comes in; ``tools/__init__.py`` registers ``<Colour>_Drawer`` for each."""
_NAME = re.compile(r"([A-Za-z]+)_Drawer")


def drawer_name(colour: str) -> str:
    """The tool name of the drawer of ``colour``: ``Red_Drawer``."""
    return f"{colour.capitalize()}_Drawer"


def drawer_colour(entry: str | Mapping[str, Any] | Tool) -> str | None:
    """The colour of a ``tools`` setting entry that is a drawer (its registry name, a JSON
    object naming one, or a ``DrawerTool``), else ``None``."""
    if isinstance(entry, DrawerTool):
        return entry.colour
    name = entry.get("name") if isinstance(entry, Mapping) else entry
    match = _NAME.fullmatch(name) if isinstance(name, str) else None
    if match is None or match.group(1).capitalize() not in DRAWER_COLOURS:
        return None
    return match.group(1).capitalize()


class DrawerTool(Tool):
    """Opens the drawer of ``colour``: the cabinet's documents titled ``<Colour>_Drawer``."""

    def __init__(self, colour: str = "Red") -> None:
        if colour.capitalize() not in DRAWER_COLOURS:
            raise ValueError(f"colour must be one of {list(DRAWER_COLOURS)}, got {colour!r}")
        self.colour = colour.capitalize()
        self.card = ToolCard(
            name=drawer_name(self.colour),
            description=f"Opens the {self.colour.lower()} drawer of this task's cabinet and "
            "shows what it holds.",
            input_schema={
                "request": {
                    "type": "string",
                    "description": "what to look for (optional: the drawer shows all it holds)",
                    "required": False,
                },
            },
            output_type="the drawer's contents, or that it is empty",
            primary_argument="request",
            demo_commands=(
                {
                    "command": f"{drawer_name(self.colour)}()",
                    "description": "see what the drawer holds",
                },
            ),
        )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        try:
            self.validate(arguments)
        except ToolArgumentError as error:
            return ToolResult.failure(str(error))
        documents = context.corpus.documents if context.corpus is not None else ()
        held = [doc.text for doc in documents if doc.title == self.name]
        if not held:
            return ToolResult(ok=True, output=f"The {self.colour.lower()} drawer is empty.")
        return ToolResult(ok=True, output="\n".join(held))


__all__ = ["DRAWER_COLOURS", "DrawerTool", "drawer_colour", "drawer_name"]
