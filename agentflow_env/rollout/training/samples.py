"""The one record a trainer trains on, in either of the two shapes a trajectory is cut into.

``TrainerSample`` plays the part of verl's ``AgentLoopOutput``: prompt ids, response ids, the
response mask, the sampling log-probs, the reward, metrics and the failure, plus where the sample
sits in its trajectory. Every driver (the batched ``run_episodes``, the one-trajectory
``run_token_episode``) returns its episodes as lists of them, in the shape the trainer asked for:

``flat``
    One sample per trajectory: the first prompt, then actions and the env's feedback alternating,
    the mask 1 exactly on sampled ids. It needs prompts that only grow (``observation_mode=
    "flat"``). The trajectory-level Flow-GRPO of OpenRLHF's ``group_norm``.
``turns``
    One sample per planner turn (AgentFlow's training shape, "a sequence of single-turn
    updates"): the prompt ids are exactly the observation the policy acted on, rebuilt from
    memory each turn in ``observation_mode="structured"``, the response ids exactly the sampled
    action; every turn carries its trajectory's reward, and the group advantage is broadcast to
    every turn (``turn_sample_advantages``). Any observation mode works; structured is the default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agentflow_env.rollout.labels.shapes import (
    SAMPLE_SHAPES,
    SHAPE_OBSERVATION_MODES,
    SampleShape,
    check_sample_shape,
    shape_observation_mode,
)
from agentflow_env.rollout.training.group_credit import (
    CreditMethod,
    Normalization,
    TrajectoryCredit,
    turn_advantages,
)
from agentflow_env.workflow.trajectory import Trajectory


@dataclass
class TrainerSample:
    """One training sample.

    ``response_mask`` is 1 on sampled ids (all of a turn sample's response; a flat sample's
    actions, not its feedback); ``logprobs`` are the sampling log-probs aligned to
    ``response_ids`` (0 on env tokens), ``None`` when the engine gave none. ``reward`` is the
    trajectory's (the same on every turn sample of it). ``turn`` is the planner turn (1-based; 0
    for a flat sample, which holds them all), ``turns`` the trajectory's number of turns,
    ``is_last_turn`` whether this sample ends its trajectory (always true for a flat one).
    ``failure`` says why the trajectory counts as failed (a zero-reward sample), else ``None``.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    logprobs: list[float] | None
    reward: float
    trajectory_id: str = ""
    turn: int = 0
    turns: int = 0
    is_last_turn: bool = True
    shaping: float = 0.0
    """The turn's shaping reward (``reward_shaping="progress"``); 0 on a flat sample."""
    metrics: dict[str, float] = field(default_factory=dict)
    failure: str | None = None


def turn_samples(
    trajectory: Trajectory,
    reward: float,
    *,
    trajectory_id: str = "",
    metrics: Mapping[str, float] | None = None,
    failure: str | None = None,
    logprob_fill: float | None = None,
) -> list[TrainerSample]:
    """One sample per planner turn of ``trajectory``, token-exact: each turn's prompt ids as the
    policy saw them and its action ids as sampled (``TurnRecord``), with ``reward`` (the
    trajectory's) on every turn. ``logprob_fill``, when set, stands in for the log-probs of a
    turn the engine did not score (else that turn's ``logprobs`` is ``None``)."""
    turns = trajectory.turns
    out: list[TrainerSample] = []
    for index, turn in enumerate(turns):
        logprobs: list[float] | None = None
        if turn.logprobs is not None and len(turn.logprobs) == len(turn.action_ids):
            logprobs = [float(x) for x in turn.logprobs]
        elif logprob_fill is not None:
            logprobs = [logprob_fill] * len(turn.action_ids)
        out.append(
            TrainerSample(
                prompt_ids=list(turn.prompt_ids),
                response_ids=list(turn.action_ids),
                response_mask=[1] * len(turn.action_ids),
                logprobs=logprobs,
                reward=float(reward),
                trajectory_id=trajectory_id,
                turn=index + 1,
                turns=len(turns),
                is_last_turn=index + 1 == len(turns),
                shaping=float(turn.shaping),
                metrics=dict(metrics or {}),
                failure=failure,
            )
        )
    return out


def turn_sample_advantages(
    samples: Sequence[TrainerSample],
    groups: Sequence[str],
    method: CreditMethod = "broadcast",
    *,
    normalize: Normalization = "trajectory",
    values: Mapping[str, Sequence[float | None]] | None = None,
) -> list[float]:
    """One advantage per turn sample: Flow-GRPO's group advantage of each sample's trajectory
    broadcast to its turns (``method="broadcast"``), or the turn-level credit of ``method``
    (``group_credit``). ``groups[i]`` names the task of ``samples[i]`` (samples of one task form
    one group); trajectories are told apart by ``trajectory_id`` and their turns must be
    consecutive. ``normalize``: over the group's trajectories (the paper) or its turn samples
    (AgentFlow's code, where longer trajectories weigh more). Failed trajectories get 0 and stay
    out of their group's statistics. ``values`` (``monte_carlo``): per trajectory id, the value of
    the state each turn acted in."""
    if len(groups) != len(samples):
        raise ValueError(f"{len(groups)} group names for {len(samples)} samples")
    trajectories: dict[str, list[int]] = {}
    group_of: dict[str, str] = {}
    for index, (sample, group) in enumerate(zip(samples, groups, strict=True)):
        members = trajectories.setdefault(sample.trajectory_id, [])
        if members and members[-1] != index - 1:
            raise ValueError(f"trajectory {sample.trajectory_id!r}: its turns are not consecutive")
        if group_of.setdefault(sample.trajectory_id, group) != group:
            raise ValueError(f"trajectory {sample.trajectory_id!r} is in two groups")
        members.append(index)
    out = [0.0] * len(samples)
    by_group: dict[str, list[str]] = {}
    for trajectory_id, members in trajectories.items():
        if all(samples[i].failure is None and samples[i].response_mask for i in members):
            by_group.setdefault(group_of[trajectory_id], []).append(trajectory_id)
    for ids in by_group.values():
        credits = [_credit(samples, trajectories[t], t, method, values) for t in ids]
        per_turn = turn_advantages(credits, method, normalize=normalize)
        for trajectory_id, advantages in zip(ids, per_turn, strict=True):
            for index, advantage in zip(trajectories[trajectory_id], advantages, strict=True):
                out[index] = float(advantage)
    return out


def _credit(
    samples: Sequence[TrainerSample],
    members: list[int],
    trajectory_id: str,
    method: CreditMethod,
    values: Mapping[str, Sequence[float | None]] | None,
) -> TrajectoryCredit:
    shaping = tuple(samples[i].shaping for i in members)
    known = None
    if method == "monte_carlo":
        if values is None or trajectory_id not in values:
            raise ValueError(f"monte_carlo needs the values of trajectory {trajectory_id!r}")
        known = tuple(values[trajectory_id])
    return TrajectoryCredit(samples[members[0]].reward, shaping, known)


__all__ = [
    "SAMPLE_SHAPES",
    "SHAPE_OBSERVATION_MODES",
    "SampleShape",
    "TrainerSample",
    "check_sample_shape",
    "shape_observation_mode",
    "turn_sample_advantages",
    "turn_samples",
]
