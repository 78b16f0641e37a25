"""Turn-level credit for a batch of driver results: group them by task, compute each turn's
advantage (``agentflow_env.rollout.training.group_credit``) and spread it over the flat sample's tokens.

A trainer that takes per-token advantages (TRL through ``adapters/trl/turn_credit.py``) uses
these instead of broadcasting one group-normalised reward to every token.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentflow_env.rollout.training.driver import EpisodeResult
from agentflow_env.rollout.training.group_credit import (
    CreditMethod,
    TrajectoryCredit,
    flat_token_advantages,
    turn_advantages,
)

__all__ = ["group_key", "token_advantages"]


def group_key(label: Any) -> str:
    """Episodes whose labels are equal run the same task: one advantage group."""
    try:
        return json.dumps(label, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(label)


def token_advantages(
    labels: Sequence[Any], results: Sequence[EpisodeResult], method: CreditMethod
) -> list[list[float]]:
    """One advantage per completion token of every result (0 on feedback tokens), by ``method``
    over the group of results with equal labels. A failed episode (a placeholder sample) gets
    zeros and stays out of its group's statistics, as does, under ``monte_carlo``, an episode
    whose values could not be estimated (a state none of whose forks could be made).
    ``monte_carlo`` needs the results of ``run_episodes(..., value_forks=K)``: with no values
    at all it raises ``ValueError``."""
    if len(labels) != len(results):
        raise ValueError(f"{len(labels)} labels for {len(results)} results")
    out = [[0.0] * len(r.completion_ids) for r in results]
    usable = [not r.failed and r.turns >= 1 for r in results]
    if method == "monte_carlo":
        valued = [r.turn_values is not None for r in results]
        if any(usable) and not any(u and v for u, v in zip(usable, valued, strict=True)):
            raise ValueError("monte_carlo credit needs run_episodes(..., value_forks=K >= 1)")
        usable = [u and v for u, v in zip(usable, valued, strict=True)]
    groups: dict[str, list[int]] = {}
    for index, label in enumerate(labels):
        if usable[index]:
            groups.setdefault(group_key(label), []).append(index)
    for members in groups.values():
        credits = [_credit(results[i], method) for i in members]
        for index, advantages in zip(members, turn_advantages(credits, method), strict=True):
            result = results[index]
            tokens = flat_token_advantages(
                advantages, result.action_lengths, result.feedback_lengths
            )
            if len(tokens) != len(result.completion_ids):
                raise RuntimeError(
                    f"{len(tokens)} token advantages for {len(result.completion_ids)} tokens"
                )
            out[index] = tokens
    return out


def _credit(result: EpisodeResult, method: CreditMethod) -> TrajectoryCredit:
    values = None
    if method == "monte_carlo" and result.turn_values is not None:
        values = tuple(result.turn_values)
    return TrajectoryCredit(result.reward, tuple(result.turn_shaping), values)
