"""How an episode ended: the reason, the running metrics and the final outcome record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, get_args

Termination = Literal["verifier", "planner", "both"]
"""Who may end an episode before its limits: the verifier's STOP (``"verifier"``, AgentFlow's
way), the planner's finish action (``"planner"``: the verifier's verdict is shown, not binding),
or either (``"both"``)."""
TERMINATIONS: tuple[str, ...] = get_args(Termination)


def check_termination(termination: str) -> None:
    """Raise ``ValueError`` unless ``termination`` is one of ``TERMINATIONS``."""
    if termination not in TERMINATIONS:
        raise ValueError(f"termination must be one of {list(TERMINATIONS)}, got {termination!r}")


def planner_may_finish(termination: str) -> bool:
    """Whether the planner's finish action ends the episode (else it names an unknown tool)."""
    return termination in ("planner", "both")


def verifier_may_stop(termination: str) -> bool:
    """Whether the verifier's STOP ends the episode (else it is only shown to the planner)."""
    return termination in ("verifier", "both")


class EndReason(str, Enum):
    """Why an episode ended; ``info["end_reason"]`` holds its string.

    A ``str`` enum: a reason compares equal to its string (``reason == "max_turns"``), formats
    as it and serialises to JSON as it.
    """

    VERIFIER_STOP = "verifier_stop"
    """The verifier said STOP (the episode terminates; so does a planner stop; every other
    reason truncates it)."""
    PLANNER_STOP = "planner_stop"
    """The planner's finish action ended the episode (``termination="planner"`` or ``"both"``)."""
    MAX_TURNS = "max_turns"
    """The planner used its last turn."""
    MODULE_ERROR = "module_error"
    """A frozen module (executor, verifier) failed after its own retries."""
    PROMPT_BUDGET = "prompt_budget"
    """The next prompt is longer than ``max_prompt_tokens``, or than the planner's served model
    takes (its server refused it: ``Session.end``)."""
    TOTAL_BUDGET = "total_budget"
    """The grown conversation is longer than ``max_total_tokens`` (flat observations)."""
    TIME_LIMIT = "time_limit"
    """The episode ran longer than ``time_limit_s`` (wall clock, from its start)."""

    def __str__(self) -> str:
        return str(self.value)

    @property
    def truncates(self) -> bool:
        """Whether an episode ending this way is truncated (rather than terminated)."""
        return self not in (EndReason.VERIFIER_STOP, EndReason.PLANNER_STOP)


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
