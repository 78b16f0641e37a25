"""Tools the executor can call, the registry of tool factories, and ``ToolSet``.

Importing this package registers the built-in tools "Search" and "Calculator".
"""

from agentflow_env.tools.base import (
    Tool,
    ToolArgumentError,
    ToolCard,
    ToolContext,
    ToolResult,
)
from agentflow_env.tools.calculator import CalculatorError, CalculatorTool, evaluate_expression
from agentflow_env.tools.registry import (
    ToolSet,
    canonical_tool_name,
    make_tool,
    register_tool,
    registered_tools,
)
from agentflow_env.tools.search import SearchTool

register_tool("Search", SearchTool, overwrite=True)
register_tool("Calculator", CalculatorTool, overwrite=True)

__all__ = [
    "CalculatorError",
    "CalculatorTool",
    "SearchTool",
    "Tool",
    "ToolArgumentError",
    "ToolCard",
    "ToolContext",
    "ToolResult",
    "ToolSet",
    "canonical_tool_name",
    "evaluate_expression",
    "make_tool",
    "register_tool",
    "registered_tools",
]
