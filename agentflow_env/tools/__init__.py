"""Tools the executor can call, the registry of tool factories, and ``ToolSet``.

Importing this package registers the built-in tools "Search", "Calculator" and "Python",
AgentFlow's tools under their long names (``AGENTFLOW_TOOLS``; their short names are aliases),
and the probe tasks' drawers (``Red_Drawer``, ... ``agentflow_env.tools.drawer``).
"""

import functools

from agentflow_env.tools.agentflow import AGENTFLOW_TOOL_CLASSES, AGENTFLOW_TOOLS
from agentflow_env.tools.base import (
    Tool,
    ToolArgumentError,
    ToolCard,
    ToolContext,
    ToolResult,
)
from agentflow_env.tools.calculator import CalculatorError, CalculatorTool, evaluate_expression
from agentflow_env.tools.drawer import DRAWER_COLOURS, DrawerTool, drawer_colour, drawer_name
from agentflow_env.tools.python_tool import PythonTool
from agentflow_env.tools.registry import (
    ToolSet,
    canonical_tool_name,
    make_tool,
    register_tool,
    registered_tools,
    tool_factory,
)
from agentflow_env.tools.sandbox import SandboxLimits, run_python
from agentflow_env.tools.search import SearchTool

register_tool("Search", SearchTool, overwrite=True)
register_tool("Calculator", CalculatorTool, overwrite=True)
register_tool("Python", PythonTool, overwrite=True)
for _name, _tool_class in AGENTFLOW_TOOL_CLASSES.items():
    register_tool(_name, _tool_class, overwrite=True)
for _colour in DRAWER_COLOURS:
    register_tool(drawer_name(_colour), functools.partial(DrawerTool, _colour), overwrite=True)

__all__ = [
    "AGENTFLOW_TOOLS",
    "CalculatorError",
    "CalculatorTool",
    "DRAWER_COLOURS",
    "DrawerTool",
    "PythonTool",
    "SandboxLimits",
    "SearchTool",
    "Tool",
    "ToolArgumentError",
    "ToolCard",
    "ToolContext",
    "ToolResult",
    "ToolSet",
    "canonical_tool_name",
    "drawer_colour",
    "drawer_name",
    "evaluate_expression",
    "make_tool",
    "register_tool",
    "registered_tools",
    "run_python",
    "tool_factory",
]
