"""What the AgentFlow tools ask of a language model, and the base class of the tools using one.

The tools layer sits below ``agentflow_env.llm``, so a tool never builds its model: it is given
one (``llm=``), anything with an async ``chat(messages)`` whose reply has a ``.text``, which is
what ``agentflow_env.llm.as_backend(endpoint)`` returns. ``build_tool`` (the envs layer) gives a
tool class with ``requires_llm`` the endpoint of the ``AGENTFLOW_TOOLS_*`` (else
``AGENTFLOW_LLM_*``) environment variables, or the one its JSON object names under ``"llm"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from agentflow_env.tools.base import Tool, ToolResult

TOOLS_LLM_ROLE = "tools"
"""The role whose variables configure the tools' model: ``AGENTFLOW_TOOLS_BASE_URL`` & co."""

DEFAULT_LLM_TIMEOUT_S = 120.0
"""A model call's own limit: AgentFlow's executor gives a tool call 120 s. The env's
``tool_timeout_s`` (10 s unless a preset raises it) caps it further."""


class ChatReply(Protocol):
    """A model's reply; ``agentflow_env.llm.ChatResult`` is one."""

    @property
    def text(self) -> str: ...


class ChatModel(Protocol):
    """A chat model a tool may call; ``agentflow_env.llm.ChatBackend`` objects are ones."""

    async def chat(self, messages: Sequence[Mapping[str, str]]) -> ChatReply: ...


class ModelCallError(RuntimeError):
    """No model is configured, or its call failed; ``result()`` is the recorded failure."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind

    def result(self, **metadata: Any) -> ToolResult:
        return ToolResult.failure(str(self), kind=self.kind, **metadata)


def no_model_hint(tool_name: str) -> str:
    """How to give ``tool_name`` a model, for the error of a call made without one."""
    return (
        f"{tool_name} has no language model configured: set AGENTFLOW_TOOLS_BASE_URL and "
        "AGENTFLOW_TOOLS_MODEL (or AGENTFLOW_LLM_BASE_URL and AGENTFLOW_LLM_MODEL) before the "
        f'env is built, or pass the tool as {{"name": "{tool_name}", "llm": {{"base_url": ..., '
        '"model": ...}}'
    )


class LLMTool(Tool):
    """A tool that calls a chat model. Without one, ``ask`` fails with ``no_model_hint``.

    ``timeout_s`` bounds the whole call; the env's ``tool_timeout_s`` caps it further, so raise
    that setting for slow models.
    """

    requires_llm: ClassVar[bool] = True
    """``build_tool`` gives the tool the configured model when none is passed."""

    def __init__(self, llm: ChatModel | None = None, timeout_s: float = DEFAULT_LLM_TIMEOUT_S):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.llm = llm
        self.timeout_s = timeout_s

    async def ask(self, system: str, user: str) -> str:
        """The model's reply to ``user`` under ``system``; ``ModelCallError`` when there is no
        model, the call fails, or the reply is empty."""
        if self.llm is None:
            raise ModelCallError(no_model_hint(self.name), kind="config")
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        try:
            reply = await self.llm.chat(messages)
        except Exception as error:  # the model's failure is this call's observation
            raise ModelCallError(
                f"{self.name}: the model call failed: {type(error).__name__}: {error}", kind="llm"
            ) from error
        text = getattr(reply, "text", None)
        if not isinstance(text, str) or not text.strip():
            raise ModelCallError(f"{self.name}: the model returned an empty reply", kind="llm")
        return text.strip()


__all__ = [
    "DEFAULT_LLM_TIMEOUT_S",
    "TOOLS_LLM_ROLE",
    "ChatModel",
    "ChatReply",
    "LLMTool",
    "ModelCallError",
    "no_model_hint",
]
