"""Training diagnostics that tell a bug from a recipe, trainer-neutral (no torch).

Every trainer adapter computes the same figures from plain lists, so a GPU user of OpenRLHF,
verl or SkyRL reads the numbers a CPU user of TRL reads:

- ``logprob_gap``: the log-prob the sampler recorded for each planner token against the
  trainer's own forward pass at the same weights. Where they disagree, the policy gradient is
  computed for a policy that did not generate the data: on CPU fp32 with one model object the gap
  is float noise (below 1e-4); bf16, a different kernel or a wrong token alignment shows up here,
  and ``where`` says at which kind of position the largest gaps sit (the first token of the
  first action, the first token after feedback, an action's last token, inside an action).
- ``group_signal``: how many groups carry no signal at all (equal rewards: zero advantage for
  every member) and how large the advantages are.
- ``permuted``: the null control's advantages, shuffled across the batch, so a gain can be read
  against what the optimizer does with the same step sizes and no signal.
- ``DiagnosticsLog``: one JSON line per training step.

``docs/training-diagnostics.md`` says how to read each figure.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = [
    "GAP_POSITIONS",
    "DiagnosticsLog",
    "group_signal",
    "logprob_gap",
    "permuted",
    "position_kinds",
]

GAP_POSITIONS = ("first_token", "after_feedback", "last_token", "inside")
"""The kinds of planner-token position ``logprob_gap`` reports separately."""


def position_kinds(mask: Sequence[int]) -> list[str | None]:
    """The kind of every completion position: ``None`` off the planner's tokens (mask 0), else
    one of ``GAP_POSITIONS``. An action is a run of mask-1 tokens; the first run's first token is
    ``first_token``, a later run's ``after_feedback``, a run's last token ``last_token`` (the
    end-of-turn token when the action ended, or where it was cut)."""
    kinds: list[str | None] = []
    seen_action = False
    for i, m in enumerate(mask):
        if not m:
            kinds.append(None)
            continue
        starts = i == 0 or not mask[i - 1]
        ends = i + 1 == len(mask) or not mask[i + 1]
        if starts:
            kinds.append("after_feedback" if seen_action else "first_token")
            seen_action = True
        elif ends:
            kinds.append("last_token")
        else:
            kinds.append("inside")
    return kinds


def logprob_gap(
    sampler: Sequence[Sequence[float]],
    trainer: Sequence[Sequence[float]],
    masks: Sequence[Sequence[int]],
) -> dict[str, Any]:
    """The absolute gap between sampler and trainer log-probs on planner tokens (mask 1).

    Each argument has one row per sample, aligned token by token with the completion (rows may
    be longer than the mask: padding is ignored). Tokens the sampler could not score (NaN) are
    left out and counted in ``unscored``. Returns ``max``, ``mean``, ``tokens``, ``unscored``
    and, per position kind, ``where[kind] = {"max", "mean", "tokens"}``; ``worst`` names the kind
    holding the largest gap.
    """
    by_kind: dict[str, list[float]] = {kind: [] for kind in GAP_POSITIONS}
    unscored = 0
    for s_row, t_row, mask in zip(sampler, trainer, masks, strict=True):
        for i, kind in enumerate(position_kinds(mask)):
            if kind is None:
                continue
            s, t = float(s_row[i]), float(t_row[i])
            if math.isnan(s) or math.isnan(t):
                unscored += 1
                continue
            by_kind[kind].append(abs(s - t))
    gaps = [g for values in by_kind.values() for g in values]
    where = {
        kind: {
            "max": max(values) if values else 0.0,
            "mean": sum(values) / len(values) if values else 0.0,
            "tokens": len(values),
        }
        for kind, values in by_kind.items()
    }
    worst = max(GAP_POSITIONS, key=lambda kind: where[kind]["max"]) if gaps else None
    return {
        "max": max(gaps) if gaps else 0.0,
        "mean": sum(gaps) / len(gaps) if gaps else 0.0,
        "tokens": len(gaps),
        "unscored": unscored,
        "worst": worst,
        "where": where,
    }


def group_signal(rewards: Sequence[float], group_size: int, eps: float = 1e-4) -> dict[str, float]:
    """Signal in a batch of ``len(rewards) / group_size`` consecutive groups: the fraction of
    groups whose rewards are all equal (no signal: every advantage 0), all 0, all at the group's
    top; and the mean absolute group-normalised advantage ``(r - mean) / (std + eps)``."""
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    groups = [rewards[i : i + group_size] for i in range(0, len(rewards), group_size)]
    equal = zero = 0
    advantages: list[float] = []
    for group in groups:
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / max(1, len(group) - 1))
        if max(group) - min(group) <= 1e-12:
            equal += 1
            zero += int(all(r == 0 for r in group))
        advantages += [abs(r - mean) / (std + eps) for r in group]
    n = len(groups) or 1
    return {
        "groups": len(groups),
        "equal_reward_groups": equal / n,
        "all_zero_groups": zero / n,
        "informative_groups": (len(groups) - equal) / n,
        "mean_abs_advantage": sum(advantages) / len(advantages) if advantages else 0.0,
    }


def permuted(values: Sequence[Any], rng: random.Random) -> list[Any]:
    """``values`` in a random order (the null control's advantages: same distribution, no link
    to the sample each one lands on)."""
    out = list(values)
    rng.shuffle(out)
    return out


class DiagnosticsLog:
    """Appends one JSON object per line to ``path`` (created with its folder); values that JSON
    cannot hold (NaN, infinities) are written as ``null``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = None

    def write(self, record: Mapping[str, Any]) -> None:
        if self._file is None:
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(json.dumps(_finite(dict(record))) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
