"""The choices of mode-like settings (``Literal`` types), the default tool lists, and the
sections settings are grouped in.

The choices of the session's settings are the workflow's own, named here too:
``PromptStyle``, ``ObservationMode``, ``RewardName``, ``RewardShaping`` and ``Termination``.
"""

from __future__ import annotations

from typing import Literal

from agentflow_env.workflow.observations import ObservationMode as ObservationMode
from agentflow_env.workflow.outcome import Termination as Termination
from agentflow_env.workflow.prompts import PromptStyle as PromptStyle
from agentflow_env.workflow.rewards import RewardName as RewardName
from agentflow_env.workflow.shaping import RewardShaping as RewardShaping

SearchKind = Literal["bridge", "comparison", "arithmetic"]
"""Question kinds of the synthetic world (``agentflow_env.tasks.synthetic.program.KINDS``)."""
CodeKind = Literal["make24", "fact_math", "compute"]
"""Task kinds of ``AgentFlow-Code-v0`` (``agentflow_env.tasks.code.KINDS``)."""
Split = Literal["train", "test"]
WorldSize = Literal["default", "small"]
ModuleBackend = Literal["rule", "llm"]

DEFAULT_TOOLS: tuple[str, ...] = ("Search", "Calculator")
CODE_TOOLS: tuple[str, ...] = ("Python", "Calculator", "Search")

SECTIONS: tuple[str, ...] = (
    "tasks",
    "dataset",
    "tools",
    "modules",
    "reward",
    "episode",
    "observations",
)
"""The sections fields are grouped in, in the order help texts list them."""
