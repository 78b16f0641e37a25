"""AgentFlow's tool set under AgentFlow's names, as tools of this env.

``AGENTFLOW_TOOLS`` lists the four long names in the order AgentFlow's configs enable them; each
tool also answers to AgentFlow's short name (``SHORT_NAMES``) in a ``ToolSet`` and in
``make_tool``. The model-backed ones take an injected ``ChatModel`` (``llm=``); see
``agentflow_env.tools.agentflow.model``.
"""

from agentflow_env.tools.agentflow.generalist import GeneralistSolutionGeneratorTool
from agentflow_env.tools.agentflow.google_search import GroundGoogleSearchTool
from agentflow_env.tools.agentflow.model import (
    TOOLS_LLM_ROLE,
    ChatModel,
    ChatReply,
    LLMTool,
    no_model_hint,
)
from agentflow_env.tools.agentflow.names import (
    AGENTFLOW_TOOLS,
    GENERALIST,
    GOOGLE_SEARCH,
    PYTHON_CODER,
    SHORT_NAMES,
    WIKIPEDIA_RAG,
)
from agentflow_env.tools.agentflow.python_coder import PythonCodeGeneratorTool
from agentflow_env.tools.agentflow.web_search import (
    SEARCH_API_KEY_ENV_VAR,
    SEARCH_API_URL_ENV_VAR,
    SerperClient,
    WebSearchError,
)
from agentflow_env.tools.agentflow.wikipedia_rag import WikipediaRAGSearchTool
from agentflow_env.tools.base import Tool

AGENTFLOW_TOOL_CLASSES: dict[str, type[Tool]] = {
    GENERALIST: GeneralistSolutionGeneratorTool,
    PYTHON_CODER: PythonCodeGeneratorTool,
    GOOGLE_SEARCH: GroundGoogleSearchTool,
    WIKIPEDIA_RAG: WikipediaRAGSearchTool,
}
"""Each long name -> its tool class (the registry's factories, in ``AGENTFLOW_TOOLS`` order)."""

__all__ = [
    "AGENTFLOW_TOOLS",
    "AGENTFLOW_TOOL_CLASSES",
    "GENERALIST",
    "GOOGLE_SEARCH",
    "PYTHON_CODER",
    "SEARCH_API_KEY_ENV_VAR",
    "SEARCH_API_URL_ENV_VAR",
    "SHORT_NAMES",
    "TOOLS_LLM_ROLE",
    "WIKIPEDIA_RAG",
    "ChatModel",
    "ChatReply",
    "GeneralistSolutionGeneratorTool",
    "GroundGoogleSearchTool",
    "LLMTool",
    "PythonCodeGeneratorTool",
    "SerperClient",
    "WebSearchError",
    "WikipediaRAGSearchTool",
    "no_model_hint",
]
