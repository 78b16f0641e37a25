"""Per-turn Flow-GRPO through TRL: ``make_rollout_func(samples="turns")`` and
``TurnSamplesGRPOTrainer``, one real ``trainer.train()`` step with a 1-layer model on CPU.

What reaches TRL's loss is captured and checked against the envs' own trajectories: one row per
planner turn, its prompt exactly the structured observation the policy was given and its
completion exactly the sampled ids; every row of a trajectory carries the trajectory's group
advantage as ``flow_grpo_advantages`` computes it, under either normalisation; padding rows and
failed episodes are masked rows that add no gradient; the loss is normalised as the adapter's
README says; TRL's reward figures are over trajectories.
"""

from __future__ import annotations

import math
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT  # noqa: E402
from datasets import Dataset  # noqa: E402
from test_trl import cpu_grpo_config, live_envs_by_prompt, tiny_model  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402
from agentflow_env.rollout import TrainerSample, group_signal  # noqa: E402
from agentflow_env.rollout.agents.planners import ExpertPlanner  # noqa: E402
from agentflow_env.rollout.training.group_credit import flow_grpo_advantages  # noqa: E402

sys.path.insert(0, str(ROOT / "adapters" / "trl"))  # the adapter files import each other by name
import rollout  # noqa: E402
from diagnostics import AgentFlowGRPOTrainer  # noqa: E402
from turn_samples import TurnSamplesGRPOTrainer, row_advantages, turn_rows  # noqa: E402

ENV = {"hops": 1, "max_turns": 3}
GENERATIONS = 4
BAD_LABEL = '{"task_id": "no-such-task"}'


def half_expert(generate: Any, tokenizer: Any) -> Any:
    """Every other prompt of a generate call is acted by the expert (sent as ids), so groups get
    mixed rewards and trajectories of several lengths."""

    def act(prompts: list[list[int]], max_new_tokens: int) -> Any:
        completions, logprobs = generate(prompts, max_new_tokens)
        by_prompt = live_envs_by_prompt(rollout)
        for i, prompt in enumerate(prompts):
            if i % 2 == 0:
                action = ExpertPlanner(by_prompt[tuple(prompt)]).act()
                ids = tokenizer.encode(action, add_special_tokens=False)
                completions[i] = ids + [tokenizer.eos_token_id]
                logprobs[i] = [0.0] * len(completions[i])
        return completions, logprobs

    return act


def rows_of(inputs: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of a loss batch, unpadded: prompt and completion ids, loss mask, advantage."""
    out = []
    for i in range(inputs["prompt_ids"].size(0)):
        prompt = inputs["prompt_ids"][i][inputs["prompt_mask"][i] == 1].tolist()
        completion_mask = inputs["completion_mask"][i]
        loss_mask = completion_mask * inputs.get("tool_mask", torch.ones_like(completion_mask))[i]
        out.append(
            {
                "prompt": tuple(prompt),
                "completion": tuple(inputs["completion_ids"][i][completion_mask == 1].tolist()),
                "completion_mask": completion_mask.tolist(),
                "loss_tokens": int(loss_mask.sum()),
                "advantage": float(inputs["advantages"][i]),
            }
        )
    return out


def train_one_step(
    work: Path,
    *,
    normalize: str = "trajectory",
    loss_type: str = "grpo",
    extra_rows: int = 0,
    bad_group: bool = False,
    trainer_class: type = TurnSamplesGRPOTrainer,
    expert: bool = True,
    **trainer_kwargs: Any,
) -> dict[str, Any]:
    """One GRPO step on two groups of ``GENERATIONS`` (a third of failing labels with
    ``bad_group``), recording what generate was asked and gave, the rollout's output, the envs'
    trajectories of the batch and what reached the loss. ``extra_rows``: another process had
    that many more rows (its lockstep count), so this one pads."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.set_num_threads(2)
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    record: dict[str, Any] = {"calls": [], "outputs": [], "trajectories": [], "loss": []}
    inner = rollout.make_rollout_func(
        ENV, max_action_tokens=12, samples="turns", normalize=normalize
    )

    def envs() -> list[Any]:
        return [env for pool in rollout._POOL._envs.values() for env in pool]

    def recording_rollout(prompts: list[Any], trainer: Any) -> dict[str, list]:
        before = {id(env): env.session for env in envs()}
        output = inner(prompts, trainer)
        record["outputs"].append(output)
        record["trajectories"].append(
            [env.trajectory() for env in envs() if env.session is not before.get(id(env))]
        )
        return output

    real_generate = rollout.trainer_generate

    def recording_generate(trainer: Any, greedy: bool = False) -> Any:
        generate = real_generate(trainer, greedy=greedy)
        acting = half_expert(generate, tokenizer) if expert else generate

        def call(prompts: list[list[int]], max_new_tokens: int) -> Any:
            completions, logprobs = acting(prompts, max_new_tokens)
            record["calls"] += [
                (tuple(p), tuple(c)) for p, c in zip(prompts, completions, strict=True)
            ]
            return completions, logprobs

        return call

    class Recording(trainer_class):  # type: ignore[misc, valid-type]
        def rows_across_ranks(self, count: int) -> int:
            return super().rows_across_ranks(count) + extra_rows

        def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            kept = {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in inputs.items()}
            record["loss"].append((kept, float(loss.detach())))
            return loss

    labels = [rollout.task_prompt(s) for s in range(2)] + ([BAD_LABEL] if bad_group else [])
    trainer = Recording(
        model=tiny_model(tokenizer),
        reward_funcs=rollout.env_reward,
        args=cpu_grpo_config(
            work,
            per_device_train_batch_size=len(labels) * GENERATIONS,
            num_generations=GENERATIONS,
            max_steps=1,
            learning_rate=1e-4,
            beta=0.0,
            temperature=0.7,
            loss_type=loss_type,
            bf16=False,
        ),
        train_dataset=Dataset.from_dict({"prompt": labels}),
        processing_class=tokenizer,
        rollout_func=recording_rollout,
        samples="turns",
        **trainer_kwargs,
    )
    rollout.trainer_generate = recording_generate
    try:
        trainer.train()
    finally:
        rollout.trainer_generate = real_generate
    record["trainer"] = trainer
    return record


def expected_rows(trajectories: list[Any], normalize: str) -> Counter:
    """(prompt, completion, advantage) of every turn of the batch, straight from the envs: the
    trajectories of a task (equal first prompts) are a group; each turn carries its
    trajectory's Flow-GRPO advantage."""
    groups: dict[tuple[int, ...], list[Any]] = {}
    for trajectory in trajectories:
        groups.setdefault(tuple(trajectory.turns[0].prompt_ids), []).append(trajectory)
    rows: Counter = Counter()
    for members in groups.values():
        advantages = flow_grpo_advantages(
            [t.reward for t in members], [len(t.turns) for t in members], normalize=normalize
        )
        for trajectory, advantage in zip(members, advantages, strict=True):
            for turn in trajectory.turns:
                key = (tuple(turn.prompt_ids), tuple(turn.action_ids), round(advantage, 6))
                rows[key] += 1
    return rows


@pytest.fixture(scope="module", params=["trajectory", "turn"])
def stepped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return request.param, train_one_step(tmp_path_factory.mktemp("turns"), normalize=request.param)


def test_rows_reaching_the_loss_are_the_envs_turns_token_for_token(stepped: Any) -> None:
    normalize, run = stepped
    (trajectories,) = run["trajectories"]
    ((inputs, _),) = run["loss"]  # one step, one micro-batch
    rows = rows_of(inputs)
    assert len(trajectories) == 2 * GENERATIONS and all(r["loss_tokens"] > 0 for r in rows)
    # One row per planner turn, prompt and completion ids exactly the env's, with the advantage.
    got = Counter((r["prompt"], r["completion"], round(r["advantage"], 6)) for r in rows)
    assert got == expected_rows(trajectories, normalize)
    # ... which are exactly what generate was given and what it sampled.
    assert Counter((r["prompt"], r["completion"]) for r in rows) == Counter(run["calls"])
    # Structured observations: a later turn's prompt is not the first prompt plus the action.
    later = [t for t in trajectories if len(t.turns) > 1]
    assert later and not any(
        t.turns[1].prompt_ids[: len(t.turns[0].prompt_ids)] == t.turns[0].prompt_ids for t in later
    )
    assert any(r["advantage"] != 0 for r in rows)


def test_every_row_of_a_trajectory_has_its_advantage_and_the_normalisations_differ(
    stepped: Any,
) -> None:
    normalize, run = stepped
    rows = run["trainer"].turn_rows
    by_trajectory: dict[int, set[float]] = {}
    for owner, advantage in zip(rows.owners, rows.advantages, strict=True):
        by_trajectory.setdefault(owner, set()).add(advantage)
    assert rows.padding == 0 and all(len(values) == 1 for values in by_trajectory.values())
    (trajectories,) = run["trajectories"]
    other = "turn" if normalize == "trajectory" else "trajectory"
    assert expected_rows(trajectories, normalize) != expected_rows(trajectories, other)


def test_grpo_loss_is_the_mean_over_turn_rows_of_their_token_means(stepped: Any) -> None:
    """``loss_type="grpo"``, one process, one micro-batch: at the sampling weights (ratio 1) the
    loss is minus the mean over rows of each row's advantage: every turn row weighs the same."""
    _, run = stepped
    ((inputs, loss),) = run["loss"]
    advantages = inputs["advantages"]
    assert loss == pytest.approx(-float(advantages.mean()), abs=1e-6)
    assert int(inputs["num_items_in_batch"]) == sum(r["loss_tokens"] for r in rows_of(inputs))


def test_trl_logs_reward_figures_over_trajectories_and_the_turn_rows(stepped: Any) -> None:
    _, run = stepped
    (output,) = run["outputs"]
    (entry,) = [e for e in run["trainer"].state.log_history if "reward" in e]
    rewards = output["env_reward"]
    signal = group_signal(rewards, GENERATIONS)
    assert entry["reward"] == pytest.approx(sum(rewards) / len(rewards))
    assert entry["frac_reward_zero_std"] == pytest.approx(signal["equal_reward_groups"])
    assert entry["turns/informative_groups"] == pytest.approx(signal["informative_groups"])
    turns = sum(len(samples) for samples in output["turn_samples"])
    assert entry["turns/rows"] == turns and entry["turns/padding_rows"] == 0
    assert entry["turns/rows_per_trajectory"] == pytest.approx(turns / len(rewards))
    # env/* are per episode, not per row (long episodes would weigh more).
    assert entry["env/success"] == pytest.approx(sum(output["success"]) / len(rewards))
    assert entry["env/turns"] == pytest.approx(sum(output["turns"]) / len(rewards))


@pytest.fixture(scope="module")
def padded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return train_one_step(
        tmp_path_factory.mktemp("padded"), loss_type="dapo", extra_rows=3, bad_group=True
    )


def test_padding_rows_and_failed_episodes_are_masked_rows(padded: dict[str, Any]) -> None:
    ((inputs, _),) = padded["loss"]
    rows = rows_of(inputs)
    padding = [r for r in rows if not any(r["completion_mask"])]
    assert len(padding) == 3 and all(r["advantage"] == 0.0 for r in padding)
    (output,) = padded["outputs"]
    failed = [i for i, error in enumerate(output["error"]) if error]
    assert len(failed) == GENERATIONS and all(output["env_reward"][i] == 0 for i in failed)
    masked = [r for r in rows if any(r["completion_mask"]) and r["loss_tokens"] == 0]
    assert len(masked) == GENERATIONS and all(r["advantage"] == 0.0 for r in masked)
    trained = [r for r in rows if r["loss_tokens"] > 0]
    assert len(trained) == sum(len(s) for s in output["turn_samples"]) - GENERATIONS
    assert int(inputs["num_items_in_batch"]) == sum(r["loss_tokens"] for r in trained)


def test_padding_and_failed_rows_add_zero_gradient(padded: dict[str, Any]) -> None:
    """The hidden states of masked rows get exactly zero gradient from TRL's loss; and with
    ``loss_type="dapo"`` (per token over the step) the parameters' gradient is the same with
    and without those rows."""
    trainer = padded["trainer"]
    ((inputs, _),) = padded["loss"]
    model = trainer.model
    mask = inputs["completion_mask"] * inputs["tool_mask"]
    silent = mask.sum(1) == 0
    assert silent.sum() == 3 + GENERATIONS
    if not inputs["advantages"][~silent].abs().sum() > 0:
        pytest.fail("no advantage signal in the batch")
    captured: dict[str, Any] = {}

    def keep(module: Any, args: Any, output: Any) -> None:
        output.retain_grad()
        captured["hidden"] = output

    def gradients(batch: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        handle = model.model.norm.register_forward_hook(keep)
        try:
            model.zero_grad()
            trainer.compute_loss(model, batch).backward()
        finally:
            handle.remove()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
        return captured["hidden"].grad.abs().sum(-1), grads

    hidden, with_padding = gradients(inputs)
    assert torch.all(hidden[silent] == 0) and hidden[~silent].sum() > 0
    kept = {k: v[~silent] if torch.is_tensor(v) and v.dim() > 0 else v for k, v in inputs.items()}
    _, without = gradients(kept)
    assert with_padding.keys() == without.keys() and with_padding
    for name, grad in with_padding.items():
        assert torch.allclose(grad, without[name], rtol=1e-5, atol=1e-9), name


def test_diagnostics_trainer_logs_an_exact_logprob_gap_on_turn_rows(tmp_path: Path) -> None:
    """``AgentFlowGRPOTrainer`` over turn rows: the sampler's log-probs (recorded per turn by the
    env) against TRL's forward pass over the same rows, before the update."""
    run = train_one_step(
        tmp_path, trainer_class=AgentFlowGRPOTrainer, expert=False, kl_to_start=False
    )
    (entry,) = [e for e in run["trainer"].state.log_history if "reward" in e]
    assert entry["diag/planner_tokens"] > 0 and entry["turns/rows"] > 2 * GENERATIONS
    assert 0.0 <= entry["diag/logprob_gap_max"] <= 1e-4


def test_turn_rows_pad_to_the_ranks_count_and_the_split() -> None:
    """Two trajectories of one task (two turns paid 1, one turn failed), another rank with two
    more rows, ``steps_per_generation=4``: 3 real rows, padded to 8."""
    turn = {"trajectory_id": "0", "turns": 2, "reward": 1.0, "logprobs": None}
    paid = [
        TrainerSample([1, 2], [3, 4], [1, 1], turn=1, is_last_turn=False, **turn),
        TrainerSample([1, 2, 5], [6], [1], turn=2, **turn),
    ]
    failed = [TrainerSample([1, 2], [9], [1], None, 0.0, "1", 1, 1, failure="step: boom")]
    output = {
        "turn_samples": [paid, failed],
        "turn_values": [None, None],
        "env_reward": [1.0, 0.0],
        "turn_credit": "broadcast",
        **{k: [k, k + "!"] for k in (*rollout.LOG_KEYS, "error")},
    }
    rows = turn_rows(
        [{"prompt": "a"}, {"prompt": "a"}],
        output,
        rows_across_ranks=lambda n: n + 2,
        multiple=4,
        eos=9,
    )
    assert rows.owners == [0, 0, 1, -1, -1, -1, -1, -1] and rows.padding == 5
    assert rows.advantages == [0.0] * 8  # the failed trajectory is out of the group: 1 left
    served = rows.served
    assert served["prompt_ids"][:3] == [[1, 2], [1, 2, 5], [1, 2]]
    assert served["completion_ids"] == [[3, 4], [6], [9]] + [[9]] * 5
    assert served["env_mask"] == [[1, 1], [1], [0]] + [[0]] * 5
    assert all(math.isnan(x) for x in served["logprobs"][0]) and served["logprobs"][3] == [0.0]
    assert served["env_reward"] == [1.0, 1.0, 0.0] + [0.0] * 5
    assert served["success"] == [None, "success", "success!"] + [None] * 5
    assert [x["prompt"] for x in rows.inputs] == ["a"] * 8


def test_a_turns_rollout_refuses_a_trainer_that_does_not_train_turn_rows() -> None:
    func = rollout.make_rollout_func(ENV, samples="turns")
    assert func.samples == "turns" and rollout.make_rollout_func(ENV).samples == "flat"
    with pytest.raises(TypeError, match="TurnSamplesGRPOTrainer"):
        func([rollout.task_prompt(0)], object())
    with pytest.raises(ValueError, match="normalize='turn'"):
        rollout.make_rollout_func(ENV, normalize="turn")
    with pytest.raises(ValueError, match="normalize='turn'"):
        rollout.make_rollout_func(ENV, samples="turns", normalize="turn", credit="progress")
    with pytest.raises(ValueError, match="unknown"):
        rollout.make_rollout_func(ENV, samples="rows")


@pytest.mark.parametrize("method", ["progress", "monte_carlo"])
def test_turn_level_credit_reaches_turn_rows(method: str) -> None:
    """``credit="progress"`` and ``"monte_carlo"`` give turn rows the turn-level advantages of
    ``group_credit`` (here computed by hand): a trajectory without values sits out."""

    def turn(trajectory: str, index: int, count: int, reward: float, shaping: float) -> Any:
        return TrainerSample(
            [1], [2], [1], None, reward, trajectory, index, count, index == count, shaping
        )

    samples = [
        [turn("0", 1, 2, 1.0, 0.5), turn("0", 2, 2, 1.0, 0.25)],
        [turn("1", 1, 1, 0.0, 0.0)],
        [turn("2", 1, 1, 1.0, 0.0)],
    ]
    output = {
        "turn_samples": samples,
        "turn_values": [[None, 0.5], [None], None],
        "turn_credit": method,
    }
    got = row_advantages(["a", "a", "a"], output)
    if method == "monte_carlo":  # V_1: the mean reward of the valued trajectories (1 and 0)
        assert got == [0.5 - 0.5, 1.0 - 0.5, 0.0 - 0.5, 0.0]
    else:  # returns to go 1.75, 1.25, 0, 1 over the four turn rows, normalised
        returns = torch.tensor([1.75, 1.25, 0.0, 1.0], dtype=torch.float64)
        expected = (returns - returns.mean()) / (returns.std() + 1e-9)
        assert got == pytest.approx(expected.tolist())
