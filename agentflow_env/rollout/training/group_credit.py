"""Group credit: advantages for the trajectories of one task, from their rewards and turns.

``flow_grpo_advantages`` gives one value per trajectory; ``turn_advantages`` one per turn, by one
of a family of three named methods.

Flow-GRPO gives every planner turn of trajectory ``i`` the same advantage, its group-normalised
terminal reward. The other two methods give each turn its own value, from what the episode did
after it. Notation, for a group of trajectories ``i`` of the same task, each with turns
``t = 1..T_i``:

- ``R_i``: the terminal reward (the answer's score minus costs), the same for every method;
- ``F_{i,t}``: the potential-based shaping reward of turn ``t`` (``reward_shaping="progress"``:
  ``F = w * (Phi(s_t) - Phi(s_{t-1}))``, ``agentflow_env.workflow.shaping``); zeros without shaping;
- ``V_{i,t}``: an estimate of the expected terminal reward from the state turn ``t`` acted in
  (``s_{t-1}``), e.g. the mean of K forked continuations (``Session.fork``).

Methods (``turn_advantages``):

``broadcast`` (the Flow-GRPO paper)
    ``A_{i,t} = (R_i - mean_j R_j) / (std_j R_j + eps)`` for every turn ``t``.
``progress``
    Shaped returns to go ``G_{i,t} = R_i + sum_{t' >= t} F_{i,t'}``, normalised over all turn
    samples of the group: ``A_{i,t} = (G_{i,t} - mean G) / (std G + eps)``. With potential-based
    shaping ``G_{i,t} = R_i + w * (Phi(s_T) - Phi(s_{t-1}))``: the trajectory's outcome plus its
    final progress, minus the progress already made before the turn (a baseline the turn's own
    action cannot change). Without shaping it is ``broadcast`` with ``normalize="turn"`` (turn
    samples weighted equally, as AgentFlow's training code weighs them).
``monte_carlo`` (VinePPO-style)
    ``A_{i,t} = V_{i,t+1} - V_{i,t}`` with ``V_{i,T_i+1} = R_i``: how much the turn changed the
    expected outcome. Not normalised (its scale is the reward's). ``V_{i,1}``, the value of the
    task's start state, may be given as ``None``: every trajectory of the group starts there, so
    the group's mean terminal reward estimates it (with K = group size).

A group whose rewards (and, for ``progress``, shaped returns; for ``monte_carlo``, values) are all
equal gets zero advantages from every method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, get_args

import numpy as np

from agentflow_env.workflow.trajectory import Trajectory, TurnSample

CreditMethod = Literal["broadcast", "progress", "monte_carlo"]
CREDIT_METHODS: tuple[str, ...] = get_args(CreditMethod)
Normalization = Literal["trajectory", "turn"]
"""What a group's mean and std are taken over: its trajectories (the Flow-GRPO paper) or its
turn samples (AgentFlow's training code)."""
NORMALIZATIONS: tuple[str, ...] = get_args(Normalization)

__all__ = [
    "CREDIT_METHODS",
    "NORMALIZATIONS",
    "CreditMethod",
    "Normalization",
    "TrajectoryCredit",
    "credited_samples",
    "flat_token_advantages",
    "flow_grpo_advantages",
    "turn_advantages",
]


def flow_grpo_advantages(
    rewards: Sequence[float],
    turns: Sequence[int] | None = None,
    *,
    normalize: Normalization = "trajectory",
    eps: float = 1e-9,
    ddof: int = 1,
) -> list[float]:
    """Group-normalised advantages of the trajectories of one task, one value per trajectory.

    ``A_i = (R_i - mean) / (std + eps)``; the caller broadcasts ``A_i`` to every planner turn (and
    token) of trajectory i.

    - ``normalize="trajectory"`` (the Flow-GRPO paper, and OpenRLHF's ``group_norm``): mean and
      std over the group's trajectory rewards, each trajectory counted once.
    - ``normalize="turn"`` (what the AgentFlow code does): every planner turn is a sample carrying
      its trajectory's reward, so mean and std are over turn samples and longer trajectories
      weigh more. Needs ``turns`` (planner turns per trajectory).

    ``ddof=1`` (unbiased std) and ``eps=1e-9`` match OpenRLHF and ``torch.std``. A group whose
    rewards are all equal gets zero advantages.
    """
    values = np.asarray(rewards, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError("rewards must be a non-empty 1-D sequence")
    if normalize == "trajectory":
        population = values
    elif normalize == "turn":
        if turns is None or len(turns) != len(values):
            raise ValueError("normalize='turn' needs the number of turns of every trajectory")
        counts = np.asarray(turns, dtype=np.int64)
        if (counts < 1).any():
            raise ValueError("every trajectory needs at least one turn")
        population = np.repeat(values, counts)
    else:
        raise ValueError(f"normalize must be 'trajectory' or 'turn', got {normalize!r}")
    if np.all(population == population[0]):
        return [0.0] * len(values)
    std = float(population.std(ddof=ddof)) if population.size > ddof else 0.0
    mean = float(population.mean())
    return [float((r - mean) / (std + eps)) for r in values]


@dataclass(frozen=True)
class TrajectoryCredit:
    """What the advantage of each turn of one trajectory is computed from.

    ``shaping`` has one entry per planner turn (its length is the number of turns); ``values``
    (``monte_carlo`` only) has one entry per turn too: ``values[t-1]`` estimates the expected
    terminal reward from the state turn ``t`` acted in (``None`` allowed for the first).
    """

    reward: float
    shaping: tuple[float, ...]
    values: tuple[float | None, ...] | None = None

    @property
    def turns(self) -> int:
        return len(self.shaping)

    @classmethod
    def of(
        cls, trajectory: Trajectory, values: Sequence[float | None] | None = None
    ) -> TrajectoryCredit:
        """A finished trajectory's terminal reward and per-turn shaping rewards (``values``
        for ``monte_carlo``)."""
        shaping = tuple(t.shaping for t in trajectory.turns)
        return cls(trajectory.reward, shaping, None if values is None else tuple(values))

    @classmethod
    def unshaped(cls, reward: float, turns: int) -> TrajectoryCredit:
        """A trajectory with no shaping rewards (``broadcast`` and ``progress`` need no more)."""
        return cls(float(reward), (0.0,) * turns)


def turn_advantages(
    group: Sequence[TrajectoryCredit],
    method: CreditMethod = "broadcast",
    *,
    normalize: Normalization = "trajectory",
    eps: float = 1e-9,
    ddof: int = 1,
) -> list[list[float]]:
    """One advantage per turn of every trajectory of ``group`` (the trajectories of one task), by
    ``method`` (see the module docstring for the definitions). ``normalize`` (``broadcast``
    only): over the group's trajectories or its turn samples (``flow_grpo_advantages``);
    ``progress`` always normalises over turn samples and ``monte_carlo`` not at all, so they
    refuse ``"turn"`` rather than ignore it. ``eps`` and ``ddof`` are the normalisation's
    (``flow_grpo_advantages``'s defaults: unbiased std, as OpenRLHF and torch)."""
    if not group:
        raise ValueError("a group needs at least one trajectory")
    if any(t.turns < 1 for t in group):
        raise ValueError("every trajectory needs at least one turn")
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {list(NORMALIZATIONS)}, got {normalize!r}")
    if normalize != "trajectory" and method != "broadcast":
        raise ValueError(
            f"normalize={normalize!r} is broadcast's choice; {method} has its own normalisation"
        )
    if method == "broadcast":
        per_trajectory = flow_grpo_advantages(
            [t.reward for t in group],
            [t.turns for t in group],
            normalize=normalize,
            eps=eps,
            ddof=ddof,
        )
        return [[a] * t.turns for t, a in zip(group, per_trajectory, strict=True)]
    if method == "progress":
        return _normalised([_returns_to_go(t) for t in group], eps, ddof)
    if method == "monte_carlo":
        return _value_differences(group)
    raise ValueError(f"method must be one of {list(CREDIT_METHODS)}, got {method!r}")


def _returns_to_go(trajectory: TrajectoryCredit) -> list[float]:
    shaping = np.asarray(trajectory.shaping, dtype=np.float64)
    to_go = np.cumsum(shaping[::-1])[::-1]
    return [float(trajectory.reward + g) for g in to_go]


def _normalised(returns: list[list[float]], eps: float, ddof: int) -> list[list[float]]:
    population = np.asarray([g for row in returns for g in row], dtype=np.float64)
    if np.all(population == population[0]):
        return [[0.0] * len(row) for row in returns]
    mean = float(population.mean())
    std = float(population.std(ddof=ddof)) if population.size > ddof else 0.0
    return [[(g - mean) / (std + eps) for g in row] for row in returns]


def _value_differences(group: Sequence[TrajectoryCredit]) -> list[list[float]]:
    start = float(np.mean([t.reward for t in group]))
    out: list[list[float]] = []
    for trajectory in group:
        values = trajectory.values
        if values is None or len(values) != trajectory.turns:
            raise ValueError(
                "monte_carlo needs one value per turn (the value of the state each turn acted in)"
            )
        if any(v is None for v in values[1:]):
            raise ValueError("only the first value (the start state's) may be None")
        known = [start if values[0] is None else float(values[0])]
        known += [float(v) for v in values[1:] if v is not None]
        after = known[1:] + [trajectory.reward]
        out.append([float(b - a) for a, b in zip(known, after, strict=True)])
    return out


def credited_samples(trajectory: Trajectory, advantages: Sequence[float]) -> list[TurnSample]:
    """The trajectory's ``per_turn`` samples, each carrying its turn's advantage (one of the
    lists ``turn_advantages`` returns), for a trainer that takes per-sample advantages."""
    samples = trajectory.per_turn_samples()
    if len(advantages) != len(samples):
        raise ValueError(f"{len(advantages)} advantages for {len(samples)} turns")
    return [replace(s, advantage=float(a)) for s, a in zip(samples, advantages, strict=True)]


def flat_token_advantages(
    advantages: Sequence[float],
    action_lengths: Sequence[int],
    feedback_lengths: Sequence[int],
) -> list[float]:
    """Per-token advantages over a flat sample's completion (action 1, feedback 1, action 2, ...,
    the last action; ``Trajectory.flat_sample``): each action's tokens carry their turn's
    advantage, feedback tokens 0 (they are masked out of the loss anyway)."""
    if not len(advantages) == len(action_lengths) == len(feedback_lengths):
        raise ValueError("one advantage, action length and feedback length per turn")
    out: list[float] = []
    last = len(advantages) - 1
    for index, (advantage, action, feedback) in enumerate(
        zip(advantages, action_lengths, feedback_lengths, strict=True)
    ):
        out += [float(advantage)] * action
        if index < last:
            out += [0.0] * feedback
    return out
