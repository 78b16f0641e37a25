"""LLM backends: an async OpenAI-compatible client, prompts, the judge, an optional vLLM engine.

Imported only when an LLM backend is asked for; needs ``aiohttp`` (the ``llm`` extra).
"""

from __future__ import annotations

from agentflow_env.llm.client import (
    ChatBackend,
    ChatClient,
    ChatResult,
    LLMEndpoint,
    LLMError,
    as_backend,
    close_clients,
    get_client,
)
from agentflow_env.llm.judge import LLMJudge

__all__ = [
    "ChatBackend",
    "ChatClient",
    "ChatResult",
    "LLMEndpoint",
    "LLMError",
    "LLMJudge",
    "as_backend",
    "close_clients",
    "get_client",
]
