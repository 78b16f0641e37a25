"""The probe variants (``AgentFlow-Probe-*-v0``): tiny RL sanity checks over the probe tasks of
``agentflow_env.tasks.probes``, each isolating one skill of the planner.

They are ordinary ``EnvConfig`` variants (the session, memory, rule modules and reward of every
other env) whose shared settings default to what a tiny planner needs: compact prompts, the
probe's own tools (drawers, or Search), its turn limit and, where the probe is about finishing
or about the last turn, ``termination="planner"``. Settings a probe cannot work with (too few
drawers, a termination that would end it early) are rejected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from agentflow_env.envs.config.choices import PromptStyle, Split
from agentflow_env.envs.config.fields import setting
from agentflow_env.envs.config.shared import EnvConfig, tools_setting
from agentflow_env.tasks.base import TaskSource
from agentflow_env.tasks.probes import (
    CopyingSource,
    DelayedCreditSource,
    Drawer,
    StopSource,
    ToolChoiceSource,
)
from agentflow_env.tools.base import Tool
from agentflow_env.tools.drawer import DRAWER_COLOURS, drawer_colour, drawer_name
from agentflow_env.workflow.outcome import Termination

DRAWER_TOOLS: tuple[str, ...] = tuple(drawer_name(colour) for colour in DRAWER_COLOURS[:4])
"""The tools of the tool-choice and delayed-credit probes: four drawers (chance is 1/4)."""


def _shared(name: str, default: Any) -> Any:
    """The shared setting ``name`` with another default (its help, section and checks kept)."""
    return dataclasses.field(
        default=default, metadata=EnvConfig.__dataclass_fields__[name].metadata
    )


@dataclass(frozen=True, kw_only=True)
class ProbeEnvConfig(EnvConfig):
    """What every probe has: compact prompts and a train/test split of generated tasks."""

    tasks_note: ClassVar[str] = "it generates its own probe tasks"
    probe: ClassVar[str] = ""

    prompt_style: PromptStyle = _shared("prompt_style", "compact")
    split: Split = setting("train", help="task split", section="tasks")

    def drawers(self) -> tuple[Drawer, ...]:
        """The drawers among the tools, in order (the others are decoys)."""
        colours = [drawer_colour(entry) for entry in self.tools]
        return tuple(Drawer(c, drawer_name(c)) for c in colours if c is not None)

    def _need(self, drawers: int, termination: Termination | None = None) -> None:
        found = len(self.drawers())
        if found < drawers:
            raise ValueError(
                f"the {self.probe} probe needs at least {drawers} drawer tool(s) among its tools "
                f"({', '.join(drawer_name(c) for c in DRAWER_COLOURS)}), got {found}"
            )
        if termination is not None and self.termination != termination:
            raise ValueError(
                f"the {self.probe} probe needs termination={termination!r} (its reward waits "
                f"for the planner), got {self.termination!r}"
            )
        if termination is not None and self.max_turns < 2:
            raise ValueError(f"the {self.probe} probe needs max_turns >= 2, got {self.max_turns}")


@dataclass(frozen=True, kw_only=True)
class ToolChoiceProbeConfig(ProbeEnvConfig):
    """``AgentFlow-Probe-ToolChoice-v0``: one turn; of the drawers among the tools, the one the
    question names holds the code (``ToolChoiceSource``)."""

    env_id: ClassVar[str] = "AgentFlow-Probe-ToolChoice-v0"
    probe: ClassVar[str] = "tool_choice"

    tools: Sequence[str | Mapping[str, Any] | Tool] = tools_setting(DRAWER_TOOLS)
    max_turns: int = _shared("max_turns", 1)

    def check(self) -> None:
        self._need(2)

    def make_task_source(self) -> TaskSource:
        return ToolChoiceSource(self.drawers(), self.split)


@dataclass(frozen=True, kw_only=True)
class StopProbeConfig(ProbeEnvConfig):
    """``AgentFlow-Probe-Stop-v0``: the first drawer's code is confirmed after 1 to
    ``max_turns - 1`` openings and lost on one more; the planner must finish right after it is
    confirmed (``StopSource``). An invalid action costs the whole reward (``lambda_errors``)."""

    env_id: ClassVar[str] = "AgentFlow-Probe-Stop-v0"
    probe: ClassVar[str] = "stop"

    tools: Sequence[str | Mapping[str, Any] | Tool] = tools_setting(DRAWER_TOOLS[:1])
    max_turns: int = _shared("max_turns", 3)
    termination: Termination = _shared("termination", "planner")
    # Once the code is confirmed, any turn that reads nothing keeps it, and at the turn limit
    # the generalist answers: without this cost a planner can stall with an invalid action
    # instead of finishing (a run did, for the last possible reading) and still be paid.
    lambda_errors: float = _shared("lambda_errors", 1.0)

    def check(self) -> None:
        self._need(1, "planner")

    def make_task_source(self) -> TaskSource:
        return StopSource(self.drawers(), self.max_turns - 1, self.split)


@dataclass(frozen=True, kw_only=True)
class DelayedCreditProbeConfig(ProbeEnvConfig):
    """``AgentFlow-Probe-DelayedCredit-v0``: the first drawer opened alone decides the answer,
    scored after the last turn (``DelayedCreditSource``)."""

    env_id: ClassVar[str] = "AgentFlow-Probe-DelayedCredit-v0"
    probe: ClassVar[str] = "delayed_credit"

    tools: Sequence[str | Mapping[str, Any] | Tool] = tools_setting(DRAWER_TOOLS)
    max_turns: int = _shared("max_turns", 3)
    termination: Termination = _shared("termination", "planner")

    def check(self) -> None:
        self._need(2, "planner")

    def make_task_source(self) -> TaskSource:
        return DelayedCreditSource(self.drawers(), self.split)


@dataclass(frozen=True, kw_only=True)
class CopyingProbeConfig(ProbeEnvConfig):
    """``AgentFlow-Probe-Copying-v0``: one Search turn whose query must be the name the
    question gives, exactly (``CopyingSource``)."""

    env_id: ClassVar[str] = "AgentFlow-Probe-Copying-v0"
    probe: ClassVar[str] = "copying"

    tools: Sequence[str | Mapping[str, Any] | Tool] = tools_setting(("Search",))
    max_turns: int = _shared("max_turns", 1)
    entities: int = setting(
        4, help="people in each task's cabinet (the question names one)", section="tasks", minimum=1
    )

    def make_task_source(self) -> TaskSource:
        return CopyingSource(self.entities, self.split)


PROBE_CONFIGS: tuple[type[ProbeEnvConfig], ...] = (
    ToolChoiceProbeConfig,
    StopProbeConfig,
    DelayedCreditProbeConfig,
    CopyingProbeConfig,
)
"""The probe variants, in the order the probes are listed."""

PROBE_ENV_IDS: dict[str, str] = {config.probe: config.env_id for config in PROBE_CONFIGS}
"""Probe name (``tool_choice``, ``stop``, ``delayed_credit``, ``copying``) -> its env id."""
