"""The answer scores a reward names (``RewardName``); the costs and the rest of the reward
settings are ``agentflow_env.workflow.config.RewardConfig``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from agentflow_env.tasks.scoring import exact_match, extract_tagged_answer, f1_score

SCORERS = {"exact_match": exact_match, "f1": f1_score}
RewardName = Literal["exact_match", "f1", "llm_judge"]
"""The answer scores: a scorer of ``SCORERS``, or an ``AnswerJudge`` (``"llm_judge"``)."""


def scored_answer(answer: str | None) -> str | None:
    """The part of a final answer that is scored: the last ``<answer>...</answer>`` content when
    the answer holds tags (``extract_tagged_answer``), else the whole answer."""
    tagged = extract_tagged_answer(answer)
    return answer if tagged is None else tagged


def answer_score(answer: str | None, gold_answers: Sequence[str], reward: str) -> float:
    """``scored_answer(answer)`` scored against the gold aliases by the scorer ``reward`` names."""
    return float(SCORERS[reward](scored_answer(answer), list(gold_answers)))
