"""One trajectory for a trainer that samples one trajectory at a time (verl's agent loop, a SkyRL
generator): ``run_token_episode`` with what every such adapter does alike around it.

``run_trainer_episode`` runs the episode, judges it (``failures.trajectory_failure``) and has the
process's fail-fast guard count it when the env judged it (not a turn the engine aborted every
time, nor a first prompt over the budget): a setup that fails every trajectory raises
``SystemicFailure`` out of the trainer's rollout. The ``TrainerEpisode`` it returns gives the
fields such a trainer's row carries alike: the numeric logs, log-probs padded to the response, the
engine's stop reason in vLLM's words, and the sample ``agentflow-env check-logprobs`` reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentflow_env.rollout.checks.fail_fast import FailFast
from agentflow_env.rollout.checks.failures import trajectory_failure
from agentflow_env.rollout.checks.logprob_check import LogprobSample
from agentflow_env.rollout.training.token_episode import (
    ABORTED,
    DONE,
    ERROR,
    PROMPT_BUDGET,
    RESPONSE_BUDGET,
    AsyncGenerate,
    Generated,
    TokenBudget,
    TokenEpisode,
    run_token_episode,
)
from agentflow_env.workflow.session import Session

__all__ = ["TrainerEpisode", "padded_logprobs", "run_trainer_episode"]


def padded_logprobs(known: Sequence[float] | None, size: int, fill: float) -> list[float]:
    """``size`` log-probs: ``known`` (cut to ``size``), then ``fill`` (a row a trainer stacks
    needs one per response token)."""
    values = [float(x) for x in known or []][:size]
    return values + [fill] * (size - len(values))


@dataclass
class TrainerEpisode:
    """One trajectory's episode, why it counts as failed (``None``: it did not) and the engine's
    stop reason for its last action (``None``: not given)."""

    episode: TokenEpisode
    failure: str | None
    engine_stop: str | None = None

    @property
    def logs(self) -> dict[str, float]:
        """The row's numeric logs (the same keys on every row): the episode's, ``failed``, the
        engine's turn ends (``turns_stop``, ``turns_length``, ``turns_aborted``),
        ``unscored_tokens`` and ``env_seconds``."""
        episode = self.episode
        return {
            **episode.logs,
            "failed": float(self.failure is not None),
            **{f"turns_{end}": float(count) for end, count in episode.turn_ends.items()},
            "unscored_tokens": float(episode.unscored),
            "env_seconds": float(episode.env_seconds),
        }

    @property
    def stop_reason(self) -> str:
        """The stop reason in vLLM's words: the engine's for the last action of an episode the
        env ended, ``"length"`` when a token budget ran out, ``"error"`` for a failed
        trajectory, ``"abort"`` for one the engine aborted, else how it ended."""
        end = self.episode.end
        if end == DONE:
            return self.engine_stop or "stop"
        if end in (RESPONSE_BUDGET, PROMPT_BUDGET):
            return "length"
        return {ERROR: "error", ABORTED: "abort"}.get(end, str(end))

    def logprobs(self, size: int, fill: float) -> list[float]:
        """``size`` log-probs of the flat response (``padded_logprobs``)."""
        return padded_logprobs(self.episode.response_logprobs, size, fill)

    def logprob_samples(self, temperature: Any, training: Any) -> list[LogprobSample]:
        """The episode as ``agentflow-env check-logprobs`` reads it; none when it was sampled at
        another temperature than training's (greedy validation). A ``ValueError`` when a turn
        came without log-probs (a filled log-prob is no sampling log-prob)."""
        episode = self.episode
        if temperature != training:
            return []
        if episode.response_logprobs is None or episode.unscored:
            raise ValueError("the server returned no log-probs for some turn")
        return [
            LogprobSample.build(
                episode.prompt_ids,
                episode.response_ids,
                episode.response_mask,
                episode.response_logprobs,
                temperature,
            )
        ]


async def run_trainer_episode(
    new_session: Callable[[], Session],
    generate: AsyncGenerate,
    budget: TokenBudget,
    fail_fast: FailFast,
    **options: Any,
) -> TrainerEpisode:
    """``run_token_episode(new_session, generate, budget, **options)``, judged and counted by
    ``fail_fast`` (its ``SystemicFailure`` propagates, as ``generate``'s own errors do)."""
    last_stop: list[str | None] = [None]

    async def recorded(prompt_ids: list[int], max_tokens: int) -> Generated:
        answer = await generate(prompt_ids, max_tokens)
        stop = answer[2] if len(answer) > 2 else None
        last_stop[0] = str(stop) if stop is not None else None
        return answer

    episode = await run_token_episode(new_session, recorded, budget, **options)
    failure = trajectory_failure(episode.session, episode.error)
    if episode.end not in (ABORTED, PROMPT_BUDGET):  # the env never judged it: not counted
        fail_fast.record(failure)
    return TrainerEpisode(episode, failure, last_stop[0])
