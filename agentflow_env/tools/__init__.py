"""Tools the executor can call, the registry of tool factories, and ``ToolSet``.

Importing this package registers the built-in tools "Search", "Calculator" and "Python".
"""

from agentflow_env.tools.base import (
    Tool,
    ToolArgumentError,
    ToolCard,
    ToolContext,
    ToolResult,
)
from agentflow_env.tools.calculator import CalculatorError, CalculatorTool, evaluate_expression
from agentflow_env.tools.python_tool import PythonTool
from agentflow_env.tools.registry import (
    ToolSet,
    canonical_tool_name,
    make_tool,
    register_tool,
    registered_tools,
)
from agentflow_env.tools.sandbox import SandboxLimits, run_python
from agentflow_env.tools.search import SearchTool

register_tool("Search", SearchTool, overwrite=True)
register_tool("Calculator", CalculatorTool, overwrite=True)
register_tool("Python", PythonTool, overwrite=True)

__all__ = [
    "CalculatorError",
    "CalculatorTool",
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
    "evaluate_expression",
    "make_tool",
    "register_tool",
    "registered_tools",
    "run_python",
]
