"""Rejection-sampling fine-tuning (RFT): SFT on the policy's own successful rollouts.

The comparison Flow-GRPO must beat at equal wall time besides more SFT on the expert: from the
same start, rounds of (sample ``G`` episodes per new training question at the training
temperature with the current model; keep the successful ones whole; a few SFT steps on every
kept episode so far) until the budget is spent. A kept episode trains as it was sampled: its
prompt ids and completion ids unchanged (no decode and re-encode), the loss on the planner's
actions only (``env_mask``: feedback tokens carry none).

    python examples/trl/recipe.py --start sft800 --phases rft --seeds 0 --out DIR
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from datasets import Dataset
from recipe_common import load_start, seed_everything
from rollout import HFGenerator, run_episodes
from train_tiny_cpu import build_model
from trl import SFTConfig, SFTTrainer


def rft_records(results: Sequence[Any]) -> list[dict[str, list[int]]]:
    """Pre-tokenized SFT rows of the successful episodes among ``results``: ``input_ids`` the
    prompt and completion ids as sampled, ``completion_mask`` 1 on the planner's tokens only."""
    return [
        {
            "input_ids": list(r.prompt_ids) + list(r.completion_ids),
            "completion_mask": [0] * len(r.prompt_ids) + [int(m) for m in r.env_mask],
        }
        for r in results
        if r.success and not r.failed
    ]


def run_rft(
    args: argparse.Namespace,
    tokenizer: Any,
    start: Path | str,
    seed: int,
    seconds: float,
    questions: Any,
    max_action_tokens: int,
) -> tuple[Any, dict[str, Any]]:
    """RFT from ``start`` for ``seconds`` of wall time (sampling included); ``questions``
    yields the training questions' labels (GRPO's stream for the seed). Returns the model and
    the run's figures."""
    seed_everything(seed, args.threads)
    model = load_start(build_model(tokenizer, args.hidden, args.layers, args.heads), start)
    pad, eos = tokenizer.pad_token_id, [tokenizer.eos_token_id]
    kept: list[dict[str, list[int]]] = []
    rounds: list[dict[str, Any]] = []
    begin = time.time()
    while time.time() - begin < seconds:
        labels = list(itertools.islice(questions, args.questions_per_step))
        specs = [label for label in labels for _ in range(args.num_generations)]
        sampler = HFGenerator(model.eval(), pad, eos, temperature=args.temperature)
        results = run_episodes(specs, sampler, tokenizer, max_action_tokens=max_action_tokens)
        new = rft_records(results)
        kept += new
        steps = 0
        if kept:
            with tempfile.TemporaryDirectory(prefix="recipe-rft-") as scratch:
                trainer = SFTTrainer(
                    model=model.train(),
                    args=SFTConfig(
                        output_dir=scratch,
                        per_device_train_batch_size=min(32, len(kept)),
                        learning_rate=args.rft_lr,
                        max_steps=args.rft_steps_per_round,
                        lr_scheduler_type="constant",
                        completion_only_loss=True,
                        logging_steps=args.rft_steps_per_round,
                        save_strategy="no",
                        report_to=[],
                        use_cpu=True,
                        seed=seed,
                        bf16=False,
                    ),
                    train_dataset=Dataset.from_list(kept),
                    processing_class=tokenizer,
                )
                trainer.train()
                steps = trainer.state.global_step
        rounds.append(
            {
                "episodes": len(results),
                "successes": len(new),
                "kept": len(kept),
                "sft_steps": steps,
                "elapsed_s": time.time() - begin,
            }
        )
        print(f"[rft] round {len(rounds)}: {rounds[-1]}", flush=True)
    return model.eval(), {"budget_s": seconds, "train_s": time.time() - begin, "rounds": rounds}
