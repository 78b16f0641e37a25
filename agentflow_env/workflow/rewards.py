"""The answer scores a reward names: the scorer registry (``register_scorer``) and the judge;
the costs and the rest of the reward settings are ``agentflow_env.workflow.config.RewardConfig``.

A scorer compares the scored part of a final answer with the task's gold answers. A task with a
checker (``Task.checker``: any valid make-24 expression is right, which no list of gold answers
holds) is decided by its checker: the built-in answer matches (``exact_match``, ``f1``) give way
to it, ``llm_judge`` judges it, and a registered scorer, which would score what the checker must
decide, is refused (``check_scorer_for``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentflow_env.tasks.base import Task
from agentflow_env.tasks.scoring import exact_match, extract_tagged_answer, f1_score

Scorer = Callable[[str | None, list[str]], float]
"""``scorer(answer, gold_answers) -> score``, in [0, 1] by convention."""

JUDGE = "llm_judge"
"""The reward an ``AnswerJudge`` gives (the session config's ``judge``)."""
CHECKED = ("exact_match", "f1")
"""The built-in scorers, which a task's checker replaces."""

SCORERS: dict[str, Scorer] = {"exact_match": exact_match, "f1": f1_score}
"""Reward name -> scorer: the built-in ones, then those ``register_scorer`` added."""

RewardName = str
"""A reward's name: a scorer of ``SCORERS`` or ``"llm_judge"`` (``reward_names``)."""


def register_scorer(name: str, scorer: Scorer, *, overwrite: bool = False) -> None:
    """Make ``reward=name`` score final answers with ``scorer(answer, gold_answers)``.

    The answer is the scored part of the final answer (``scored_answer``); a task with a checker
    refuses the reward (its checker decides). ``ValueError`` for a name already taken (unless
    ``overwrite``; the built-in names and ``llm_judge`` never) or a scorer that is not callable.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a scorer's name is a non-empty string, got {name!r:.40}")
    if not callable(scorer):
        raise ValueError(f"scorer {name!r} must be callable, got {type(scorer).__name__}")
    if name in (*CHECKED, JUDGE) or (name in SCORERS and not overwrite):
        raise ValueError(f"reward {name!r} is already a scorer (registered: {reward_names()})")
    SCORERS[name] = scorer


def reward_names() -> tuple[str, ...]:
    """Every reward a config accepts: the scorers, then ``llm_judge``."""
    return (*SCORERS, JUDGE)


def check_reward(name: object) -> None:
    """``ValueError`` naming the known rewards when ``name`` is none of them."""
    if name not in reward_names():
        raise ValueError(f"reward must be one of {list(reward_names())}, got {name!r:.80}")


def check_scorer_for(reward: str, task: Task) -> None:
    """``ValueError`` when ``reward`` cannot score ``task``: a registered scorer and a task whose
    checker decides whether an answer is right."""
    if task.checker is not None and reward not in (*CHECKED, JUDGE):
        raise ValueError(
            f"reward {reward!r} cannot score task {task.task_id or task.question!r:.80} (kind "
            f"{task.kind}): its checker decides whether an answer is right, which gold answers "
            f"cannot list; use {', '.join(CHECKED)} (both give way to the checker) or {JUDGE}"
        )


def scored_answer(answer: str | None) -> str | None:
    """The part of a final answer that is scored: the last ``<answer>...</answer>`` content when
    the answer holds tags (``extract_tagged_answer``), else the whole answer."""
    tagged = extract_tagged_answer(answer)
    return answer if tagged is None else tagged


def answer_score(answer: str | None, gold_answers: Sequence[str], reward: str) -> float:
    """``scored_answer(answer)`` scored against the gold aliases by the scorer ``reward`` names."""
    return float(SCORERS[reward](scored_answer(answer), list(gold_answers)))
