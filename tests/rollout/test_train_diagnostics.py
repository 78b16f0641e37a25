"""Training diagnostics: the definitions, and the TRL trainer that logs them.

The log-prob agreement test runs TRL's ``GRPOTrainer`` (through ``AgentFlowGRPOTrainer``) over
multi-turn episodes with feedback between actions, prompts of different lengths in one batch,
actions cut at the per-turn cap and actions ended by the end-of-turn token, and checks that on
CPU fp32 with one model object the sampler's log-probs and the trainer's own forward pass agree
to 1e-4 on every planner token. The trainer-level sanity checks follow: a constant reward
leaves the weights bit-identical; one update raises the log-probs of positive-advantage samples
and lowers those of negative ones; the null control permutes the advantages.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from agentflow_env.rollout.checks.train_diagnostics import (
    DiagnosticsLog,
    group_signal,
    logprob_gap,
    permuted,
    position_kinds,
)

ROOT = Path(__file__).resolve().parents[2]


# -- the definitions ------------------------------------------------------------------------
def test_position_kinds_name_turn_starts_and_ends() -> None:
    mask = [1, 1, 1, 0, 0, 1, 1, 0, 1]
    assert position_kinds(mask) == [
        "first_token",
        "inside",
        "last_token",
        None,
        None,
        "after_feedback",
        "last_token",
        None,
        "after_feedback",
    ]


def test_logprob_gap_reports_where_the_worst_gap_sits() -> None:
    sampler = [[-1.0, -2.0, -3.0, 9.0, -1.0, -1.0], [-0.5, math.nan, -0.2]]
    trainer = [[-1.0, -2.1, -3.0, 0.0, -1.5, -1.0], [-0.5, -7.0, -0.2]]
    masks = [[1, 1, 1, 0, 1, 1], [1, 1, 1]]
    gap = logprob_gap(sampler, trainer, masks)
    assert gap["max"] == pytest.approx(0.5)
    assert gap["worst"] == "after_feedback"
    assert gap["unscored"] == 1  # the NaN the sampler could not score
    assert gap["tokens"] == 7  # the masked position (gap 9) is not a planner token
    assert gap["where"]["inside"]["max"] == pytest.approx(0.1)
    assert gap["mean"] == pytest.approx(0.6 / 7)


def test_group_signal_counts_groups_without_signal() -> None:
    rewards = [0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, 1]
    signal = group_signal(rewards, 4)
    assert signal["equal_reward_groups"] == pytest.approx(2 / 3)
    assert signal["all_zero_groups"] == pytest.approx(1 / 3)
    assert signal["informative_groups"] == pytest.approx(1 / 3)
    assert signal["mean_abs_advantage"] > 0
    with pytest.raises(ValueError, match="groups of 5"):
        group_signal(rewards, 5)


def test_permuted_keeps_the_values_and_changes_the_order() -> None:
    values = list(range(64))
    shuffled = permuted(values, random.Random(0))
    assert sorted(shuffled) == values and shuffled != values


def test_diagnostics_log_writes_json_lines(tmp_path: Path) -> None:
    log = DiagnosticsLog(tmp_path / "sub" / "d.jsonl")
    log.write({"step": 1, "gap": float("nan"), "where": {"a": float("inf")}})
    log.write({"step": 2})
    log.close()
    lines = [json.loads(x) for x in (tmp_path / "sub" / "d.jsonl").read_text().splitlines()]
    assert lines == [{"step": 1, "gap": None, "where": {"a": None}}, {"step": 2}]


# -- the TRL trainer ------------------------------------------------------------------------
torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from conftest import load_adapter  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from trl import GRPOConfig  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402
from agentflow_env.rollout.agents.demonstrations import expert_demonstrations  # noqa: E402

ENV = {
    "hops": [1, 2],
    "kinds": "bridge",
    "fresh_world": True,
    "world_size": "small",
    "prompt_style": "compact",
    "max_turns": 3,
}
CAP = 18  # tokens per action: the format-trained model's longer names are cut here
GENERATIONS = 4


def load_trainer_module() -> Any:
    sys.path.insert(0, str(ROOT / "adapters" / "trl"))
    return load_adapter("adapters/trl/diagnostics.py", "agentflow_trl_diagnostics")


def format_trained_model(tokenizer: Any) -> LlamaForCausalLM:
    """A 1-layer model with 60 SFT steps on expert actions: it has learned the action format
    and the end-of-turn token, not the task, so its episodes mix ended and cut actions,
    valid and invalid ones, and several turns."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    records = expert_demonstrations(range(100), ENV, style="minimal")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(0)
    for _ in range(60):
        batch = rng.sample(records, 16)
        width = max(len(r["prompt_ids"]) + len(r["completion_ids"]) for r in batch)
        ids = torch.full((16, width), tokenizer.pad_token_id)
        labels = torch.full((16, width), -100)
        for row, r in enumerate(batch):
            seq = r["prompt_ids"] + r["completion_ids"]
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, len(r["prompt_ids"]) : len(seq)] = torch.tensor(r["completion_ids"])
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return to_hf_tokenizer(load_default_tokenizer())


@pytest.fixture(scope="module")
def start_weights(tokenizer: Any) -> dict[str, Any]:
    torch.set_num_threads(2)
    return format_trained_model(tokenizer).state_dict()


def grpo_run(
    tmp_path: Path,
    tokenizer: Any,
    weights: dict[str, Any],
    reward_funcs: Any = None,
    steps: int = 1,
    **options: Any,
) -> tuple[Any, Any, list[dict[str, Any]], list[dict[str, Any]]]:
    """One ``AgentFlowGRPOTrainer`` run from ``weights``; returns the trainer, the model, the
    rollout outputs it saw and the diagnostics JSONL records."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    module = load_trainer_module()
    rollout = sys.modules.get("rollout") or load_adapter("adapters/trl/rollout.py", "rollout")
    model = LlamaForCausalLM(LlamaConfig(**_config_of(weights, tokenizer)))
    model.load_state_dict(weights)
    seen: list[dict[str, Any]] = []
    inner = rollout.make_rollout_func(ENV, max_action_tokens=CAP)

    def recording(prompts: list[Any], trainer: Any) -> dict[str, list]:
        output = inner(prompts, trainer)
        seen.append(output)
        return output

    data = Dataset.from_dict({"prompt": [rollout.task_prompt(s, **ENV) for s in range(40)]})
    path = tmp_path / "diagnostics.jsonl"
    trainer = module.AgentFlowGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs or rollout.env_reward,
        args=GRPOConfig(
            output_dir=str(tmp_path / "scratch"),
            per_device_train_batch_size=4 * GENERATIONS,
            num_generations=GENERATIONS,
            max_steps=steps,
            learning_rate=1e-3,
            lr_scheduler_type="constant",
            beta=0.0,
            temperature=1.0,
            loss_type="grpo",
            max_completion_length=4096,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            bf16=False,
            seed=0,
            shuffle_dataset=False,
            gradient_checkpointing=False,
        ),
        train_dataset=data,
        processing_class=tokenizer,
        rollout_func=recording,
        diagnostics_path=str(path),
        **options,
    )
    trainer.train()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return trainer, model, seen, records


def _config_of(weights: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    hidden = weights["model.embed_tokens.weight"].shape[1]
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": None,
    }


def test_sampler_and_trainer_log_probs_agree_on_cpu_fp32(
    tmp_path: Path, tokenizer: Any, start_weights: dict[str, Any]
) -> None:
    _, _, seen, records = grpo_run(tmp_path, tokenizer, start_weights)
    (output,) = seen
    eos = tokenizer.eos_token_id
    # The batch holds what the agreement must survive: prompts of several lengths, episodes
    # of several turns (feedback between actions), actions ended by EOS and actions cut at the cap.
    assert len({len(p) for p in output["prompt_ids"]}) > 1
    assert max(output["turns"]) >= 2
    actions = []
    for ids, mask in zip(output["completion_ids"], output["env_mask"], strict=True):
        run: list[int] = []
        for token, m in zip(ids, mask, strict=True):
            if m:
                run.append(token)
            elif run:
                actions.append(run)
                run = []
        if run:
            actions.append(run)
    assert any(a[-1] == eos for a in actions), "no action ended with the end-of-turn token"
    assert any(a[-1] != eos and len(a) == CAP for a in actions), "no action was cut at the cap"
    (record,) = [r for r in records if "diag/logprob_gap_max" in r]
    assert record["diag/logprob_gap_max"] <= 1e-4
    where = record["diag/logprob_gap_where"]
    assert where["first_token"]["tokens"] == len(output["prompt_ids"])
    assert where["after_feedback"]["tokens"] > 0 and where["last_token"]["tokens"] > 0
    assert 0 <= record["diag/equal_reward_groups"] <= 1
    assert record["diag/entropy"] > 0
    assert record["diag/kl_to_start"] == pytest.approx(0.0, abs=1e-6)  # before any update
    assert record["time/update_s"] > 0 and record["time/rollout_s"] > 0


def test_the_gap_catches_log_probs_from_another_policy(
    tmp_path: Path, tokenizer: Any, start_weights: dict[str, Any]
) -> None:
    """The same check fails loudly when the sampler's numbers are not the trained policy's:
    here the rollout reports log-probs shifted by 0.01 on every planner token."""
    module = load_trainer_module()
    rollout = sys.modules["rollout"]
    original = rollout.rollout_output

    def shifted(results: Any) -> dict[str, list]:
        output = original(results)
        output["logprobs"] = [[lp - 0.01 for lp in row] for row in output["logprobs"]]
        return output

    rollout.rollout_output = shifted
    try:
        _, _, _, records = grpo_run(tmp_path, tokenizer, start_weights)
    finally:
        rollout.rollout_output = original
    assert module is not None
    (record,) = [r for r in records if "diag/logprob_gap_max" in r]
    assert record["diag/logprob_gap_max"] == pytest.approx(0.01, abs=1e-4)


def test_a_constant_reward_leaves_the_weights_bit_identical(
    tmp_path: Path, tokenizer: Any, start_weights: dict[str, Any]
) -> None:
    def constant(completions: list[Any], **kwargs: Any) -> list[float]:
        return [1.0] * len(completions)

    _, model, _, records = grpo_run(tmp_path, tokenizer, start_weights, reward_funcs=constant)
    after = model.state_dict()
    assert all(torch.equal(after[k], start_weights[k]) for k in start_weights)
    assert records[0]["diag/equal_reward_groups"] == 1.0


def test_one_update_moves_log_probs_in_the_advantages_direction(
    tmp_path: Path, tokenizer: Any, start_weights: dict[str, Any]
) -> None:
    """Rewards that split every group (samples 0-1 of a group get 1, 2-3 get 0): afterwards the
    positive-advantage samples' planner tokens are more likely and the negative ones' less."""

    def split(completions: list[Any], **kwargs: Any) -> list[float]:
        return [1.0 if i % GENERATIONS < GENERATIONS // 2 else 0.0 for i in range(len(completions))]

    trainer, model, seen, _ = grpo_run(
        tmp_path, tokenizer, start_weights, reward_funcs=split, kl_to_start=False
    )
    (output,) = seen
    before = LlamaForCausalLM(LlamaConfig(**_config_of(start_weights, tokenizer)))
    before.load_state_dict(start_weights)
    moves = []
    for i, (prompt, ids, mask) in enumerate(
        zip(output["prompt_ids"], output["completion_ids"], output["env_mask"], strict=True)
    ):
        seq = torch.tensor([prompt + ids])
        positions = [len(prompt) + j for j, m in enumerate(mask) if m]
        change = _planner_logp(model, seq, positions) - _planner_logp(before, seq, positions)
        moves.append((1 if i % GENERATIONS < GENERATIONS // 2 else -1, change))
    assert sum(1 for sign, change in moves if sign * change > 0) >= 0.75 * len(moves)


def _planner_logp(model: Any, seq: Any, positions: list[int]) -> float:
    with torch.no_grad():
        logits = model(input_ids=seq).logits[0].float()
    logps = torch.log_softmax(logits, dim=-1)
    return float(sum(logps[p - 1, seq[0, p]] for p in positions))


def test_the_null_control_permutes_the_advantages(
    tmp_path: Path, tokenizer: Any, start_weights: dict[str, Any]
) -> None:
    module = load_trainer_module()
    advantages = torch.arange(32, dtype=torch.float32)
    trainer = object.__new__(module.AgentFlowGRPOTrainer)
    trainer._null_rng = random.Random(0)
    shuffled = trainer._permute(advantages)
    assert sorted(shuffled.tolist()) == advantages.tolist()
    assert not torch.equal(shuffled, advantages)
    with pytest.raises(ValueError, match="one advantage per sample"):
        trainer._permute(torch.zeros(2, 3))


def test_every_cpu_example_sets_its_precision_explicitly() -> None:
    """TRL's configs default to ``bf16=True`` (autocast even with ``use_cpu=True``): an example
    that leaves it out trains and evaluates in bf16 while saying fp32."""
    import ast

    missing = []
    for path in sorted((ROOT / "examples" / "trl").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) in ("GRPOConfig", "SFTConfig")
                and "bf16" not in {k.arg for k in node.keywords}
            ):
                missing.append(f"{path.name}:{node.lineno}")
    assert not missing, f"configs without an explicit bf16=: {missing}"
