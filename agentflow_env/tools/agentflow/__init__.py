"""AgentFlow's tool set under AgentFlow's names, as tools of this env.

``AGENTFLOW_TOOLS`` lists the five long names in the order AgentFlow's planner is shown them;
each tool also answers to AgentFlow's short name (``SHORT_NAMES``) in a ``ToolSet`` and in
``make_tool`` (not in an episode in AgentFlow's format, which matches names as AgentFlow does:
``match_agentflow_tool``). The model-backed ones take an injected ``ChatModel`` (``llm=``); see
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
    WEB_RAG,
    WIKIPEDIA_RAG,
    match_agentflow_tool,
)
from agentflow_env.tools.agentflow.pages import WEB_FETCH_ENV_VAR
from agentflow_env.tools.agentflow.python_coder import PythonCodeGeneratorTool
from agentflow_env.tools.agentflow.web_rag import WebRAGSearchTool
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
    GOOGLE_SEARCH: GroundGoogleSearchTool,
    PYTHON_CODER: PythonCodeGeneratorTool,
    WEB_RAG: WebRAGSearchTool,
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
    "WEB_FETCH_ENV_VAR",
    "WEB_RAG",
    "WIKIPEDIA_RAG",
    "ChatModel",
    "ChatReply",
    "GeneralistSolutionGeneratorTool",
    "GroundGoogleSearchTool",
    "LLMTool",
    "PythonCodeGeneratorTool",
    "SerperClient",
    "WebRAGSearchTool",
    "WebSearchError",
    "WikipediaRAGSearchTool",
    "match_agentflow_tool",
    "no_model_hint",
]
