"""The terminal reward: answer score minus optional costs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentflow_env.tasks.scoring import exact_match, extract_tagged_answer, f1_score
from agentflow_env.workflow.shaping import REWARD_SHAPINGS

SCORERS = {"exact_match": exact_match, "f1": f1_score}


@dataclass(frozen=True)
class RewardConfig:
    """``reward`` names the answer score; the lambdas weigh costs subtracted from it.

    ``shaping="progress"`` adds per-turn potential-based rewards ``shaping_weight * (Phi(s') -
    Phi(s))`` (``agentflow_env.workflow.shaping``) to the step rewards; the terminal reward
    (the outcome's ``reward``) is the same with or without them.
    """

    reward: str = "exact_match"
    lambda_calls: float = 0.0
    lambda_tokens: float = 0.0
    lambda_errors: float = 0.0
    shaping: str = "none"
    shaping_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.shaping not in REWARD_SHAPINGS:
            raise ValueError(
                f"unknown reward shaping {self.shaping!r}; choose one of {list(REWARD_SHAPINGS)}"
            )
        if self.reward not in (*SCORERS, "llm_judge"):
            raise ValueError(
                f"unknown reward {self.reward!r}; choose one of {[*sorted(SCORERS), 'llm_judge']}"
            )


def scored_answer(answer: str | None) -> str | None:
    """The part of a final answer that is scored: the last ``<answer>...</answer>`` content when
    the answer holds tags (``extract_tagged_answer``), else the whole answer."""
    tagged = extract_tagged_answer(answer)
    return answer if tagged is None else tagged


def answer_score(answer: str | None, gold_answers: Sequence[str], reward: str) -> float:
    """``scored_answer(answer)`` scored against the gold aliases by the scorer ``reward`` names."""
    return float(SCORERS[reward](scored_answer(answer), list(gold_answers)))


def terminal_reward(score: float, metrics: Mapping[str, float], config: RewardConfig) -> float:
    return (
        score
        - config.lambda_calls * metrics.get("tool_calls", 0)
        - config.lambda_tokens * metrics.get("action_tokens", 0)
        - config.lambda_errors * metrics.get("invalid_actions", 0)
    )
