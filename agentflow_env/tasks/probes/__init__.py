"""Probe tasks: tiny RL sanity checks, each isolating one skill the planner must learn from
reward alone (like the probe environments of classic RL debugging).

- ``tool_choice``: one of several drawer tools holds the code; the question names it.
- ``stop``: the code is confirmed after a few openings and lost on one more; finish right then.
- ``delayed_credit``: only the first drawer opened counts; the reward comes at the last turn.
- ``copying``: the Search query must be the person's name, copied exactly from the question.

The env variants over them (``AgentFlow-Probe-*-v0``) are the probe configs of ``agentflow_env.envs.config``; their
random warm-start demonstrators are ``agentflow_env.rollout.agents.probes``.
"""

from __future__ import annotations

from agentflow_env.tasks.probes.common import SPLITS, Drawer, cabinet, read_code
from agentflow_env.tasks.probes.copying import COPYING, CopyingSource, ExactNameSolver
from agentflow_env.tasks.probes.drawers import (
    DELAYED_CREDIT,
    STOP,
    TOOL_CHOICE,
    CodeSolver,
    DelayedCreditSource,
    FirstCallSolver,
    ReadingsSolver,
    StopSource,
    ToolChoiceSource,
)

PROBES: tuple[str, ...] = (TOOL_CHOICE, STOP, DELAYED_CREDIT, COPYING)

__all__ = [
    "COPYING",
    "DELAYED_CREDIT",
    "PROBES",
    "SPLITS",
    "STOP",
    "TOOL_CHOICE",
    "CodeSolver",
    "CopyingSource",
    "DelayedCreditSource",
    "Drawer",
    "ExactNameSolver",
    "FirstCallSolver",
    "ReadingsSolver",
    "StopSource",
    "ToolChoiceSource",
    "cabinet",
    "read_code",
]
