"""Turn-level advantages (``agentflow_env.rollout.training.group_credit``) against hand-computed values."""

from __future__ import annotations

import math

import pytest

from agentflow_env.rollout.training.group_credit import (
    TrajectoryCredit,
    credited_samples,
    flat_token_advantages,
    flow_grpo_advantages,
    turn_advantages,
)
from agentflow_env.workflow.trajectory import Trajectory, TurnRecord

EPS = 1e-9


def credit(reward: float, shaping: tuple[float, ...], values=None) -> TrajectoryCredit:
    return TrajectoryCredit(reward, shaping, values)


def test_broadcast_gives_every_turn_its_trajectorys_flow_grpo_advantage() -> None:
    # rewards 1, 0: mean 0.5, unbiased std sqrt(0.5)
    a = 0.5 / (math.sqrt(0.5) + EPS)
    got = turn_advantages([credit(1, (0.3, 0.2)), credit(0, (0.0,))], "broadcast")
    assert got == [pytest.approx([a, a]), pytest.approx([-a])]


def test_progress_normalises_shaped_returns_to_go_over_the_groups_turns() -> None:
    # T1: R=1, F=(0.5, 0.5) -> G = (2.0, 1.5); T2: R=0, F=(0.5, 0.0) -> G = (0.5, 0.0)
    # population 2, 1.5, 0.5, 0: mean 1, unbiased std sqrt(2.5 / 3)
    std = math.sqrt(2.5 / 3)
    got = turn_advantages([credit(1, (0.5, 0.5)), credit(0, (0.5, 0.0))], "progress")
    assert got[0] == pytest.approx([1 / (std + EPS), 0.5 / (std + EPS)])
    assert got[1] == pytest.approx([-0.5 / (std + EPS), -1 / (std + EPS)])


def test_progress_without_shaping_is_flow_grpo_normalised_over_turns() -> None:
    group = [TrajectoryCredit.unshaped(1, 3), TrajectoryCredit.unshaped(0, 1)]
    per_trajectory = flow_grpo_advantages([1, 0], [3, 1], normalize="turn")
    assert turn_advantages(group, "progress") == [
        pytest.approx([per_trajectory[0]] * 3),
        pytest.approx([per_trajectory[1]]),
    ]


def test_monte_carlo_is_the_change_in_value_each_turn_makes() -> None:
    # The start state's value (None) is the group's mean reward, 0.5.
    group = [credit(1, (0, 0), (None, 0.5)), credit(0, (0,), (None,))]
    assert turn_advantages(group, "monte_carlo") == [
        pytest.approx([0.0, 0.5]),
        pytest.approx([-0.5]),
    ]
    # A given start value is used as it is.
    assert turn_advantages([credit(1, (0, 0), (0.25, 0.75))], "monte_carlo") == [
        pytest.approx([0.5, 0.25])
    ]


@pytest.mark.parametrize("method", ["broadcast", "progress", "monte_carlo"])
def test_groups_with_equal_rewards_get_zero_advantages(method: str) -> None:
    group = [credit(1, (0.0, 0.0), (None, 1.0)), credit(1, (0.0,), (None,))]
    assert turn_advantages(group, method) == [[0.0, 0.0], [0.0]]  # type: ignore[arg-type]


def test_equal_rewards_but_different_progress_still_separate_turns() -> None:
    # Both succeed; the second needed a second turn after little progress in its first.
    got = turn_advantages([credit(1, (1.0,)), credit(1, (0.5, 0.5))], "progress")
    # G: (2.0), (2.0, 1.5): mean 11/6
    assert got[0][0] > 0 and got[1][0] > 0 and got[1][1] < 0


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one trajectory"):
        turn_advantages([], "broadcast")
    with pytest.raises(ValueError, match="one value per turn"):
        turn_advantages([credit(1, (0, 0), (None,))], "monte_carlo")
    with pytest.raises(ValueError, match="only the first value"):
        turn_advantages([credit(1, (0, 0), (None, None))], "monte_carlo")
    with pytest.raises(ValueError, match="method must be one of"):
        turn_advantages([credit(1, (0,))], "critic")  # type: ignore[arg-type]


def test_flat_token_advantages_put_each_turns_value_on_its_action_tokens() -> None:
    got = flat_token_advantages([0.5, -1.0], [2, 3], [4, 7])
    assert got == [0.5, 0.5, 0.0, 0.0, 0.0, 0.0, -1.0, -1.0, -1.0]
    with pytest.raises(ValueError):
        flat_token_advantages([0.5], [2, 3], [4, 7])


def test_credited_samples_carry_their_turns_advantage_and_rewards() -> None:
    turns = [
        TurnRecord(1, (1, 2), (3,), "a", True, reward=0.5, shaping=0.5),
        TurnRecord(2, (1, 2, 3, 4), (5,), "b", True, reward=1.5, shaping=0.5),
    ]
    trajectory = Trajectory("t", "flat", turns, reward=1.0, success=True)
    assert TrajectoryCredit.of(trajectory) == TrajectoryCredit(1.0, (0.5, 0.5))
    samples = credited_samples(trajectory, [0.25, -0.75])
    assert [(s.advantage, s.reward, s.shaping) for s in samples] == [
        (0.25, 0.5, 0.5),
        (-0.75, 1.5, 0.5),
    ]
    with pytest.raises(ValueError):
        credited_samples(trajectory, [0.25])
