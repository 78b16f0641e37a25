"""One episode token-in-token-out over an async ``generate`` call, within fixed token budgets.

Trainers whose rollout is one coroutine per trajectory (verl's agent loop, a SkyRL generator)
hand the env the ids their engine sampled and get back one flat sample: the first prompt, then
actions and feedback alternating, the mask 1 exactly on sampled ids, the sampling log-probs on
them. ``run_token_episode`` does that for any such trainer; the adapter only maps its engine call
onto ``AsyncGenerate`` and the returned ``TokenEpisode`` onto its output type.

Budgets: a trainer that pads to fixed lengths (verl) cannot take a longer sequence, so every turn
is capped at the room left, and when no room is left the episode ends there with reward 0 and
the sample so far (up to the last action, so nothing is cut). Nothing an episode does raises:
an env that fails gives a reward-0 sample (``failures``); only ``generate``'s own exceptions (the
engine, not this trajectory) propagate.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentflow_env.rollout import failures
from agentflow_env.workflow.session import Session

AsyncGenerate = Callable[[list[int], int], Awaitable[tuple[Sequence[int], Sequence[float] | None]]]
"""``await generate(prompt_ids, max_new_tokens) -> (sampled ids, their log-probs or None)``."""

DONE, RESPONSE_BUDGET, PROMPT_BUDGET, ERROR = "done", "response_budget", "prompt_budget", "error"
"""How a ``TokenEpisode`` ended: the env ended it, or no room was left, or it failed."""


@dataclass(frozen=True)
class TokenBudget:
    """Token limits of one sample (``None``: no limit). ``response`` counts every token after the
    first prompt, ``total`` the whole sequence; ``turn`` caps each action below the env's own
    ``max_action_tokens`` (where the env cuts an action)."""

    response: int | None = None
    prompt: int | None = None
    total: int | None = None
    turn: int | None = None

    def room(self, prompt_length: int, response_length: int) -> int:
        """How many more tokens the response may take."""
        limits = [1 << 62]
        if self.response is not None:
            limits.append(self.response - response_length)
        if self.total is not None:
            limits.append(self.total - prompt_length - response_length)
        return min(limits)


@dataclass
class TokenEpisode:
    """One trajectory as a flat sample: ``prompt_ids`` (the first prompt) + ``response_ids``;
    ``response_mask`` is 1 on sampled ids; ``response_logprobs`` their sampling log-probs (0 on
    env tokens), ``None`` unless every turn's were known. ``reward`` is the env's, 0 unless the
    env ended the episode. ``logs`` are ``failures.episode_logs`` (same keys on every sample)."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None
    reward: float
    turns: int
    end: str
    logs: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    session: Session | None = None

    @property
    def done(self) -> bool:
        """Whether the env ended the episode (not a budget or a failure)."""
        return self.end == DONE


async def run_token_episode(
    new_session: Callable[[], Session],
    generate: AsyncGenerate,
    budget: TokenBudget,
    *,
    filler: int,
    log: logging.Logger,
    label: Any = None,
) -> TokenEpisode:
    """Run the episode of ``new_session()`` (called in a worker thread: it may build envs and
    worlds) with ``generate`` as the planner. ``filler`` pads a failure sample that has no
    tokens (the tokenizer's end-of-turn id); ``label`` names the task in warnings."""
    session: Session | None = None
    try:
        session = await asyncio.to_thread(new_session)
        observation, _ = await session.start()
        first = list(observation.token_ids)
        if budget.prompt is not None and len(first) > budget.prompt:
            log.warning(
                "AgentFlow's first prompt has %d tokens, more than the trainer's prompt length %d: "
                "the episode counts as reward 0 (raise the prompt length) | label: %.200s",
                len(first),
                budget.prompt,
                label,
            )
            return _short_sample(session, first[-budget.prompt :], filler, PROMPT_BUDGET)
    except Exception as exc:
        failures.warn_failed(log, exc, 0, label)
        return _failed(session, exc, filler, budget)
    end = DONE
    while not session.done:
        current = session.observation
        assert current is not None
        room = budget.room(len(first), len(current.token_ids) - len(first))
        cap = min(room, session.config.max_action_tokens or room, budget.turn or room)
        if cap < 1:
            end = RESPONSE_BUDGET
            break
        ids, logprobs = await generate(list(current.token_ids), cap)
        action = [int(i) for i in ids][:cap]
        known = None if logprobs is None else [float(x) for x in logprobs][:cap]
        try:
            await session.step(action, known if known and len(known) == len(action) else None)
        except Exception as exc:
            failures.warn_failed(log, exc, len(session.turn_records), label)
            return _failed(session, exc, filler, budget)
    if not session.turn_records:  # no room for even one action
        return _short_sample(session, first, filler, end)
    try:
        return _flat(session, end)
    except ValueError as exc:  # the env's record is not one flat sequence: a bug, not a crash
        failures.warn_failed(log, exc, len(session.turn_records), label)
        return _short_sample(session, first, filler, ERROR, failures.failure_reason(exc))


def _flat(session: Session, end: str) -> TokenEpisode:
    """The env's own flat sample of ``session`` (the last turn's feedback left out)."""
    sample = session.trajectory().flat_sample()
    cut = sample.prompt_length
    reward = float(session.outcome.reward) if end == DONE and session.outcome else 0.0
    return TokenEpisode(
        prompt_ids=sample.input_ids[:cut],
        response_ids=sample.completion_ids,
        response_mask=sample.completion_mask,
        response_logprobs=None if sample.logprobs is None else sample.logprobs[cut:],
        reward=reward,
        turns=len(session.turn_records),
        end=end,
        logs=failures.episode_logs(session, error=end == ERROR),
        session=session,
    )


def _short_sample(
    session: Session | None, prompt: list[int], filler: int, end: str, error: str | None = None
) -> TokenEpisode:
    """A reward-0 sample with no action: ``prompt`` and one masked ``filler`` token."""
    return TokenEpisode(
        prompt_ids=prompt or [filler],
        response_ids=[filler],
        response_mask=[0],
        response_logprobs=[0.0],
        reward=0.0,
        turns=0,
        end=end,
        logs=failures.episode_logs(session, error=end == ERROR),
        error=error,
        session=session,
    )


def _failed(
    session: Session | None, exc: BaseException, filler: int, budget: TokenBudget
) -> TokenEpisode:
    reason = failures.failure_reason(exc)
    if session is not None and session.turn_records:
        try:  # the turns recorded before the failure, if they still form a flat sample
            episode = _flat(session, ERROR)
            episode.error = reason
            return episode
        except ValueError:
            pass
    first = session.initial_observation if session is not None else None
    prompt = list(first.token_ids) if first is not None else []
    if budget.prompt is not None:
        prompt = prompt[-budget.prompt :]
    return _short_sample(session, prompt, filler, ERROR, reason)


__all__ = [
    "DONE",
    "ERROR",
    "PROMPT_BUDGET",
    "RESPONSE_BUDGET",
    "AsyncGenerate",
    "TokenBudget",
    "TokenEpisode",
    "run_token_episode",
]
