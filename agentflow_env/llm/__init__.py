"""LLM backends: an async OpenAI-compatible client, the judge and its prompt, an optional vLLM
engine (``agentflow_env.llm.vllm_engine``, imported on demand).

Uses only ``agentflow_env.base`` (the ``llm-on-base`` contract in ``pyproject.toml``). Calling a model uses ``aiohttp``
(a core dependency), imported when the first client is made. The prompts of the LLM-backed frozen modules live with
those modules, in ``agentflow_env.modules.prompts``.
"""

from __future__ import annotations

from agentflow_env.llm.client import (
    ChatBackend,
    ChatClient,
    ChatResult,
    ContextLengthError,
    LLMEndpoint,
    LLMError,
    as_backend,
    close_clients,
    get_client,
    require_aiohttp,
)
from agentflow_env.llm.judge import LLMJudge

__all__ = [
    "ChatBackend",
    "ChatClient",
    "ChatResult",
    "ContextLengthError",
    "LLMEndpoint",
    "LLMError",
    "LLMJudge",
    "as_backend",
    "close_clients",
    "get_client",
    "require_aiohttp",
]
