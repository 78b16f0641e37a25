"""``EpisodeState``: everything one episode changes as it runs; ``EpisodeDeps``: what it runs with.

The session's phases (``turn``, ``ending``, ``telemetry``) are functions of these two. A fork of
an episode is ``EpisodeState.fork``, correct by construction: every field gets a value of its
own (``fork_value``: its ``fork()``, or a shallow copy), so a field added later is separated
without a hand edit. A field whose value nothing changes in place may be declared ``shared()``,
and a fork then holds the same object.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agentflow_env.tasks.base import Task
from agentflow_env.tools.base import ToolContext
from agentflow_env.tools.registry import ToolSet
from agentflow_env.tools.texts import AgentFlowToolTexts
from agentflow_env.workflow.actions import PlannerAction
from agentflow_env.workflow.config import SessionConfig
from agentflow_env.workflow.end_policy import EndPolicy
from agentflow_env.workflow.frozen_modules import Modules
from agentflow_env.workflow.memory import Memory
from agentflow_env.workflow.observations import Observation
from agentflow_env.workflow.outcome import EpisodeMetrics, EpisodeOutcome
from agentflow_env.workflow.prompts import style_rules
from agentflow_env.workflow.shaping import PotentialTracker, make_shaping
from agentflow_env.workflow.trajectory import TurnRecord

__all__ = ["SHARED", "EpisodeDeps", "EpisodeState", "fork_value", "shared", "tool_context"]

SHARED = "fork_shares"
"""The field metadata key that ``shared()`` sets."""

_S = TypeVar("_S", bound="EpisodeState")


def shared(default: Any = None) -> Any:
    """A field a fork shares: its value is immutable, or nothing changes it in place once made."""
    return field(default=default, metadata={SHARED: True})


def fork_value(value: Any) -> Any:
    """``value`` for a forked episode: ``value.fork()`` where it has one (taking no arguments),
    else a shallow copy: a new list, dict or set of the same items, a new object with the same
    attributes; an immutable value (a number, a string, ``None``) comes back as it is."""
    fork = getattr(value, "fork", None)
    return fork() if callable(fork) else copy.copy(value)


@dataclass(frozen=True)
class EpisodeDeps:
    """What an episode runs with: never changed by it, shared by its forks."""

    task: Task
    tools: ToolSet
    modules: Modules
    config: SessionConfig
    end: EndPolicy


@dataclass
class EpisodeState:
    """The state of one episode, all of it: what ``Session.step`` changes lives here.

    The items of its lists (turn records, memory entries and events) are frozen records, shared by
    a fork; keep them so. Every field must be an ``__init__`` field (``fork`` rebuilds the state
    through it).
    """

    memory: Memory
    tool_context: ToolContext
    """The tools' view of the episode; a fork's copy keeps its ``episode_key`` (the per-episode
    random state tools draw from without a seed)."""
    shaping: PotentialTracker
    metrics: EpisodeMetrics = field(default_factory=EpisodeMetrics)
    started_at: float = field(default_factory=time.monotonic)
    """When the episode started (``time.monotonic``); a fork keeps its original's clock."""
    done: bool = False
    outcome: EpisodeOutcome | None = shared()
    """How the episode ended; ``None`` until it has."""
    observation: Observation | None = shared()
    """The planner's current prompt (``None`` before the start)."""
    initial_observation: Observation | None = shared()
    start: asyncio.Future[tuple[Observation, dict[str, Any]]] | None = shared()
    """The start's result, once a start began: a second ``Session.start`` (concurrent or later)
    waits for it instead of starting the episode again."""
    finish_action: PlannerAction | None = shared()
    """The planner's finish action, once it gave one (the episode's last turn)."""
    initializer_error: str | None = None
    turn_records: list[TurnRecord] = field(default_factory=list)
    module_errors: list[str] = field(default_factory=list)
    service_errors: list[str] = field(default_factory=list)
    turn_latency: dict[str, float] = field(default_factory=dict)
    """Seconds this turn spent in each frozen module and in the tool."""

    @classmethod
    def new(
        cls, task: Task, tools: ToolSet, config: SessionConfig, seed: int | None
    ) -> EpisodeState:
        """The state of a new episode of ``task`` (the tools' context draws its ``episode_key``)."""
        reward = config.reward
        return cls(
            memory=Memory(task.question, tools),
            tool_context=tool_context(task, config, seed),
            shaping=PotentialTracker(make_shaping(reward.reward_shaping, reward.shaping_weight)),
        )

    @property
    def turn(self) -> int:
        """Number of planner turns taken so far."""
        return len(self.memory)

    def fork(self: _S) -> _S:
        """An independent copy: a field declared ``shared()`` holds the same object, every other
        field its ``fork_value``."""
        values: dict[str, Any] = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            values[item.name] = value if item.metadata.get(SHARED) else fork_value(value)
        return dataclasses.replace(self, **values)


def tool_context(task: Task, config: SessionConfig, seed: int | None) -> ToolContext:
    """What the tools of an episode of ``task`` are told. Under one of AgentFlow's scripts
    (``agentflow_script``, the presets) results are cut by its rule, and with AgentFlow's
    wording its tools' own strings come along as plain values (``AgentFlowToolTexts``)."""
    shapes = style_rules(config.prompt_style).agentflow_shapes
    scripted = config.agentflow_script is not None
    pack = config.agentflow_wording
    return ToolContext(
        corpus=task.corpus,
        seed=seed,
        agentflow_shapes=shapes,
        agentflow_wikipedia=config.agentflow_wikipedia if shapes else None,
        agentflow_texts=pack.tool_texts if shapes and scripted and pack else AgentFlowToolTexts(),
        agentflow_cut=scripted,
    )
