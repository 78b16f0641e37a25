"""The choices of mode-like settings (``Literal`` types), the default tool lists, and the
sections settings are grouped in."""

from __future__ import annotations

from typing import Literal

SearchKind = Literal["bridge", "comparison", "arithmetic"]
"""Question kinds of the synthetic world (``agentflow_env.tasks.synthetic.program.KINDS``)."""
CodeKind = Literal["make24", "fact_math", "compute"]
"""Task kinds of ``AgentFlow-Code-v0`` (``agentflow_env.tasks.code.KINDS``)."""
Split = Literal["train", "test"]
WorldSize = Literal["default", "small"]
ModuleBackend = Literal["rule", "llm"]
RewardName = Literal["exact_match", "f1", "llm_judge"]
PromptStyle = Literal["full", "compact", "agentflow"]
ObservationMode = Literal["structured", "flat"]

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
