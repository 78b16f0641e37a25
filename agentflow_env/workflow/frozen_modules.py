"""The frozen modules around the planner, as the session calls them: four async protocols, the
records they return and the ``Modules`` bundle.

Each module gets the task and the memory and returns a small record. The backends implementing
these protocols live one layer up, in ``agentflow_env.modules``: ``rule`` (offline, deterministic,
reads evidence text) and ``llm`` (any OpenAI-compatible endpoint). A module that cannot produce a
usable output raises ``agentflow_env.base.errors.ModuleError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentflow_env.tasks.base import Task
from agentflow_env.tools.base import Tool
from agentflow_env.tools.registry import ToolSet
from agentflow_env.workflow.actions import PlannerAction
from agentflow_env.workflow.memory import Memory, QueryAnalysis


@dataclass(frozen=True)
class Verification:
    stop: bool
    rationale: str
    open_questions: tuple[str, ...] = ()
    raw: str = ""


@dataclass(frozen=True)
class FinalAnswer:
    answer: str | None
    text: str
    raw: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


class Initializer(Protocol):
    async def analyze(self, task: Task, tools: ToolSet) -> QueryAnalysis: ...


class Executor(Protocol):
    async def command(
        self, action: PlannerAction, tool: Tool, task: Task, memory: Memory
    ) -> dict[str, Any]:
        """Turn the planner's fields into arguments for ``tool`` (validated by the caller)."""
        ...


class Verifier(Protocol):
    async def verify(self, task: Task, memory: Memory) -> Verification: ...


class Generalist(Protocol):
    async def answer(self, task: Task, memory: Memory) -> FinalAnswer: ...


@dataclass(frozen=True)
class Modules:
    """The four frozen modules of one environment."""

    initializer: Initializer
    executor: Executor
    verifier: Verifier
    generalist: Generalist
