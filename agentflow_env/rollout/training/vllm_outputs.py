"""What a generator returns, read for the env: sampled ids, their log-probs, the finish reason.

vLLM reports a token's log-prob as ``[sampled, top-k...]`` or as a ``Logprob`` object per
position; Hugging Face generation and TRL give plain floats, or ``None`` where a token was not
scored. These readers turn any of them into what the env records (a float per action token, NaN
where unknown), read a vLLM ``RequestOutput``, and cap a turn's ``SamplingParams`` at the env's
``max_action_tokens`` without touching the caller's object. The batched driver
(``rollout.driver``) and the adapters built on vLLM (OpenRLHF's) share them; ``CheckedEngine`` is
a trainer's vLLM engine for one trajectory, each turn checked against the env's tokens.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from agentflow_env.rollout.checks.failures import SeamLatch
from agentflow_env.rollout.checks.token_check import Encode, MismatchHints, TrainerSequence


def sampled_logprob(value: Any) -> float:
    """One token's log-prob as a float, NaN if unknown; vLLM gives ``[sampled, top-k...]``."""
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def action_logprobs(logprobs: Any, length: int) -> list[float]:
    """``length`` log-probs for an action: NaN where unknown, all NaN if missing or misaligned."""
    if logprobs is None:
        return [math.nan] * length
    values = [sampled_logprob(x) for x in logprobs]
    return values if len(values) == length else [math.nan] * length


def capped_params(sampling_params: Any, cap: int) -> Any:
    """A copy of vLLM ``SamplingParams`` whose ``max_tokens`` is at most ``cap`` (the caller's
    object, which a group of trajectories may share, is never changed)."""
    params = copy.deepcopy(sampling_params)
    if params.max_tokens is None or params.max_tokens > cap:
        params.max_tokens = cap
    return params


def read_request_output(output: Any) -> tuple[list[int], list[float] | None, str | None]:
    """The sampled ids, their log-probs (``None`` if not all readable) and the finish reason of
    a vLLM ``RequestOutput``. Raises ``ValueError`` when ``outputs[0].token_ids`` is unreadable."""
    try:
        sampled = output.outputs[0]
        ids = [int(i) for i in sampled.token_ids]
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            "the rollout engine's output has no readable outputs[0].token_ids "
            f"({type(exc).__name__}: {exc}); the adapter needs the sampled ids"
        ) from exc
    logprobs: list[float] | None = None
    per_token = getattr(sampled, "logprobs", None)
    if per_token:
        try:
            logprobs = [float(d[t].logprob) for d, t in zip(per_token, ids, strict=True)]
        except (AttributeError, KeyError, TypeError, ValueError):
            logprobs = None
    return ids, logprobs, getattr(sampled, "finish_reason", None)


class CheckedEngine:
    """A trainer's vLLM engine (``await engine.generate(prompt_ids, params, **kwargs)`` giving a
    ``RequestOutput``) for one trajectory: ``generate`` checks each turn's prompt ids against the
    env's (``TrainerSequence.start_turn``: ``TokenMismatchError``), caps the turn at the env's
    ``max_action_tokens`` (else ``cap``) and keeps the sampled ids in ``rollout``, the trainer's
    sequence so far (so a failed trajectory can still be returned). An output it cannot read is
    a ``SeamError`` of ``seam``; ``error`` holds the engine's own failure, which is not the
    trajectory's. Any other attribute is the engine's."""

    def __init__(
        self, engine: Any, encode: Encode | None, cap: int, hints: MismatchHints, seam: SeamLatch
    ) -> None:
        self.engine, self.encode, self.cap, self.hints, self.seam = engine, encode, cap, hints, seam
        self.rollout = TrainerSequence()
        self.error: BaseException | None = None

    async def generate(self, prompt_ids: Any, sampling_params: Any, **kwargs: Any) -> Any:
        cap = self.rollout.start_turn(prompt_ids, self.encode, self.hints, self.cap)
        params = capped_params(sampling_params, cap)
        try:
            output = await self.engine.generate(prompt_ids, params, **kwargs)
        except Exception as exc:
            self.error = exc  # not this trajectory's failure: it propagates
            raise
        try:
            self.rollout.end_turn(*read_request_output(output))
        except ValueError as exc:
            raise self.seam.error(str(exc)) from exc
        return output

    def failure_sample(
        self, prompt: str | None, filler: int, min_length: int = 1
    ) -> tuple[list[int], list[tuple[int, int]], list[float]]:
        """Tokens, action ranges and log-probs of the reward-0 sample of a failed trajectory:
        the trainer's sequence so far, or the encoded ``prompt`` when it had none
        (``TrainerSequence.failure_sample``)."""
        fallback = (self.encode(prompt or "") if self.encode is not None else None) or []
        return self.rollout.failure_sample(fallback, filler, min_length=min_length)

    def __getattr__(self, name: str) -> Any:  # the rest of the trainer's engine
        return getattr(self.engine, name)


__all__ = [
    "CheckedEngine",
    "action_logprobs",
    "capped_params",
    "read_request_output",
    "sampled_logprob",
]
