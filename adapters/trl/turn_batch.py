"""A ``samples="turns"`` rollout's output as TRL rows: one row per planner turn, then padding.

``turn_rows`` lays out every trajectory's turn samples (``TrainerSample``) as the output of the
stand-in ``rollout_func`` that ``TurnSamplesGRPOTrainer`` (``turn_samples.py``) hands TRL, each
row with its advantage (``row_advantages``: ``agentflow_env.rollout``'s
``grouped_turn_advantages``); padding rows make the count equal across ranks and a multiple of
``steps_per_generation``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rollout import LOG_KEYS

from agentflow_env.rollout import grouped_turn_advantages

TURN_SAMPLES = "turn_samples"
"""The rollout output's field holding, per trajectory, its list of ``TrainerSample``."""
_ROW_FIELDS = (*LOG_KEYS, "error")


@dataclass
class TurnRows:
    """One generation batch as rows: ``inputs`` (the row's trajectory's dataset row),
    ``served`` (the stand-in ``rollout_func``'s output, ``env_mask`` 0 on rows that must not
    train), ``owners`` (the trajectory's index in the batch; -1 for padding), ``advantages``."""

    inputs: list[dict[str, Any]]
    served: dict[str, list[Any]]
    owners: list[int]
    advantages: list[float]

    @property
    def padding(self) -> int:
        return self.owners.count(-1)


def row_advantages(prompts: Sequence[Any], output: Mapping[str, Any]) -> list[float]:
    """One advantage per turn sample of ``output`` (trajectories in order, turns in order), by the
    rollout's ``turn_credit`` and ``turn_normalize`` over the trajectories with equal labels
    (``grouped_turn_advantages``; under ``monte_carlo``, a trajectory without value estimates
    gets 0 and stays out)."""
    method = output.get("turn_credit", "broadcast")
    return grouped_turn_advantages(
        prompts,
        output[TURN_SAMPLES],
        method,
        normalize=output.get("turn_normalize", "trajectory"),
        values=output["turn_values"] if method == "monte_carlo" else None,
    )


def turn_rows(
    inputs: Sequence[Mapping[str, Any]],
    output: Mapping[str, Any],
    *,
    rows_across_ranks: Callable[[int], int],
    multiple: int,
    eos: int,
) -> TurnRows:
    """``output`` (a ``samples="turns"`` rollout of ``inputs``' prompts) as TRL rows: every turn
    sample in order, then padding rows up to ``rows_across_ranks(real rows)`` rounded up to a
    multiple of ``multiple``. A failed trajectory's rows (and padding) carry ``env_mask`` 0."""
    if TURN_SAMPLES not in output:
        raise ValueError("the rollout gave no turn samples: use make_rollout_func(samples='turns')")
    prompts = output.get("labels") or [x["prompt"] for x in inputs]  # refilled groups' own
    advantages = row_advantages(prompts, output)
    served: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs")}
    served.update({k: [] for k in ("env_mask", "env_reward", *_ROW_FIELDS)})
    rows_inputs: list[dict[str, Any]] = []
    owners: list[int] = []
    for index, samples in enumerate(output[TURN_SAMPLES]):
        for sample in samples:
            trains = sample.failure is None
            served["prompt_ids"].append(list(sample.prompt_ids))
            served["completion_ids"].append(list(sample.response_ids))
            served["logprobs"].append(sample.logprobs or [math.nan] * len(sample.response_ids))
            served["env_mask"].append([m if trains else 0 for m in sample.response_mask])
            served["env_reward"].append(float(sample.reward))
            for key in _ROW_FIELDS:  # the trajectory's own figures, once: on its last row
                served[key].append(output[key][index] if sample is samples[-1] else None)
            rows_inputs.append(dict(inputs[index]))
            owners.append(index)
    target = max(int(rows_across_ranks(len(owners))), len(owners))
    target = -(-target // multiple) * multiple
    filler = served["prompt_ids"][0] if owners else [eos]
    for _ in range(target - len(owners)):
        for key, value in (("prompt_ids", filler), ("completion_ids", [eos]), ("logprobs", [0.0])):
            served[key].append(list(value))
        served["env_mask"].append([0])
        served["env_reward"].append(0.0)
        for key in _ROW_FIELDS:
            served[key].append(None)
        rows_inputs.append(dict(inputs[0]))
        owners.append(-1)
        advantages.append(0.0)
    return TurnRows(rows_inputs, served, owners, advantages)


__all__ = ["TURN_SAMPLES", "TurnRows", "row_advantages", "turn_rows"]
