"""Broken configurations for the pre-flight check's tests, and a gym id that uses one.

Importing this module registers ``PreflightNeverStops-v0`` (an env whose verifier never says
STOP), so ``agentflow-env check --env preflight_envs:PreflightNeverStops-v0`` can name it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from agentflow_env.base.tokens import BundledTokenizer, load_default_tokenizer, render_chatml
from agentflow_env.envs.env import AgentFlowEnv
from agentflow_env.tools.base import Tool, ToolCard, ToolContext, ToolResult
from agentflow_env.tools.search import SearchTool
from agentflow_env.workflow.frozen_modules import Verification

NEVER_STOPS_ID = "PreflightNeverStops-v0"
SEARCH_DOWN = "the search backend is down"


class RaisingSearchTool(SearchTool):
    """The real Search tool's name and card, but every call raises."""

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        raise ConnectionError(SEARCH_DOWN)


class NeverStopVerifier:
    """A verifier that always wants more evidence."""

    async def verify(self, task: Any, memory: Any) -> Verification:
        return Verification(False, "more evidence is always needed")


class FirstLineTokenizer(BundledTokenizer):
    """The bundled tokenizer with a template that keeps only the first line of every assistant
    message but the last (as templates that strip past reasoning do): re-rendering a
    conversation gives other text than the one grown turn by turn."""

    def __init__(self) -> None:
        super().__init__(load_default_tokenizer().backend, name="first-line-template")

    def render_chat(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> str:
        last = len(messages) - 1
        shown = [
            {**m, "content": m["content"].split("\n")[0]}
            if m["role"] == "assistant" and index < last
            else m
            for index, m in enumerate(messages)
        ]
        return render_chatml(shown, add_generation_prompt)


class DroppingTokenizer(BundledTokenizer):
    """The bundled tokenizer with a template that leaves out every assistant message but the
    last one."""

    def __init__(self) -> None:
        super().__init__(load_default_tokenizer().backend, name="dropping-template")

    def render_chat(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True
    ) -> str:
        last = len(messages) - 1
        kept = [m for i, m in enumerate(messages) if m["role"] != "assistant" or i == last]
        return render_chatml(kept, add_generation_prompt)


class EchoTool(Tool):
    """A tool whose only argument is optional: it accepts empty arguments and never fails."""

    def __init__(self) -> None:
        self.card = ToolCard(
            name="Echo",
            description="Repeats its text.",
            input_schema={"text": {"type": "string", "required": False}},
            output_type="the text",
            primary_argument="text",
        )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult(ok=True, output=str(arguments.get("text", "")) or "(nothing)")


class RaisingInitializer:
    """An initializer that always raises."""

    async def analyze(self, task: Any, tools: Any) -> Any:
        raise RuntimeError("the initializer is broken")


class RaisingVerifier:
    """A verifier that always raises."""

    async def verify(self, task: Any, memory: Any) -> Verification:
        raise RuntimeError("the verifier is broken")


def never_stopping_env(**settings: Any) -> AgentFlowEnv:
    return AgentFlowEnv(modules={"verifier": NeverStopVerifier()}, **settings)


if NEVER_STOPS_ID not in gym.registry:
    gym.register(id=NEVER_STOPS_ID, entry_point=never_stopping_env)
