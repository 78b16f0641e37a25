"""The learning recipe's own pieces (``examples/trl/recipe_common.py``, ``recipe.py``): the
committed SFT starts load by name into the recipe's model, the sampling headroom is counted per
episode, and the recipe's options reach the rollout and TRL's config."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples" / "trl"))
sys.path.insert(0, str(ROOT / "adapters" / "trl"))
import recipe  # noqa: E402
import recipe_common  # noqa: E402
from train_tiny_cpu import build_model, cpu_grpo_config  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402


@pytest.mark.parametrize("name", sorted(recipe_common.COMMITTED_STARTS))
def test_a_committed_start_loads_by_name_and_matches_its_record(name: str) -> None:
    path = recipe_common.committed_start(name)
    record = json.loads((recipe_common.CHECKPOINTS / "checkpoints.json").read_text())[name]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == record["sha256"]
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    settings = record["settings"]
    model = build_model(tokenizer, settings["hidden"], settings["layers"], settings["heads"])
    before = model.model.embed_tokens.weight.detach().clone()
    recipe_common.load_start(model, name)
    assert not (model.model.embed_tokens.weight == before).all()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert sum(p.numel() for p in model.parameters()) == record["parameters"]


def test_an_unknown_start_is_refused() -> None:
    with pytest.raises(SystemExit, match="committed starts"):
        recipe_common.committed_start("sft900")


def test_sampling_headroom_counts_per_episode() -> None:
    greedy = [0, 0, 1, 1, 0]
    wins = [[0, 1], [0, 0], [1, 0], [1, 1], [1, 1]]
    headroom = recipe_common.sampling_headroom(greedy, wins)
    assert headroom == {
        "greedy_fails_group_succeeds": 2 / 5,
        "greedy_succeeds_group_fails": 1 / 5,
        "greedy_fails_group_fails": 1 / 5,
    }
    with pytest.raises(ValueError):
        recipe_common.sampling_headroom([0], [])


def test_the_recipe_options_reach_the_rollout_and_the_config(tmp_path) -> None:
    args = argparse.Namespace(
        refill_rounds=2,
        screen_candidates=3,
        questions_per_step=4,
        num_generations=8,
        grpo_steps=5,
        grpo_lr=1e-4,
        temperature=0.5,
        beta=0.04,
        top_entropy_quantile=0.2,
    )
    sampling = recipe.dynamic_sampling(args, seed=1, train_kwargs={"hops": [2]})
    assert sampling is not None and (sampling.max_rounds, sampling.screen_candidates) == (2, 3)
    first, second = sampling.reserve(2)
    assert json.loads(first)["seed"] == recipe.RESERVE_SEEDS + 100_000
    assert json.loads(second)["seed"] == recipe.RESERVE_SEEDS + 100_001
    assert json.loads(first)["env_kwargs"]["hops"] == [2]
    assert json.loads(sampling.reserve(1)[0])["seed"] == recipe.RESERVE_SEEDS + 100_002
    assert (
        recipe.dynamic_sampling(argparse.Namespace(**{**vars(args), "refill_rounds": 0}), 1, {})
        is None
    )
    config = cpu_grpo_config(str(tmp_path), args, seed=0)
    assert (config.beta, config.top_entropy_quantile, config.temperature) == (0.04, 0.2, 0.5)


class RecordingEvaluator:
    """``PairedEvaluator``'s two scores, recording the sampling temperature asked for."""

    def __init__(self) -> None:
        self.temperatures: list[float] = []

    def greedy(self, model: object) -> dict:
        return {"success": 0.5, "episodes": 2}

    def sampled(self, model: object, temperature: float, k: int, episodes: int) -> dict:
        self.temperatures.append(temperature)
        return {"pass_at_1": 0.25, f"pass_at_{k}": 0.5, "temperature": temperature}


def test_pass_at_k_is_sampled_at_the_pass_temperature_when_given() -> None:
    args = recipe.build_parser().parse_args(["--temperature", "0.4"])
    evaluator = RecordingEvaluator()
    recipe.score(evaluator, None, args)
    args = recipe.build_parser().parse_args(["--temperature", "0.4", "--pass-temperature", "0.7"])
    assert recipe.score(evaluator, None, args)["sampled"]["temperature"] == 0.7
    assert evaluator.temperatures == [0.4, 0.7]


def test_rft_trains_on_the_sampled_ids_with_loss_on_actions_only(tmp_path) -> None:
    from datasets import Dataset
    from rft import rft_records
    from trl import SFTConfig, SFTTrainer

    from agentflow_env.rollout import EpisodeResult

    won = EpisodeResult(
        [5, 6, 7], [8, 9, 10, 11, 12], [1, 1, 0, 0, 1], [0.0] * 5, 1.0, True, 2, "answered"
    )
    lost = EpisodeResult([5, 6], [8], [1], [0.0], 0.0, False, 1, "answered")
    broken = EpisodeResult([5], [8], [0], [0.0], 0.0, True, 1, "error", error="boom")
    rows = rft_records([won, lost, broken])
    assert rows == [
        {"input_ids": [5, 6, 7, 8, 9, 10, 11, 12], "completion_mask": [0, 0, 0, 1, 1, 0, 0, 1]}
    ]
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    trainer = SFTTrainer(
        model=build_model(tokenizer, 16, 1, 2),
        args=SFTConfig(
            output_dir=str(tmp_path), completion_only_loss=True, report_to=[], use_cpu=True
        ),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    batch = trainer.data_collator([trainer.train_dataset[0]])
    assert batch["input_ids"][0].tolist() == rows[0]["input_ids"]  # not re-tokenized
    expected = [
        t if m else -100
        for t, m in zip(rows[0]["input_ids"], rows[0]["completion_mask"], strict=True)
    ]
    assert batch["labels"][0].tolist() == expected  # feedback and prompt carry no loss


def test_a_per_turn_run_has_its_own_files_and_trains_nothing_flat(tmp_path, monkeypatch) -> None:
    assert recipe.arm_name("grpo", 2) == "grpo_seed2"
    assert recipe.arm_name("null", 0, "turns") == "null_turns_seed0"
    args = recipe.build_parser().parse_args(["--samples", "turns", "--grpo-seconds", "60"])
    assert "start" not in args.phases and args.grpo_seconds == 60
    argv = ["recipe.py", "--samples", "turns", "--phases", "rft", "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [*argv, "--work", str(tmp_path)])
    with pytest.raises(SystemExit, match="run them with --samples flat"):
        recipe.main()


def test_the_evaluator_plays_the_prompts_of_its_sample_shape(monkeypatch) -> None:
    seen: list[dict] = []

    def run_episodes(specs, generate, tokenizer, **options):
        seen.append(options)
        return []

    monkeypatch.setattr(recipe_common, "run_episodes", run_episodes)
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    for samples in ("flat", "turns"):
        evaluator = recipe_common.PairedEvaluator(
            tokenizer, "tiny-bridge-v1", 3, 32, samples=samples
        )
        evaluator._run(evaluator.specs, None)
    assert [o["samples"] for o in seen] == ["flat", "turns"]
    assert all(o["max_action_tokens"] == 32 for o in seen)
