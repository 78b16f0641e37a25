"""Turn-level credit for a batch of trajectories, grouped by task (equal labels): the one home
of the advantages a trainer is handed beside its own.

- flat samples: ``token_advantages`` computes each turn's advantage (``group_credit``) and
  spreads it over the flat sample's tokens; ``padded_rows`` lays them out as a trainer's
  right-padded ``(rows, tokens)`` batch. A trainer that takes per-token advantages (TRL through
  ``adapters/trl/turn_credit.py``) uses these instead of one group-normalised reward per token.
- turn samples: ``grouped_turn_advantages``, one advantage per planner turn's sample
  (``samples.turn_sample_advantages`` over the groups the labels form).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, get_args

from agentflow_env.rollout.training.driver import EpisodeResult
from agentflow_env.rollout.training.group_credit import (
    CreditMethod,
    Normalization,
    TrajectoryCredit,
    flat_token_advantages,
    turn_advantages,
)
from agentflow_env.rollout.training.samples import (
    SAMPLE_SHAPES,
    SampleShape,
    TrainerSample,
    turn_sample_advantages,
)

__all__ = [
    "check_credit_options",
    "group_key",
    "grouped_turn_advantages",
    "padded_rows",
    "token_advantages",
]


def check_credit_options(
    credit: CreditMethod | None,
    value_forks: int,
    samples: SampleShape,
    normalize: Normalization,
) -> None:
    """A ``ValueError`` unless ``credit`` (``None``: the trainer's own advantages), the forks per
    turn its ``monte_carlo`` values need, the sample shape and the ``normalize`` of broadcast
    turn samples go together."""
    if credit == "monte_carlo" and value_forks < 1:
        raise ValueError("credit='monte_carlo' needs value_forks >= 1")
    if samples not in SAMPLE_SHAPES or normalize not in get_args(Normalization):
        raise ValueError(f"samples={samples!r:.30}, normalize={normalize!r:.30}: unknown")
    turns = samples == "turns"
    if normalize != "trajectory" and not (turns and credit in (None, "broadcast")):
        raise ValueError("normalize='turn' is for samples='turns' with broadcast credit")


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


def padded_rows(rows: Sequence[Sequence[float]], width: int) -> list[list[float]]:
    """``rows`` right-padded with zeros (or cut) to ``width`` values each, as trainers right-pad
    completions."""
    return [[float(x) for x in row][:width] + [0.0] * max(0, width - len(row)) for row in rows]


def grouped_turn_advantages(
    labels: Sequence[Any],
    trajectories: Sequence[Sequence[TrainerSample]],
    method: CreditMethod = "broadcast",
    *,
    normalize: Normalization = "trajectory",
    values: Sequence[Sequence[float | None] | None] | None = None,
) -> list[float]:
    """One advantage per turn sample of ``trajectories`` (trajectories in order, turns in
    order), by ``method`` and ``normalize`` over the trajectories with equal labels
    (``turn_sample_advantages``). Under ``monte_carlo`` (``values``: per trajectory, its value
    estimates or ``None``) a trajectory without value estimates gets 0 and stays out."""
    samples = [s for t in trajectories for s in t]
    groups = [group_key(label) for label, t in zip(labels, trajectories, strict=True) for _ in t]
    keep = list(range(len(samples)))
    known = None
    if method == "monte_carlo":
        known = {
            turns[0].trajectory_id: v
            for turns, v in zip(trajectories, values or [], strict=True)
            if v is not None and turns
        }
        keep = [i for i, s in enumerate(samples) if s.trajectory_id in known]
    out = [0.0] * len(samples)
    if keep:
        chosen = turn_sample_advantages(
            [samples[i] for i in keep],
            [groups[i] for i in keep],
            method,
            normalize=normalize,
            values=known,
        )
        for index, advantage in zip(keep, chosen, strict=True):
            out[index] = advantage
    return out
