"""The end of an episode: the final answer, its score (a scorer, the task's checker or the
judge), the terminal reward and the ``EpisodeOutcome``; and ``success_by_budget``."""

from __future__ import annotations

import dataclasses

from agentflow_env.tasks.base import Task
from agentflow_env.tasks.scoring import answer_options
from agentflow_env.workflow.episode_state import EpisodeDeps, EpisodeState
from agentflow_env.workflow.frozen_modules import FinalAnswer
from agentflow_env.workflow.module_calls import expect, module_failed, timed
from agentflow_env.workflow.outcome import EndReason, EpisodeOutcome
from agentflow_env.workflow.rewards import JUDGE, answer_score, check_scorer_for, scored_answer
from agentflow_env.workflow.telemetry import episode_diagnostics


async def finish(state: EpisodeState, deps: EpisodeDeps, end_reason: EndReason) -> EpisodeOutcome:
    """End the episode: ``state.done``, then its ``outcome`` (also returned)."""
    state.done = True
    task, turn = deps.task, state.turn
    try:
        # The planner's own answer when its finish gave one; else the generalist writes it.
        final = planner_answer(state, end_reason) or expect(
            await timed(
                state, "generalist", turn, deps.modules.generalist.answer(task, state.memory)
            ),
            FinalAnswer,
        )
        if final.answer is not None and not isinstance(final.answer, str):
            raise TypeError(f"answer must be a str or None, got {type(final.answer).__name__}")
    except Exception as exc:
        module_failed(state, turn, "generalist", exc)
        final = FinalAnswer(None, f"The final answer could not be written: {exc}")
    score = await _score(state, deps, final.answer)
    metrics = state.metrics.as_dict()
    reward = deps.config.reward.terminal_reward(score, metrics)
    success = is_correct(state, task, final.answer)
    state.memory.log(
        "final",
        turn,
        answer=final.answer,
        text=final.text,
        raw=final.raw,
        extra=dict(final.extra),
        score=score,
        reward=reward,
    )
    state.outcome = EpisodeOutcome(
        answer=final.answer,
        final_text=final.text,
        gold_answers=tuple(task.gold_answers),
        success=success,
        score=score,
        reward=reward,
        end_reason=end_reason,
        module_errors=tuple(state.module_errors),
        metrics=metrics,
        diagnostics=episode_diagnostics(state, task, end_reason, success, score, reward),
    )
    if deps.config.budget_curve:
        curve = await success_by_budget(state, deps)
        diagnostics = {**state.outcome.diagnostics, "success_by_budget": curve}
        state.outcome = dataclasses.replace(state.outcome, diagnostics=diagnostics)
    return state.outcome


def planner_answer(state: EpisodeState, end_reason: EndReason) -> FinalAnswer | None:
    """The final answer the planner's finish gave, or None (then the generalist writes one)."""
    action = state.finish_action
    if end_reason is not EndReason.PLANNER_STOP or action is None:
        return None
    answer = (action.final_answer or "").strip()
    if not answer:
        return None
    return FinalAnswer(answer, f"The planner's answer: {answer}", extra={"source": "planner"})


def is_correct(state: EpisodeState, task: Task, answer: str | None) -> bool:
    """Whether ``answer`` is right: the task's checker, else an exact match of a gold answer."""
    if task.checker is not None:
        try:
            return bool(task.checker(answer))
        except Exception as exc:  # a checker that chokes on an odd answer: not correct
            state.memory.log("checker_error", state.turn, error=repr(exc))
            return False
    return answer_score(answer, task.gold_answers, "exact_match") == 1.0


async def _score(state: EpisodeState, deps: EpisodeDeps, answer: str | None) -> float:
    task, config = deps.task, deps.config
    reward = config.reward.reward
    if task.checker is not None and reward != JUDGE:
        check_scorer_for(reward, task)  # refused when the session starts: never reached
        return float(is_correct(state, task, answer))
    if reward != JUDGE:
        return answer_score(answer, task.gold_answers, reward)
    if config.judge is None:
        raise RuntimeError("reward='llm_judge' needs a judge in the session config")
    options = answer_options(task.metadata)
    extra = {"options": options} if options else {}
    try:
        call = config.judge.judge(task.question, scored_answer(answer), task.gold_answers, **extra)
        judged = await timed(state, "judge", state.turn, call)
        verdict = float(judged)
        if not 0.0 <= verdict <= 1.0:
            raise ValueError(f"judge score must lie in [0, 1], got {verdict}")
    except Exception as exc:
        module_failed(state, state.turn, "judge", exc)
        return 0.0
    # A multiple-choice answer that named no option, scored by the judge's choice fallback:
    # the score without it is kept beside (``choice_fallback``, the diagnostics).
    strict = getattr(judged, "without_fallback", None)
    fallback = {} if strict is None else {"without_choice_fallback": float(strict)}
    state.memory.log("judge", state.turn, score=verdict, **fallback)
    return verdict


async def success_by_budget(state: EpisodeState, deps: EpisodeDeps) -> list[bool]:
    """Whether the finished episode would have succeeded with a turn budget of 1, 2, ...
    ``max_turns`` (see ``Session.success_by_budget``)."""
    if state.outcome is None:
        raise RuntimeError("success_by_budget() needs a finished episode")
    results: list[bool] = []
    for budget in range(1, deps.config.max_turns + 1):
        if budget >= state.turn:
            results.append(state.outcome.success)
            continue
        try:
            final = expect(
                await deps.modules.generalist.answer(deps.task, state.memory.prefix(budget)),
                FinalAnswer,
            )
            answer = final.answer if isinstance(final.answer, str) else None
        except Exception:
            answer = None
        results.append(is_correct(state, deps.task, answer))
    return results
