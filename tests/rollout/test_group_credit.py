"""Flow-GRPO advantages against hand-computed values."""

from __future__ import annotations

import math

import pytest

from agentflow_env.rollout.training.group_credit import flow_grpo_advantages


def test_trajectory_normalisation_matches_hand_computation():
    # rewards 1, 0, 0, 1: mean 0.5, unbiased std sqrt(1/3)
    std = math.sqrt(1 / 3)
    a = 0.5 / (std + 1e-9)
    expected = [a, -a, -a, a]
    got = flow_grpo_advantages([1, 0, 0, 1])
    assert got == pytest.approx(expected, rel=1e-12)


def test_population_std_option():
    got = flow_grpo_advantages([1, 0], ddof=0, eps=0.0)
    assert got == pytest.approx([1.0, -1.0])


def test_turn_normalisation_weighs_long_trajectories_more():
    # Trajectory A: reward 1 over 3 turns; B: reward 0 over 1 turn.
    # Turn samples: 1, 1, 1, 0 -> mean 0.75, unbiased std = sqrt(0.25) = 0.5
    got = flow_grpo_advantages([1, 0], [3, 1], normalize="turn")
    assert got == pytest.approx([0.25 / (0.5 + 1e-9), -0.75 / (0.5 + 1e-9)], rel=1e-12)
    # Per trajectory the same rewards give symmetric advantages.
    assert flow_grpo_advantages([1, 0]) == pytest.approx(
        [0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5)]
    )


@pytest.mark.parametrize("rewards", [[1, 1, 1, 1], [0, 0], [0.3], [-2.0, -2.0, -2.0]])
def test_degenerate_groups_give_zero_not_nan(rewards):
    for normalize in ("trajectory", "turn"):
        got = flow_grpo_advantages(rewards, [2] * len(rewards), normalize=normalize)
        assert got == [0.0] * len(rewards)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="non-empty"):
        flow_grpo_advantages([])
    with pytest.raises(ValueError, match="turns"):
        flow_grpo_advantages([1, 0], normalize="turn")
    with pytest.raises(ValueError, match="normalize"):
        flow_grpo_advantages([1, 0], normalize="token")  # type: ignore[arg-type]
