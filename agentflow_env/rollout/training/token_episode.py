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

Sample shapes (``agentflow_env.rollout.training.samples``): ``samples="turns"`` gives one sample per
planner turn instead (``TokenEpisode.turn_samples``), each on the exact prompt that turn acted
on; the budgets then hold per sample: each turn's prompt against ``prompt``, its action against
``response`` and the two against ``total``, not a growing sequence.

Aborted turns: an engine that pauses for a weight sync answers in-flight requests with no tokens
(stop reason ``"aborted"``). Such a turn is re-issued up to ``aborted_retries`` times and never
stepped as an empty action; after that the episode ends as a reward-0 sample (``ABORTED``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agentflow_env.remote import RemoteSession
from agentflow_env.rollout.checks import failures
from agentflow_env.rollout.training.remote_envs import end_session
from agentflow_env.rollout.training.samples import SampleShape, TrainerSample, turn_samples
from agentflow_env.workflow.session import Session

_T = TypeVar("_T")
Generated = (
    tuple[Sequence[int], Sequence[float] | None]
    | tuple[Sequence[int], Sequence[float] | None, str | None]
)
AsyncGenerate = Callable[[list[int], int], Awaitable[Generated]]
"""``await generate(prompt_ids, max_new_tokens) -> (sampled ids, their log-probs or None)``, or
the same with the engine's stop reason third (``"aborted"`` / ``"abort"`` mark an aborted turn)."""

DONE, RESPONSE_BUDGET, PROMPT_BUDGET, ERROR = "done", "response_budget", "prompt_budget", "error"
"""How a ``TokenEpisode`` ended: the env ended it, or no room was left, or it failed."""
ABORTED = "aborted"
"""The engine aborted one turn's request every time it was issued."""
FAILED_ENDS = frozenset({ERROR, ABORTED})
"""Ends that count as failed samples (``error`` and ``failed`` in the logs)."""
ABORT_REASONS = frozenset({"aborted", "abort"})
"""Stop reasons that mark an aborted request (verl's vLLM and SGLang servers)."""
TURN_ENDS = ("stop", "length", "aborted")
"""How ``TokenEpisode.turn_ends`` counts each answer of the engine: a finished action, one that
filled its cap (or that the engine says hit its length), and an aborted or empty answer."""


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
        """How many more tokens the response may take (a turn sample's response starts at 0)."""
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
    env tokens), ``None`` unless every turn's were known or a fill value was given (``unscored``
    counts the sampled ids that got it). ``reward`` is the env's, 0 unless the env ended the
    episode. ``logs`` are ``failures.episode_logs`` (same keys on every sample). ``turn_ends``
    counts the engine's answers by ``TURN_ENDS``; ``env_seconds`` is the time spent in the env
    (building the session, its start and steps), apart from the engine's."""

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
    unscored: int = 0
    turn_ends: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TURN_ENDS, 0))
    env_seconds: float = 0.0
    turn_samples: list[TrainerSample] = field(default_factory=list)
    """``samples="turns"``: one sample per planner turn, each with this episode's reward. The
    flat fields then hold the first prompt and no response, except on a placeholder sample (a
    failure before any turn), which they are."""

    @property
    def done(self) -> bool:
        """Whether the env ended the episode (not a budget or a failure)."""
        return self.end == DONE

    def trainer_samples(self) -> list[TrainerSample]:
        """The episode as the trainer trains on it: its turn samples, or one flat sample."""
        if self.turn_samples:
            return list(self.turn_samples)
        return [
            TrainerSample(
                prompt_ids=list(self.prompt_ids),
                response_ids=list(self.response_ids),
                response_mask=list(self.response_mask),
                logprobs=None if self.response_logprobs is None else list(self.response_logprobs),
                reward=self.reward,
                turns=self.turns,
                metrics=dict(self.logs),
                failure=self.error,
            )
        ]


async def run_token_episode(
    new_session: Callable[[], Session | RemoteSession],
    generate: AsyncGenerate,
    budget: TokenBudget,
    *,
    filler: int,
    log: logging.Logger,
    label: Any = None,
    aborted_retries: int = 2,
    retry_delay: float = 1.0,
    logprob_fill: float | None = None,
    samples: SampleShape = "flat",
) -> TokenEpisode:
    """Run the episode of ``new_session()`` (called in a worker thread: it may build envs and
    worlds) with ``generate`` as the planner. ``filler`` pads a failure sample that has no
    tokens (the tokenizer's end-of-turn id); ``label`` names the task in warnings.
    ``aborted_retries``: how many times an aborted turn is re-issued (``retry_delay`` seconds
    apart, growing) before the episode ends. ``logprob_fill``: when set, the log-prob of sampled
    ids the engine did not score, so a trainer that stacks log-probs always gets them.
    ``samples``: one flat sample, or one per turn (the session must then be built in an
    observation mode the shape trains: ``check_adapter_kwargs``)."""
    stats = _Stats(samples=samples)
    episode = await _run(
        new_session, generate, budget, filler, log, label, stats, aborted_retries, retry_delay
    )
    await end_session(episode.session)  # a served env's session: its server frees it now
    if episode.turn_samples:
        _fill_turns(episode, logprob_fill)
    elif logprob_fill is not None and episode.response_logprobs is None:
        episode.response_logprobs, episode.unscored = _filled(episode, logprob_fill)
    episode.turn_ends = dict(stats.ends)
    episode.env_seconds = stats.env_seconds
    return episode


@dataclass
class _Stats:
    """What one episode's run counts beside its sample."""

    ends: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TURN_ENDS, 0))
    env_seconds: float = 0.0
    samples: SampleShape = "flat"

    async def env(self, call: Awaitable[_T]) -> _T:
        """``await call``, its time counted as the env's."""
        started = time.perf_counter()
        try:
            return await call
        finally:
            self.env_seconds += time.perf_counter() - started


def _unpack(answer: Any) -> tuple[list[int], list[float] | None, str | None]:
    ids, logprobs, *rest = answer
    known = None if logprobs is None else [float(x) for x in logprobs]
    return [int(i) for i in ids], known, (str(rest[0]) if rest and rest[0] is not None else None)


async def _run(
    new_session: Callable[[], Session | RemoteSession],
    generate: AsyncGenerate,
    budget: TokenBudget,
    filler: int,
    log: logging.Logger,
    label: Any,
    stats: _Stats,
    retries: int,
    delay: float,
) -> TokenEpisode:
    session: Any = None  # a Session, or a RemoteSession (served envs)
    try:
        session = await stats.env(asyncio.to_thread(new_session))
        observation, _ = await stats.env(session.start())
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
    per_turn = stats.samples == "turns"
    while not session.done:
        current = session.observation
        assert current is not None
        if per_turn and budget.prompt is not None and len(current.token_ids) > budget.prompt:
            end = PROMPT_BUDGET  # this turn's prompt alone is too long: the episode ends here
            break
        if per_turn:
            room = budget.room(len(current.token_ids), 0)
        else:
            room = budget.room(len(first), len(current.token_ids) - len(first))
        cap = min(room, session.config.max_action_tokens or room, budget.turn or room)
        if cap < 1:
            end = RESPONSE_BUDGET
            break
        ids: list[int] = []
        stop: str | None = None
        for attempt in range(max(retries, 0) + 1):
            if attempt:
                await asyncio.sleep(delay * attempt)
            ids, known, stop = _unpack(await generate(list(current.token_ids), cap))
            if ids and stop not in ABORT_REASONS:
                break
            stats.ends["aborted"] += 1
        else:
            reason = (
                f"the engine aborted turn {len(session.turn_records) + 1}'s request "
                f"{attempt + 1} time(s) (last stop reason {stop!r}, {len(ids)} token(s))"
            )
            log.warning(
                "AgentFlow trajectory ends with reward 0: %s | label: %.200s", reason, label
            )
            return _ended(session, reason, filler, budget, ABORTED, stats.samples)
        stats.ends["length" if stop == "length" or len(ids) >= cap else "stop"] += 1
        action = ids[:cap]
        known = None if known is None else known[:cap]
        try:
            await stats.env(
                session.step(action, known if known and len(known) == len(action) else None)
            )
        except Exception as exc:
            failures.warn_failed(log, exc, len(session.turn_records), label)
            return _failed(session, exc, filler, budget, stats.samples)
    if not session.turn_records:  # no room for even one action
        return _short_sample(session, first, filler, end)
    try:
        return _turns(session, end) if per_turn else _flat(session, end)
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
        logs=failures.episode_logs(session, error=end in FAILED_ENDS),
        session=session,
    )


def _turns(session: Session, end: str) -> TokenEpisode:
    """The session's turns as one sample each, the episode's reward on every one."""
    reward = float(session.outcome.reward) if end == DONE and session.outcome else 0.0
    logs = failures.episode_logs(session, error=end in FAILED_ENDS)
    failure = failures.trajectory_failure(session)
    samples = turn_samples(session.trajectory(), reward, metrics=logs, failure=failure)
    first = samples[0].prompt_ids
    return TokenEpisode(
        prompt_ids=list(first),
        response_ids=[],
        response_mask=[],
        response_logprobs=None,
        reward=reward,
        turns=len(samples),
        end=end,
        logs=logs,
        session=session,
        turn_samples=samples,
    )


def _fill_turns(episode: TokenEpisode, fill: float | None) -> None:
    """Count the sampled ids of turns the engine did not score and, with ``fill``, give them
    ``fill`` as their log-probs."""
    for sample in episode.turn_samples:
        if sample.logprobs is None:
            episode.unscored += len(sample.response_ids)
            if fill is not None:
                sample.logprobs = [fill] * len(sample.response_ids)


def _filled(episode: TokenEpisode, fill: float) -> tuple[list[float], int]:
    """The episode's log-probs with ``fill`` on every token of a turn the engine did not score
    (and on env tokens), laid out as ``flat_sample`` lays out the ids; and how many sampled ids
    got ``fill``."""
    turns = episode.session.trajectory().turns if episode.session is not None else []
    values: list[float] = []
    unscored = 0
    for index, turn in enumerate(turns):
        if turn.logprobs is None:
            unscored += len(turn.action_ids)
        values += list(turn.logprobs or [fill] * len(turn.action_ids))
        if index + 1 < len(turns):
            values += [fill] * len(turn.feedback_ids)
    if len(values) != len(episode.response_ids):  # not the env's flat record: all unscored
        values = [fill] * len(episode.response_ids)
        unscored = sum(episode.response_mask)
    return values, unscored


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
        logs=failures.episode_logs(session, error=end in FAILED_ENDS),
        error=error,
        session=session,
    )


def _failed(
    session: Session | None,
    exc: BaseException,
    filler: int,
    budget: TokenBudget,
    samples: SampleShape = "flat",
) -> TokenEpisode:
    return _ended(session, failures.failure_reason(exc), filler, budget, ERROR, samples)


def _ended(
    session: Session | None,
    reason: str,
    filler: int,
    budget: TokenBudget,
    end: str,
    samples: SampleShape = "flat",
) -> TokenEpisode:
    """A reward-0 sample of the turns recorded so far (if they still form a flat sample; as turn
    samples, each failed with ``reason``), else the first prompt and one masked ``filler``, with
    ``reason`` as its error."""
    if session is not None and session.turn_records:
        try:
            episode = _turns(session, end) if samples == "turns" else _flat(session, end)
            episode.error = reason
            for sample in episode.turn_samples:
                sample.failure = reason
            return episode
        except ValueError:
            pass
    first = session.initial_observation if session is not None else None
    prompt = list(first.token_ids) if first is not None else []
    if budget.prompt is not None:
        prompt = prompt[-budget.prompt :]
    return _short_sample(session, prompt, filler, end, reason)


__all__ = [
    "ABORTED",
    "ABORT_REASONS",
    "DONE",
    "ERROR",
    "FAILED_ENDS",
    "PROMPT_BUDGET",
    "RESPONSE_BUDGET",
    "TURN_ENDS",
    "AsyncGenerate",
    "TokenBudget",
    "TokenEpisode",
    "run_token_episode",
]
