"""What a generator returns, read for the env: sampled ids, their log-probs, the finish reason.

vLLM reports a token's log-prob as ``[sampled, top-k...]`` or as a ``Logprob`` object per
position; Hugging Face generation and TRL give plain floats, or ``None`` where a token was not
scored. These readers turn any of them into what the env records (a float per action token, NaN
where unknown), read a vLLM ``RequestOutput``, and cap a turn's ``SamplingParams`` at the env's
``max_action_tokens`` without touching the caller's object. The batched driver
(``rollout.driver``) and the adapters built on vLLM (OpenRLHF's) share them.
"""

from __future__ import annotations

import copy
import math
from typing import Any


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


__all__ = ["action_logprobs", "capped_params", "read_request_output", "sampled_logprob"]
