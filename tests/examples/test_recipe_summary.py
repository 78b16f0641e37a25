"""The recipe's summary (``examples/trl/recipe_summary.py``): the figures of each scored run
beside its start, and the main-task target checked one condition at a time, on hand-built
result files whose answers are known."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples" / "trl"))
import recipe_summary  # noqa: E402


def scored(outcomes: list[int], pass_at_8: float, invalid: float, temperature: float = 0.7):
    """A result file's shape: greedy outcomes on the suite, pass@8 on its first 10 episodes."""
    return {
        "train_s": 100.0,
        "greedy": {
            "episodes": len(outcomes),
            "success": sum(outcomes) / len(outcomes),
            "ci95": [0.0, 1.0],
            "invalid_actions": invalid,
            "outcomes": outcomes,
        },
        "sampled": {
            "temperature": temperature,
            "k": 8,
            "episodes": 10,
            "pass_at_1": 0.3,
            "pass_at_8": pass_at_8,
        },
    }


# The start solves 2 of the first 10 episodes greedily and 6 of them within 8 samples: its gap on
# those 10 is 0.4. 20 episodes in all.
START = scored([1, 1] + [0] * 8 + [1] * 5 + [0] * 5, pass_at_8=0.6, invalid=0.01)


def test_gap_closed_counts_only_the_episodes_pass_at_k_was_scored_on() -> None:
    # Greedy now solves 4 of the first 10 (half the gap) and loses the later ones: only the
    # first 10 count.
    run = scored([1] * 4 + [0] * 6 + [0] * 10, pass_at_8=0.6, invalid=0.0)
    assert recipe_summary.gap_closed(START, run) == pytest.approx(0.5)
    no_gap = scored(START["greedy"]["outcomes"], pass_at_8=0.2, invalid=0.0)
    assert recipe_summary.gap_closed(no_gap, run) is None


def test_pass_at_k_is_compared_only_at_the_start_temperature() -> None:
    run = scored(START["greedy"]["outcomes"], pass_at_8=0.7, invalid=0.0, temperature=0.4)
    with pytest.raises(ValueError, match="temperature"):
        recipe_summary.run_figures(START, run)


def figures(outcomes: list[int], pass_at_8: float, invalid: float) -> dict[str, Any]:
    return recipe_summary.run_figures(START, scored(outcomes, pass_at_8, invalid))


def test_the_target_holds_only_when_every_condition_does() -> None:
    strong = [1] * 20  # +65 points over the start, more than the whole gap closed
    weak = START["greedy"]["outcomes"]
    seeds = {
        "0": {
            "grpo": {
                **figures(strong, 0.9, 0.0),
                "gain_over_null": {"points": 50.0, "ci95_points": [30.0, 70.0]},
            }
        }
    }
    checks = recipe_summary.target_checks(START, seeds)
    assert all(checks.values()), checks

    no_null = {"0": {"grpo": figures(strong, 0.9, 0.0)}}
    assert not recipe_summary.target_checks(START, no_null)["every_seed_beats_its_null"]

    null_gain = seeds["0"]["grpo"]["gain_over_null"]
    flat = {"0": {"grpo": {**figures(weak, 0.6, 0.0), "gain_over_null": null_gain}}}
    checks = recipe_summary.target_checks(START, flat)
    assert not checks["mean_gain_at_least_6_points"]
    assert not checks["every_seed_gain_ci_above_0"]
    assert not checks["half_the_pass_at_k_gap_closed"]
    assert checks["pass_at_k_not_fallen"]

    damaged = {"0": {"grpo": {**figures(strong, 0.5, 0.3), "gain_over_null": null_gain}}}
    checks = recipe_summary.target_checks(START, damaged)
    assert not checks["pass_at_k_not_fallen"]
    assert not checks["invalid_actions_not_risen"]
    assert checks["mean_gain_at_least_6_points"]


def test_summarize_writes_every_arm_beside_the_start(tmp_path: Path) -> None:
    (tmp_path / "start.json").write_text(json.dumps(START))
    better = [1] * 4 + [0] * 6 + [1] * 5 + [0] * 5  # +10 points, half the gap closed
    for name, outcomes in (("grpo", better), ("null", START["greedy"]["outcomes"])):
        result = {**scored(outcomes, 0.6, 0.0), "seed": 0}
        (tmp_path / f"{name}_seed0.json").write_text(json.dumps(result))
    (tmp_path / "more_sft.json").write_text(json.dumps({**scored(better, 0.7, 0.0), "steps": 40}))
    args = argparse.Namespace(start=str(tmp_path / "start"), start_step=None)  # a path: read as is

    hops = [1, 2] * 10  # the gains are episodes 2 (1 hop) and 3 (2 hops), counted from 0
    summary = recipe_summary.summarize(tmp_path, args, hops)

    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert (tmp_path / "recipe.png").stat().st_size > 0
    row = summary["seeds"]["0"]
    assert row["grpo"]["gain_over_start"]["points"] == pytest.approx(10.0)
    assert row["null"]["gain_over_start"]["points"] == pytest.approx(0.0)
    assert row["grpo"]["gain_over_null"]["won"] == 2
    assert summary["over_seeds"]["gain_over_null_points"]["mean"] == pytest.approx(10.0)
    assert summary["over_seeds"]["rft_gain_over_start_points"] is None
    assert summary["over_seeds"]["gap_closed"]["mean"] == pytest.approx(0.5)
    by_hops = row["grpo"]["gain_over_start_by_hops"]
    assert {h: g["episodes"] for h, g in by_hops.items()} == {"1": 10, "2": 10}
    assert by_hops["1"]["points"] == pytest.approx(10.0)
    assert by_hops["2"]["points"] == pytest.approx(10.0)
    assert row["null"]["gain_over_start_by_hops"]["2"]["won"] == 0
    assert summary["more_sft"]["steps"] == 40
    assert summary["targets"]["mean_gain_at_least_6_points"]
    assert summary["targets"]["half_the_pass_at_k_gap_closed"]


def test_per_turn_runs_are_scored_against_the_start_on_their_own_prompts(tmp_path: Path) -> None:
    (tmp_path / "start.json").write_text(json.dumps(START))
    args = argparse.Namespace(start=str(tmp_path / "start"), start_step=None)
    flat = [1] * 4 + [0] * 6 + [1] * 5 + [0] * 5
    (tmp_path / "grpo_seed0.json").write_text(json.dumps({**scored(flat, 0.6, 0.0), "seed": 0}))
    turns = [1] * 6 + [0] * 4 + [1] * 5 + [0] * 5
    run = {**scored(turns, 0.6, 0.0), "seed": 0, "steps": 30, "train_s": 90.0}
    (tmp_path / "grpo_turns_seed0.json").write_text(json.dumps(run))
    with pytest.raises(SystemExit, match="--phases start --samples turns"):
        recipe_summary.summarize(tmp_path, args)

    # On its structured prompts the start solves one episode fewer than on flat ones.
    structured = [1] + [0] * 9 + [1] * 5 + [0] * 5
    (tmp_path / "start_turns.json").write_text(json.dumps(scored(structured, 0.6, 0.02)))
    turns_summary = recipe_summary.summarize(tmp_path, args)["turns"]

    assert turns_summary["start"]["greedy"] == pytest.approx(0.3)
    assert turns_summary["start"]["gain_over_flat_start"]["points"] == pytest.approx(-5.0)
    row = turns_summary["seeds"]["0"]
    assert row["gain_over_start"]["points"] == pytest.approx(25.0)  # 5 more episodes of 20
    assert row["gain_over_flat"]["points"] == pytest.approx(10.0)
    assert row["gap_closed"] == pytest.approx(1.0)  # 1 of 10 -> 6 of 10, pass@8 6 of 10
    assert (row["steps"], row["train_s"], row["flat_train_s"]) == (30, 90.0, 100.0)
