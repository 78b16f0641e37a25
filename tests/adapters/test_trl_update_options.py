"""The update options the learning recipe uses, through the TRL adapter's trainer: credit on the
highest-entropy planner tokens (TRL's ``top_entropy_quantile``), the KL anchor to the start
(TRL's ``beta``) and the format anchor in the reward (the env's ``lambda_errors``).

Two real ``trainer.train()`` steps of ``AgentFlowGRPOTrainer`` with a 1-layer model on CPU. The
entropy mask TRL builds is captured: it must select only planner tokens (never the env's feedback
tokens, which ``env_mask`` leaves out of the loss), about the asked fraction of them.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import pytest
import torch
from conftest import ROOT  # noqa: E402
from datasets import Dataset  # noqa: E402
from test_trl import cpu_grpo_config, half_expert, tiny_model  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402

sys.path.insert(0, str(ROOT / "adapters" / "trl"))
import rollout  # noqa: E402  (the module diagnostics.py imports)
from diagnostics import AgentFlowGRPOTrainer  # noqa: E402

ENV = {"hops": 1, "max_turns": 2, "lambda_errors": 0.25}
G, QUANTILE = 4, 0.25


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.set_num_threads(2)
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    inner = rollout.make_rollout_func(ENV, max_action_tokens=12)
    outputs: list[dict[str, Any]] = []

    def recording(prompts: list[Any], trainer: Any) -> dict[str, list]:
        output = inner(prompts, trainer)
        outputs.append(output)
        return output

    real = rollout.trainer_generate
    rollout.trainer_generate = lambda trainer, greedy=False: half_expert(
        real(trainer, greedy=greedy), tokenizer
    )
    # TRL builds the KL reference from the model's path: a model made from a config has none.
    model = tiny_model(tokenizer)
    start = tmp_path_factory.mktemp("start")
    model.save_pretrained(start)
    model.config._name_or_path = str(start)
    trainer = AgentFlowGRPOTrainer(
        model=model,
        reward_funcs=rollout.env_reward,
        args=cpu_grpo_config(
            tmp_path_factory.mktemp("options"),
            per_device_train_batch_size=2 * G,
            num_generations=G,
            max_steps=2,
            learning_rate=1e-3,
            beta=0.1,
            top_entropy_quantile=QUANTILE,
            temperature=1.0,
            loss_type="grpo",
        ),
        train_dataset=Dataset.from_dict({"prompt": [rollout.task_prompt(s) for s in range(8)]}),
        processing_class=tokenizer,
        rollout_func=recording,
        kl_to_start=False,
    )
    masks: list[tuple[torch.Tensor, torch.Tensor]] = []
    original = trainer.get_high_entropy_mask

    def capture(entropies: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
        chosen = original(entropies, mask, threshold)
        masks.append((mask.detach().clone(), chosen.detach().clone()))
        return chosen

    trainer.get_high_entropy_mask = capture
    try:
        trainer.train()
    finally:
        rollout.trainer_generate = real
    return {"trainer": trainer, "masks": masks, "outputs": outputs}


def test_entropy_credit_selects_a_top_fraction_of_planner_tokens_only(
    trained: dict[str, Any],
) -> None:
    masks = trained["masks"]
    assert masks, "top_entropy_quantile < 1 must go through the entropy mask"
    feedback_seen = False
    for loss_mask, chosen in masks:
        assert not (chosen & ~loss_mask.bool()).any(), "a token outside the loss was selected"
        planner = int(loss_mask.sum())
        assert 0 < int(chosen.sum()) <= planner
        # The quantile is taken over planner tokens: about QUANTILE of them (ties go in).
        assert int(chosen.sum()) >= math.floor(QUANTILE * planner)
        assert int(chosen.sum()) <= 0.6 * planner
    for output in trained["outputs"]:
        for env_mask in output["env_mask"]:
            feedback_seen |= 0 in env_mask
    assert feedback_seen, "the episodes must hold feedback tokens for the check to mean anything"


def test_the_kl_anchor_is_computed_and_moves_after_an_update(trained: dict[str, Any]) -> None:
    logged = [e["kl"] for e in trained["trainer"].state.log_history if "kl" in e]
    assert len(logged) == 2 and all(math.isfinite(x) for x in logged)
    assert logged[0] == pytest.approx(0.0, abs=1e-6)  # the reference is the start
    assert logged[1] > 0.0


def test_the_format_anchor_costs_each_invalid_action(trained: dict[str, Any]) -> None:
    costs = 0
    for output in trained["outputs"]:
        for reward, success, invalid in zip(
            output["env_reward"], output["success"], output["invalid_actions"], strict=True
        ):
            assert reward == pytest.approx(success - ENV["lambda_errors"] * invalid)
            costs += invalid > 0
    assert costs > 0, "the untrained half of the episodes must make invalid actions"
