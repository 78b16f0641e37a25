"""How an episode ended: the reason, the running metrics and the final outcome record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class EndReason(str, Enum):
    """Why an episode ended; ``info["end_reason"]`` holds its string.

    A ``str`` enum: a reason compares equal to its string (``reason == "max_turns"``), formats
    as it and serialises to JSON as it.
    """

    VERIFIER_STOP = "verifier_stop"
    """The verifier said STOP (the episode terminates; every other reason truncates it)."""
    MAX_TURNS = "max_turns"
    """The planner used its last turn."""
    MODULE_ERROR = "module_error"
    """A frozen module (executor, verifier) failed after its own retries."""
    PROMPT_BUDGET = "prompt_budget"
    """The next prompt is longer than ``max_prompt_tokens``."""
    TOTAL_BUDGET = "total_budget"
    """The grown conversation is longer than ``max_total_tokens`` (flat observations)."""
    TIME_LIMIT = "time_limit"
    """The episode ran longer than ``time_limit_s`` (wall clock, from its start)."""

    def __str__(self) -> str:
        return str(self.value)

    @property
    def truncates(self) -> bool:
        """Whether an episode ending this way is truncated (rather than terminated)."""
        return self is not EndReason.VERIFIER_STOP


@dataclass
class EpisodeMetrics:
    """Counts kept while the episode runs; ``info["metrics"]`` is ``as_dict()`` at the end."""

    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    invalid_actions: int = 0
    action_tokens: int = 0
    tool_latency_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class EpisodeOutcome:
    """The end of an episode: the answer, how it scored and why the episode ended."""

    answer: str | None
    final_text: str
    gold_answers: tuple[str, ...]
    success: bool
    score: float
    reward: float
    end_reason: EndReason
    module_errors: tuple[str, ...]
    metrics: Mapping[str, float]
    diagnostics: Mapping[str, Any] = field(default_factory=dict)
    """The planner diagnostics (``agentflow_env.workflow.diagnostics``)."""

    def as_info(self) -> dict[str, Any]:
        """The end-of-episode keys of the final ``info``, as plain data (JSON-ready)."""
        return {
            "answer": self.answer,
            "final_text": self.final_text,
            "gold_answers": list(self.gold_answers),
            "success": self.success,
            "score": self.score,
            "end_reason": self.end_reason.value,
            "reward": self.reward,
            "module_errors": list(self.module_errors),
            "metrics": dict(self.metrics),
            "diagnostics": dict(self.diagnostics),
        }
