"""The probe envs (``AgentFlow-Probe-*-v0``): built by ``gym.make``, valid Gymnasium envs,
solved by the expert, at chance under their random demonstrators, strict about the settings
they need; and the shortest probe learned through the real TRL adapter."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentflow_env  # noqa: F401  (registers the envs)
from agentflow_env.envs.config import PROBE_ENV_IDS, UnknownSettingError
from agentflow_env.rollout.agents.episodes import run_episode
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.rollout.agents.probes import probe_demonstrations, random_episodes
from agentflow_env.rollout.labels.plans import plan_episode, task_prompt
from agentflow_env.rollout.labels.probe_labels import probe_label
from agentflow_env.rollout.labels.spec import TaskSpec
from agentflow_env.tasks.base import Evidence
from agentflow_env.tasks.probes import (
    PROBES,
    CodeSolver,
    ExactNameSolver,
    FirstCallSolver,
    ReadingsSolver,
)

CHANCE = {"tool_choice": 1 / 4, "stop": 1 / 3, "delayed_credit": 1 / 4, "copying": 1 / 4}


def evidence(tool: str, output: str, query: str = "", ok: bool = True) -> Evidence:
    return Evidence(tool, {"query": query} if query else {}, output, ok)


def test_every_probe_has_a_registered_env() -> None:
    assert tuple(PROBE_ENV_IDS) == PROBES
    assert set(PROBE_ENV_IDS.values()) <= set(gym.registry)


@pytest.mark.parametrize("probe", PROBES)
def test_gym_make_builds_a_probe_env_that_passes_check_env(probe: str) -> None:
    # check_env takes a truncation after its first step for a bug: give one-turn probes two.
    turns = {"max_turns": 2} if probe in ("tool_choice", "copying") else {}
    env = gym.make(PROBE_ENV_IDS[probe], split="test", **turns)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []
    observation, info = env.reset(seed=3)
    assert info["question"] in observation["text"]
    assert env.unwrapped.task.kind == f"probe_{probe}" and env.unwrapped.task.split == "test"
    env.close()


@pytest.mark.parametrize("probe", PROBES)
def test_the_expert_solves_every_probe(probe: str) -> None:
    env = gym.make(PROBE_ENV_IDS[probe], split="test")
    records = [run_episode(env, ExpertPlanner(env), seed=seed) for seed in range(100)]
    assert all(record.success and record.reward == 1.0 for record in records)
    env.close()


@pytest.mark.parametrize("probe", PROBES)
def test_the_random_demonstrator_is_at_chance(probe: str) -> None:
    episodes = random_episodes(probe, range(600), seed=0)
    rate = sum(episode.success for episode in episodes) / len(episodes)
    assert abs(rate - CHANCE[probe]) < 0.06, rate
    assert random_episodes(probe, range(5), seed=0) == episodes[:5]  # seeded


def test_demonstrations_are_expert_demonstration_records_of_every_turn() -> None:
    records = probe_demonstrations("stop", range(20), seed=0)
    assert {tuple(sorted(r)) for r in records} == {
        ("completion", "completion_ids", "prompt", "prompt_ids")
    }
    finishes = [r for r in records if r["completion"] == "Tool Name: Finish<|im_end|>"]
    assert 0 < len(finishes) <= 20 < len(records)  # one finish at most per episode, often later
    assert all(r["prompt"].endswith("<|im_start|>assistant\n") for r in records)
    copying = probe_demonstrations("copying", range(40), seed=0)
    assert all(r["completion"].endswith("\nTool Name: Search<|im_end|>") for r in copying)


def test_the_tool_choice_probe_pays_exactly_one_drawer() -> None:
    env = gym.make(PROBE_ENV_IDS["tool_choice"])
    env.reset(seed=5)
    target = env.unwrapped.task.metadata["target"]
    paid = []
    for tool in env.unwrapped.tools.names:
        env.reset(seed=5)
        paid.append(env.step(f"Context: x\nTool Name: {tool}")[1])
    assert paid == [1.0 if tool == target else 0.0 for tool in env.unwrapped.tools.names]
    env.close()


def test_the_stop_probe_pays_a_finish_right_after_the_confirmation_only() -> None:
    env = gym.make(PROBE_ENV_IDS["stop"], max_turns=4)
    env.reset(seed=2)
    readings = env.unwrapped.task.metadata["readings"]
    rewards = {}
    for finish_after in range(4):
        env.reset(seed=2)
        for _ in range(finish_after):
            observation, *_ = env.step("Tool Name: Red_Drawer")
        _, reward, terminated, _, info = env.step("Tool Name: Finish")
        assert terminated and info["end_reason"] == "planner_stop"
        rewards[finish_after] = reward
    assert rewards == {n: float(n == readings) for n in range(4)}
    env.reset(seed=2)
    for _ in range(4):  # never finishing: the turn limit, one reading too many
        *_, truncated, info = env.step("Tool Name: Red_Drawer")
    assert truncated and not info["success"]
    env.reset(seed=2)
    for _ in range(readings):
        env.step("Tool Name: Red_Drawer")
    for _ in range(4 - readings):  # stalling to the turn limit instead of finishing
        _, reward, _, truncated, info = env.step("Tool Name: nothing")
    assert truncated and info["success"] and reward == 1.0 - (4 - readings)  # lambda_errors=1
    env.close()


def test_the_delayed_credit_probe_decides_on_the_first_drawer_and_pays_at_the_last_turn() -> None:
    env = gym.make(PROBE_ENV_IDS["delayed_credit"])
    env.reset(seed=4)
    target = env.unwrapped.task.metadata["target"]
    other = next(t for t in env.unwrapped.tools.names if t != target)
    for first, later, paid in ((target, other, 1.0), (other, target, 0.0)):
        env.reset(seed=4)
        steps = [env.step(f"Tool Name: {tool}") for tool in (first, later, later)]
        assert [s[1] for s in steps] == [0.0, 0.0, paid]
        assert not any(s[2] or s[3] for s in steps[:2]) and steps[-1][3]  # the turn limit
    env.close()


def test_the_copying_probe_wants_the_name_exactly() -> None:
    env = gym.make(PROBE_ENV_IDS["copying"])
    env.reset(seed=1)
    name = env.unwrapped.task.metadata["entity"]
    for query, paid in ((name, 1.0), (f" {name} ", 1.0), (name[:-2], 0.0)):
        env.reset(seed=1)
        assert env.step(f"Context: {query}\nTool Name: Search")[1] == paid
    for wrong in (f"{name} keep", name.lower(), name[:-1]):
        env.reset(seed=1)
        assert env.step(f"Context: {wrong}\nTool Name: Search")[1] == 0.0
    env.close()


def test_the_evidence_readers() -> None:
    code = evidence("Red_Drawer", "The Red drawer holds code 1234.")
    empty = evidence("Blue_Drawer", "The Blue drawer holds no code.")
    assert CodeSolver().solve([empty, code]) == "1234"
    assert FirstCallSolver().solve([code, empty]) == "1234"
    assert FirstCallSolver().solve([empty, code]) is None
    assert FirstCallSolver().solve([]) is None
    readings = ReadingsSolver("Red_Drawer", 2)
    assert [readings.solve([empty, *[code] * n]) for n in range(4)] == [None, None, "1234", None]
    found = "[1] Adavex\nAdavex keeps code 4321.\n\n[2] Borin\nBorin keeps code 1111."
    solver = ExactNameSolver("Adavex")
    assert solver.solve([evidence("Search", found, "Adavex")]) == "4321"
    assert solver.solve([evidence("Search", found, "Adavex keep")]) is None
    assert solver.solve([evidence("Search", found, "Adave")]) is None
    assert solver.solve([evidence("Search", found, "Adavex", ok=False)]) is None
    assert ExactNameSolver("Borin").solve([evidence("Search", found, "Borin")]) == "1111"


@pytest.mark.parametrize(
    ("probe", "settings", "message"),
    [
        ("tool_choice", {"hops": 2}, "does not use hops=: it generates its own probe tasks"),
        ("tool_choice", {"tools": ["Red_Drawer", "Search"]}, "needs at least 2 drawer tool"),
        ("stop", {"termination": "both"}, "needs termination='planner'"),
        ("stop", {"max_turns": 1}, "needs max_turns >= 2"),
        ("delayed_credit", {"termination": "verifier"}, "needs termination='planner'"),
        ("copying", {"entities": 0}, "entities must be >= 1"),
        ("copying", {"drawers": 3}, "has no setting drawers="),
    ],
)
def test_settings_a_probe_cannot_work_with_are_rejected(
    probe: str, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        gym.make(PROBE_ENV_IDS[probe], **settings)
    assert issubclass(UnknownSettingError, ValueError)


def test_trainer_labels_name_the_probe_env_without_the_search_defaults() -> None:
    plan = plan_episode(probe_label("copying", 7, entities=2))
    assert plan.env_id == PROBE_ENV_IDS["copying"] and plan.env_kwargs == {"entities": 2}
    plan = plan_episode(task_prompt(7), env_id=PROBE_ENV_IDS["stop"])
    assert plan.env_id == PROBE_ENV_IDS["stop"] and plan.env_kwargs == {}


def test_prepare_data_writes_probe_labels_that_pin_the_turn_limit(tmp_path: Path) -> None:
    from conftest import load_adapter

    prepare = load_adapter("adapters/openrlhf/prepare_data.py", "agentflow_prepare_probes")
    out = tmp_path / "probe.jsonl"
    argv = ["probe", "--probe", "tool_choice", "--out", str(out), "--count", "3", "--split", "test"]
    assert prepare.main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    specs = [TaskSpec.from_json(row["label"]) for row in rows]
    assert [(s.env_id, s.seed, dict(s.env_kwargs)) for s in specs] == [
        (PROBE_ENV_IDS["tool_choice"], seed, {"max_turns": 1, "split": "test"}) for seed in range(3)
    ]
    env = specs[2].make_env()
    assert specs[2].resolve(env.task_source).question == rows[2]["prompt"]
    assert rows[0]["datasource"] == "probe-tool_choice"
    env.close()


# -- learning through the real TRL adapter --------------------------------------------------------
def test_grpo_through_the_trl_adapter_learns_the_tool_choice_probe() -> None:
    """The tool-choice probe as ``examples/trl/probes.py`` runs it (the tiny planner, a short SFT
    on the random demonstrator, GRPO with TRL's ``GRPOTrainer`` and
    ``make_rollout_func(env_id=...)``), 40 GRPO steps instead of 60, 100 held-out episodes.
    CPU training is deterministic with fixed seeds; this seed starts at 0 % and ends at 100 %
    (seeds 0-3 end at 100, 100, 74 and 73 % after 40 steps)."""
    pytest.importorskip("trl")
    from conftest import load_adapter

    probes = load_adapter("examples/trl/probes.py", "agentflow_probes_example")
    args = probes.build_parser().parse_args(
        ["--probe", "tool_choice", "--seed", "0", "--threads", "2", "--grpo-steps", "40"]
        + ["--eval-episodes", "100", "--curve-every", "0"]
    )
    result = probes.run_probe(args, "tool_choice")
    assert result["start_success"] <= 0.5 and result["start"]["episodes"] == 100
    assert result["final_success"] >= 0.9
    assert [entry["env/turns"] for entry in result["train_log"]] == [1.0] * 40
    assert result["train_log"][0]["frac_reward_zero_std"] < 1.0  # mixed rewards: a signal
