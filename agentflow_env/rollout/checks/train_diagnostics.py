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
- ``DiagnosticsLog``: one JSON line per training step; ``StepFigures``: a step's figures as a
  trainer collects them, handed out (and logged) at the step's end;
- ``planner_token_figures``: entropy, KL to the starting policy and the log-prob gap on planner
  tokens from a trainer's forward pass (its tensors, read through their methods).

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
    "StepFigures",
    "group_signal",
    "logprob_gap",
    "permuted",
    "planner_token_figures",
    "position_kinds",
]

GAP_POSITIONS = ("first_token", "after_feedback", "last_token", "inside")
"""The kinds of planner-token position ``logprob_gap`` reports separately."""
GAP_FIGURES = ("max", "mean", "worst", "where")
"""The ``logprob_gap`` figures ``planner_token_figures`` logs."""


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


def planner_token_figures(
    mask: Any, entropy: Any, logps: Any, start_logps: Any = None, sampling: Any = None
) -> dict[str, Any]:
    """The ``diag/*`` figures of one batch's forward pass over its completions: ``mask`` 1 on
    planner tokens, per-token ``entropy`` and ``logps`` of the trained model, ``start_logps`` of
    the starting model (``diag/kl_to_start``, the k3 estimator), ``sampling`` the sampler's
    recorded log-probs (``logprob_gap``). All are ``(rows, tokens)`` tensors (torch's, used
    through their methods: no torch import here); ``None``: the figure is left out."""
    planner = mask.bool()
    tokens = max(1, int(planner.sum()))
    record: dict[str, Any] = {
        "diag/planner_tokens": int(planner.sum()),
        "diag/entropy": float(entropy[planner].sum()) / tokens,
        "diag/answer_tokens": int(planner.sum()) / max(1, mask.size(0)),
    }
    if start_logps is not None:
        delta = (start_logps - logps)[planner]
        record["diag/kl_to_start"] = float((delta.exp() - delta - 1).sum()) / tokens
    if sampling is not None:
        gap = logprob_gap(sampling.tolist(), logps.tolist(), mask.int().tolist())
        record.update({f"diag/logprob_gap_{key}": gap[key] for key in GAP_FIGURES})
    return record


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


class StepFigures:
    """One optimizer step's figures as a trainer collects them (``pending``): the rollout's and
    the update's times, the batch's ``diag/*``; ``end`` hands them out once per step, each step
    one line of the JSONL log at ``path`` (``None``: no log)."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.pending: dict[str, Any] = {}
        self.log = DiagnosticsLog(path) if path else None

    def rollout(self, seconds: float, timing: Mapping[str, float]) -> None:
        """The rollout took ``seconds``; ``timing``: its split (``time/<name>``)."""
        self.pending["time/rollout_s"] = seconds
        for name, value in timing.items():
            self.pending[f"time/{name}"] = value

    def update(self, elapsed: float) -> None:
        """A training step took ``elapsed`` seconds, with the generation (``time/
        generate_and_score_s``) when it ran in it: that part is split off into scoring (less
        the rollout) and the rest is the update's."""
        generation = self.pending.pop("time/generate_and_score_s", None)
        if generation is not None:
            rollout = self.pending.get("time/rollout_s", 0.0)
            self.pending["time/scoring_and_diagnostics_s"] = generation - rollout
            elapsed -= generation
        self.pending["time/update_s"] = self.pending.get("time/update_s", 0.0) + elapsed

    def end(self, step: int) -> dict[str, float]:
        """The step's numeric figures (for the trainer's metrics), every figure written to the
        log; the next step starts empty."""
        pending, self.pending = self.pending, {}
        if self.log is not None:
            self.log.write({"step": step, **pending})
        return {
            name: float(value)
            for name, value in pending.items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        }

    def held_out(self, step: int, result: Mapping[str, Any]) -> dict[str, Any]:
        """The held-out probe's ``result`` at ``step`` as ``held_out/*``, written to the log."""
        record = {"step": step, **{f"held_out/{k}": v for k, v in result.items()}}
        if self.log is not None:
            self.log.write(record)
        return record


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
