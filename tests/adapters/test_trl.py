"""TRL adapter: two GRPO steps through ``rollout_func`` with a tiny model.

Checks that environment tokens get no gradient (the loss's gradient with respect to the hidden
state that predicts each environment token is exactly zero), that planner tokens do get one,
and that the reward TRL logs is the environment's own reward.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from conftest import ROOT, load_adapter  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402
from agentflow_env.rollout.agents.planners import ExpertPlanner  # noqa: E402

ENV = {"hops": 1, "max_turns": 2}
GENERATIONS = 4


sys.path.insert(0, str(ROOT / "adapters" / "trl"))  # the adapter files import each other by name
rollout = load_adapter("adapters/trl/rollout.py", "agentflow_trl_rollout")


def cpu_grpo_config(output_dir: Any, **settings: Any) -> GRPOConfig:
    """A GRPO config for these tests: CPU, no checkpoints, no reports, a log line per step, the
    dataset in order; ``settings`` add the rest."""
    return GRPOConfig(
        output_dir=str(output_dir),
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        gradient_checkpointing=False,
        shuffle_dataset=False,
        **settings,
    )


def tiny_model(tokenizer: Any) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config)


def live_envs_by_prompt(module: Any) -> dict[tuple[int, ...], Any]:
    """The live envs of the adapter module's pool, by the observation each is waiting on (a
    scripted policy finds the episode a prompt belongs to)."""
    return {
        tuple(env.session.observation.token_ids): env
        for pool in module._POOL._envs.values()
        for env in pool
        if env.session is not None and not env.session.done
    }


def half_expert(generate: Any, tokenizer: Any) -> Any:
    """Every other episode the expert acts (sent as ids), so groups get mixed rewards."""

    def act(prompts: list[list[int]], max_new_tokens: int):
        completions, logprobs = generate(prompts, max_new_tokens)
        by_prompt = live_envs_by_prompt(rollout)
        for i, prompt in enumerate(prompts):
            if i % 2 == 0:
                action = ExpertPlanner(by_prompt[tuple(prompt)]).act()
                completions[i] = tokenizer.encode(action, add_special_tokens=False) + [
                    tokenizer.eos_token_id
                ]
                logprobs[i] = [0.0] * len(completions[i])
        return completions, logprobs

    return act


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.set_num_threads(2)
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    model = tiny_model(tokenizer)
    real_generate = rollout.trainer_generate
    seen: list[dict[str, Any]] = []
    rollout_func = rollout.make_rollout_func(ENV, max_action_tokens=12)

    def recording_rollout(prompts: list[Any], trainer: Any) -> dict[str, list]:
        output = rollout_func(prompts, trainer)
        seen.append(output)
        return output

    rollout.trainer_generate = lambda trainer, greedy=False: half_expert(
        real_generate(trainer, greedy=greedy), tokenizer
    )
    dataset = Dataset.from_dict({"prompt": [rollout.task_prompt(s) for s in range(20)]})
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=rollout.env_reward,
        args=cpu_grpo_config(
            tmp_path_factory.mktemp("grpo"),
            per_device_train_batch_size=2 * GENERATIONS,
            num_generations=GENERATIONS,
            max_steps=2,
            learning_rate=1e-4,
            beta=0.0,
            temperature=0.7,
            loss_type="grpo",
        ),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=recording_rollout,
    )
    try:
        trainer.train()
        # One more batch, scored but not stepped, for the gradient check.
        inputs = [{"prompt": rollout.task_prompt(100 + i // GENERATIONS)} for i in range(8)]
        batch = trainer._generate_and_score_completions(inputs)
    finally:
        rollout.trainer_generate = real_generate
    return {"trainer": trainer, "seen": seen, "batch": batch}


def test_rollout_returns_token_exact_flat_trajectories(trained: dict[str, Any]) -> None:
    output = trained["seen"][0]
    assert len(output["prompt_ids"]) == 2 * GENERATIONS
    for key in ("completion_ids", "logprobs", "env_mask"):
        assert [len(x) for x in output[key]] == [len(c) for c in output["completion_ids"]]
    # The copies of a prompt run the same task: identical first prompts within each group.
    for group in range(2):
        firsts = output["prompt_ids"][group * GENERATIONS : (group + 1) * GENERATIONS]
        assert all(ids == firsts[0] for ids in firsts)
    # Failed first turns continue: feedback (mask 0) sits between planner actions (mask 1).
    assert any(0 in mask for mask in output["env_mask"])
    assert all(mask[0] == 1 and mask[-1] == 1 for mask in output["env_mask"])


def test_logged_reward_equals_env_reward(trained: dict[str, Any]) -> None:
    logs = [entry for entry in trained["trainer"].state.log_history if "reward" in entry]
    steps = trained["seen"][:2]  # the third rollout is the unstepped gradient-check batch
    assert len(logs) == 2
    rewards = [r for output in steps for r in output["env_reward"]]
    assert 0.0 < sum(rewards) < len(rewards)  # mixed outcomes: a real learning signal
    for entry, output in zip(logs, steps, strict=True):
        mean = sum(output["env_reward"]) / len(output["env_reward"])
        assert entry["reward"] == pytest.approx(mean)
        assert entry["rewards/env_reward/mean"] == pytest.approx(mean)
        assert entry["env/success"] == pytest.approx(
            sum(output["success"]) / len(output["success"])
        )


def test_environment_tokens_get_no_gradient(trained: dict[str, Any]) -> None:
    trainer, batch = trained["trainer"], trained["batch"]
    env_mask = batch["tool_mask"] * batch["completion_mask"]
    assert (env_mask == 0).logical_and(batch["completion_mask"] == 1).any(), "no env tokens"
    if not batch["advantages"].abs().sum() > 0:
        batch["advantages"] = torch.linspace(-1.0, 1.0, batch["advantages"].numel())

    model = trainer.model
    captured: dict[str, torch.Tensor] = {}

    def keep(module: Any, args: Any, output: torch.Tensor) -> None:
        output.retain_grad()
        captured["hidden"] = output

    def gradient_per_completion_token(inputs: dict[str, Any]) -> torch.Tensor:
        handle = model.model.norm.register_forward_hook(keep)
        try:
            model.zero_grad()
            trainer.compute_loss(model, inputs).backward()
        finally:
            handle.remove()
            model.zero_grad()
        grad = captured["hidden"].grad.abs().sum(-1)  # (B, P + C): per position
        # The hidden state at position t predicts token t + 1: completion token j is predicted
        # at prompt_len + j - 1.
        start = batch["prompt_ids"].size(1) - 1
        return grad[:, start : start + env_mask.size(1)]

    masked = gradient_per_completion_token(batch)
    assert torch.all(masked[env_mask == 0] == 0), "environment tokens received gradient"
    assert masked[env_mask == 1].sum() > 0, "planner tokens received no gradient"
    # Control: without the env mask the same check sees gradient on environment tokens.
    unmasked = gradient_per_completion_token({**batch, "tool_mask": torch.ones_like(env_mask)})
    feedback = (env_mask == 0) & (batch["completion_mask"] == 1)
    assert unmasked[feedback].sum() > 0
