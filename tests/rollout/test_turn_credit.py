"""Turn credit through the batched driver (shaping, Monte Carlo values from forks) and into TRL's
loss through ``TurnCreditGRPOTrainer``."""

from __future__ import annotations

import os
from typing import Any

import pytest

from agentflow_env.base.tokens import load_default_tokenizer
from agentflow_env.rollout import TrainerSample, check_credit_options, padded_logprobs, padded_rows
from agentflow_env.rollout.agents.planners import ExpertPlanner
from agentflow_env.rollout.training.driver import run_episodes
from agentflow_env.rollout.training.group_credit import TrajectoryCredit, turn_advantages
from agentflow_env.rollout.training.pool import EnvPool
from agentflow_env.rollout.training.samples import turn_sample_advantages
from agentflow_env.rollout.training.turn_credit import (
    group_key,
    grouped_turn_advantages,
    token_advantages,
)

TOK = load_default_tokenizer()
JUNK = TOK.encode("Tool Name: Calculator\nContext: 1 + 1") + [TOK.eos_token_id]
ENV = {"hops": 2, "max_turns": 4, "reward_shaping": "progress"}


def deterministic_policy(pool: EnvPool, calls: list[int]):
    """A policy that is a function of the prompt only: the expert where the episode's seed is even,
    a harmless wrong call where it is odd. Forks see their parent's prompts, so with this policy
    every continuation repeats its parent's."""

    def generate(prompts: Any, max_new_tokens: int):
        calls.append(len(prompts))
        envs = {
            tuple(env.session.observation.token_ids): env
            for shared in pool._envs.values()
            for env in shared
            if env.session is not None and not env.session.done
        }
        out = []
        for prompt in prompts:
            env = envs[tuple(prompt)]
            assert env.session is not None
            if env.session.seed is not None and env.session.seed % 2 == 0:
                out.append(TOK.encode(ExpertPlanner(env).act()) + [TOK.eos_token_id])
            else:
                out.append(list(JUNK))
        return out, None

    return generate


def test_value_forks_of_a_deterministic_policy_value_each_state_at_its_outcome() -> None:
    pool = EnvPool()
    calls: list[int] = []
    specs = [(seed, ENV) for seed in (4, 4, 7, 7)]
    results = run_episodes(specs, deterministic_policy(pool, calls), TOK, pool=pool, value_forks=2)
    assert [r.success for r in results] == [True, True, False, False]
    for result in results:
        assert result.turn_values is not None and len(result.turn_values) == result.turns
        assert result.turn_values[0] is None
        # Every fork repeated its parent's path: the value of each later state is the outcome.
        assert result.turn_values[1:] == [result.reward] * (result.turns - 1)
    # Forks ran in the same batches (no extra generate calls): each turn t > 1 of an episode
    # also fed 2 forks per earlier state, every fork following its parent to the end.
    own_turns = sum(r.turns for r in results)
    fork_turns = sum(2 * (r.turns - t) for r in results for t in range(1, r.turns))
    assert sum(calls) == own_turns + fork_turns
    assert len(calls) == max(r.turns for r in results)
    # Shaping rewards were recorded per turn and sum to the progress made.
    assert sum(results[0].turn_shaping) == pytest.approx(1.0)
    assert sum(results[2].turn_shaping) == pytest.approx(0.0)


def test_token_advantages_follow_the_turn_advantages_of_each_group() -> None:
    pool = EnvPool()
    specs = [(seed, ENV) for seed in (2, 3, 2, 3)]
    labels = ["a", "a", "b", "b"]  # two groups, each one expert and one failing episode
    results = run_episodes(specs, deterministic_policy(pool, []), TOK, pool=pool, value_forks=1)
    for method in ("broadcast", "progress", "monte_carlo"):
        tokens = token_advantages(labels, results, method)  # type: ignore[arg-type]
        for index, result in enumerate(results):
            assert len(tokens[index]) == len(result.completion_ids)
            # Feedback tokens carry nothing.
            assert all(
                a == 0.0 for a, m in zip(tokens[index], result.env_mask, strict=True) if m == 0
            )
        group = [
            TrajectoryCredit(
                r.reward,
                tuple(r.turn_shaping),
                tuple(r.turn_values) if method == "monte_carlo" and r.turn_values else None,
            )
            for r in results[:2]
        ]
        expected = turn_advantages(group, method)  # type: ignore[arg-type]
        first_action = results[0].action_lengths[0]
        assert tokens[0][:first_action] == pytest.approx([expected[0][0]] * first_action)
        assert tokens[1][: results[1].action_lengths[0]] == pytest.approx(
            [expected[1][0]] * results[1].action_lengths[0]
        )
    with pytest.raises(ValueError, match="value_forks"):
        no_values = run_episodes(specs[:2], deterministic_policy(pool, []), TOK, pool=pool)
        token_advantages(labels[:2], no_values, "monte_carlo")


def test_a_failed_episode_gets_zero_advantages_and_stays_out_of_its_group() -> None:
    pool = EnvPool()
    specs: list[Any] = [(2, ENV), (3, ENV), "not a label"]
    results = run_episodes(specs, deterministic_policy(pool, []), TOK, pool=pool)
    assert results[2].failed
    tokens = token_advantages(["g", "g", "g"], results, "broadcast")
    assert tokens[2] == [0.0]
    assert tokens[0][0] > 0 > tokens[1][0]


def test_negative_value_forks_are_refused() -> None:
    with pytest.raises(ValueError, match="value_forks"):
        run_episodes([(0, ENV)], deterministic_policy(EnvPool(), []), TOK, value_forks=-1)


# -- TRL -----------------------------------------------------------------------------------------
def test_turn_credit_trainer_hands_per_token_advantages_to_trls_loss(tmp_path: Any) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("trl")
    from conftest import load_adapter
    from datasets import Dataset
    from test_trl import GENERATIONS, cpu_grpo_config, half_expert, tiny_model

    from agentflow_env.base.tokens import to_hf_tokenizer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    rollout = load_adapter("adapters/trl/rollout.py", "agentflow_trl_rollout")
    credit = load_adapter("adapters/trl/turn_credit.py", "agentflow_trl_turn_credit")
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    real_generate = rollout.trainer_generate
    rollout.trainer_generate = lambda trainer, greedy=False: half_expert(
        real_generate(trainer, greedy=greedy), tokenizer
    )
    seen: list[dict[str, Any]] = []
    inner = rollout.make_rollout_func(
        {"hops": 2, "max_turns": 3, "reward_shaping": "progress"},
        max_action_tokens=12,
        credit="progress",
    )

    def recording(prompts: list[Any], trainer: Any) -> dict[str, list]:
        seen.append(inner(prompts, trainer))
        return seen[-1]

    losses: list[Any] = []
    try:
        trainer = credit.TurnCreditGRPOTrainer(
            model=tiny_model(tokenizer),
            reward_funcs=rollout.env_reward,
            args=cpu_grpo_config(
                tmp_path,
                per_device_train_batch_size=2 * GENERATIONS,
                num_generations=GENERATIONS,
                max_steps=1,
                learning_rate=1e-4,
                beta=0.0,
                loss_type="grpo",
            ),
            train_dataset=Dataset.from_dict({"prompt": [rollout.task_prompt(s) for s in range(4)]}),
            processing_class=tokenizer,
            rollout_func=recording,
        )
        original = trainer._compute_loss

        def spy(model: Any, inputs: dict[str, Any]) -> Any:
            losses.append(inputs)
            return original(model, inputs)

        trainer._compute_loss = spy
        trainer.train()
    finally:
        rollout.trainer_generate = real_generate
    output = seen[0]
    rows = output["token_advantages"]
    # TRL may reorder the batch before the loss: match its rows by their completion ids.
    by_completion = {
        tuple(ids): row for ids, row in zip(output["completion_ids"], rows, strict=True)
    }
    inputs = losses[0]
    advantages = inputs["advantages"]
    assert advantages.dim() == 2 and advantages.shape[0] == len(rows)
    for index in range(advantages.shape[0]):
        length = int(inputs["completion_mask"][index].sum())
        row = by_completion[tuple(inputs["completion_ids"][index, :length].tolist())]
        assert len(row) == length
        assert advantages[index, :length].tolist() == pytest.approx(row, abs=1e-6)
        assert torch.all(advantages[index, length:] == 0)
    # The expert episodes made progress, the others did not: advantages differ in sign.
    firsts = [row[0] for row in rows]
    assert max(firsts) > 0 > min(firsts)


def test_per_token_tensor_pads_and_cuts() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("trl")
    from conftest import load_adapter

    credit = load_adapter("adapters/trl/turn_credit.py", "agentflow_trl_turn_credit")
    out = credit.per_token_tensor([[1.0, 2.0, 3.0], [4.0]], 2)
    assert out.tolist() == [[1.0, 2.0], [4.0, 0.0]]


def test_a_fork_that_cannot_be_made_leaves_the_episode_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentflow_env.envs.env import AgentFlowEnv

    def broken_fork(self: AgentFlowEnv, *, log: bool = False) -> AgentFlowEnv:
        raise RuntimeError("no fork today")

    monkeypatch.setattr(AgentFlowEnv, "fork", broken_fork)
    pool = EnvPool()
    specs = [(seed, ENV) for seed in (2, 3)]
    results = run_episodes(specs, deterministic_policy(pool, []), TOK, pool=pool, value_forks=2)
    assert not any(r.failed for r in results) and results[0].success
    assert all(r.turn_values is None for r in results if r.turns > 1)
    with pytest.raises(ValueError, match="value_forks"):
        token_advantages(["g", "g"], results, "monte_carlo")


def test_monte_carlo_leaves_out_an_episode_without_values() -> None:
    pool = EnvPool()
    specs = [(seed, ENV) for seed in (2, 3, 4)]
    results = run_episodes(specs, deterministic_policy(pool, []), TOK, pool=pool, value_forks=1)
    results[1].turn_values = None  # as if none of its forks could be made
    tokens = token_advantages(["g", "g", "g"], results, "monte_carlo")
    assert tokens[1] == [0.0] * len(results[1].completion_ids)
    # The other two: both expert episodes (even seeds) succeed, so the group is all equal.
    assert all(a == 0.0 for a in tokens[0] + tokens[2])


# -- the helpers the adapters share ----------------------------------------------------------------
def test_grouped_turn_advantages_group_by_label_and_leave_unvalued_trajectories_out() -> None:
    """Turn samples of equal labels form one group; under ``monte_carlo`` a trajectory without
    value estimates gets 0 and stays out of its group."""

    def trajectory(name: str, reward: float, turns: int) -> list[TrainerSample]:
        return [
            TrainerSample([1], [2], [1], None, reward, trajectory_id=name, turn=t + 1, turns=turns)
            for t in range(turns)
        ]

    labels = ["a", "a", "b", "b"]
    trajectories = [trajectory("t0", 1.0, 2), trajectory("t1", 0.0, 1)]
    trajectories += [trajectory("t2", 1.0, 1), trajectory("t3", 1.0, 3)]
    got = grouped_turn_advantages(labels, trajectories)
    samples = [s for t in trajectories for s in t]
    groups = [group_key(label) for label, t in zip(labels, trajectories, strict=True) for _ in t]
    assert got == turn_sample_advantages(samples, groups) and len(got) == 7
    assert got[0] == got[1] > 0 > got[2] and got[3:] == [0.0] * 4  # "b": equal rewards
    values = [[0.5, 0.5], None, [0.5], [0.5, 0.5, 0.5]]
    carlo = grouped_turn_advantages(labels, trajectories, "monte_carlo", values=values)
    assert carlo[2] == 0.0  # t1 has no values: out of group "a", whose other member stands alone


def test_padded_rows_and_credit_options() -> None:
    assert padded_rows([[1, 2, 3], [4]], 2) == [[1.0, 2.0], [4.0, 0.0]]
    assert padded_logprobs([-1.0], 3, 0.0) == [-1.0, 0.0, 0.0] and padded_logprobs(None, 1, 9) == [
        9
    ]
    check_credit_options("monte_carlo", 2, "turns", "trajectory")
    for bad in (
        ("monte_carlo", 0, "flat", "trajectory"),  # no forks for the values
        (None, 0, "rows", "trajectory"),  # no such shape
        ("progress", 0, "turns", "turn"),  # turn normalisation is for broadcast credit
    ):
        with pytest.raises(ValueError):
            check_credit_options(*bad)  # type: ignore[arg-type]
