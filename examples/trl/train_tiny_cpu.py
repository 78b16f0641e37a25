"""A tiny planner that learns AgentFlow's search task on a CPU: SFT warm start, then Flow-GRPO.

Everything is built locally (no downloads): a Llama-style model of ~0.1 M parameters over the
package's 512-token byte-level BPE. Phase 1 fine-tunes it with TRL's ``SFTTrainer`` on expert
demonstrations (a fresh small world per episode); phase 2 runs ``GRPOTrainer`` with the
``adapters/trl/rollout.py`` rollout function. Held-out success (greedy, test-split worlds never
seen in training) is measured before and after each phase on the same episodes, and along the
way on a smaller subset for the learning curve. Writes ``results.json`` and ``learning_curve.png``.

    python examples/trl/train_tiny_cpu.py --out examples/trl/results
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from datasets import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, TrainerCallback
from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer
from agentflow_env.rollout.agents.demonstrations import expert_demonstrations

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "adapters" / "trl"))
from rollout import HFGenerator, env_reward, make_rollout_func, run_episodes, task_prompt  # noqa: E402

ENV_KWARGS: dict[str, Any] = {
    "hops": 1,
    "fresh_world": True,
    "world_size": "small",
    "prompt_style": "compact",
    "max_turns": 3,
}
MAX_ACTION_TOKENS = 32
# Seed ranges keep demonstrations, GRPO questions and evaluation episodes apart; evaluation
# also uses the test split, whose fresh worlds come from a disjoint seed stream.
SFT_SEEDS = 0
GRPO_SEEDS = 1_000_000
EVAL_SEEDS = 2_000_000


def build_model(tokenizer: Any, hidden: int, layers: int, heads: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config)


class Evaluator:
    """Greedy held-out success on fixed test-split episodes (the same ones every time)."""

    def __init__(
        self,
        tokenizer: Any,
        episodes: int,
        batch: int = 250,
        env_kwargs: dict[str, Any] | None = None,
        max_action_tokens: int = MAX_ACTION_TOKENS,
    ) -> None:
        self.tokenizer = tokenizer
        kwargs = {**(ENV_KWARGS if env_kwargs is None else env_kwargs), "split": "test"}
        self.specs = [(EVAL_SEEDS + i, kwargs) for i in range(episodes)]
        self.batch = batch
        self.max_action_tokens = max_action_tokens

    def __call__(self, model: Any, episodes: int | None = None) -> dict[str, float]:
        specs = self.specs[: episodes or len(self.specs)]
        generate = HFGenerator(
            model, self.tokenizer.pad_token_id, [self.tokenizer.eos_token_id], greedy=True
        )
        results = []
        for start in range(0, len(specs), self.batch):
            results += run_episodes(
                specs[start : start + self.batch],
                generate,
                self.tokenizer,
                max_action_tokens=self.max_action_tokens,
            )
        n = len(results)
        return {
            "episodes": n,
            "success": sum(r.success for r in results) / n,
            "mean_turns": sum(r.turns for r in results) / n,
            "invalid_actions": sum(r.metrics.get("invalid_actions", 0) for r in results) / n,
        }


class CurveCallback(TrainerCallback):
    """Evaluates every ``every`` optimizer steps on the curve subset and records the point."""

    def __init__(self, phase: str, evaluate: Evaluator, episodes: int, every: int, curve: list):
        self.phase, self.evaluate, self.episodes, self.every = phase, evaluate, episodes, every
        self.curve = curve
        self.start = time.time()

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any):
        if state.global_step % self.every == 0 and state.global_step < state.max_steps:
            self.record(model, state.global_step)

    def record(self, model: Any, step: int) -> None:
        result = self.evaluate(model, self.episodes)
        point = {"phase": self.phase, "step": step, "wall_s": time.time() - self.start, **result}
        self.curve.append(point)
        print(f"[curve] {self.phase} step {step}: success {result['success']:.3f}", flush=True)


def cpu_grpo_config(
    output_dir: str,
    args: argparse.Namespace,
    *,
    seed: int,
    bf16: bool = False,
    max_completion_length: int = 4096,
    logging_steps: int = 1,
    per_device_train_batch_size: int | None = None,
    gradient_accumulation_steps: int = 1,
    num_iterations: int = 1,
    max_steps: int | None = None,
    data_seed: int | None = None,
) -> GRPOConfig:
    """The examples' Flow-GRPO settings on CPU from ``args`` (``questions_per_step``,
    ``num_generations``, ``grpo_steps``, ``grpo_lr``, ``temperature``; ``beta`` and
    ``top_entropy_quantile`` where ``args`` has them): a constant learning rate, no KL by default, ``loss_type="grpo"`` (per-trajectory mean over planner tokens, then mean over the
    batch), group-scaled rewards, no shuffling, no checkpoints. Precision is explicit: TRL's
    default is bf16 autocast even on CPU. One optimizer step per batch of
    ``questions_per_step`` groups unless the caller splits it."""
    return GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=per_device_train_batch_size
        or args.questions_per_step * args.num_generations,
        gradient_accumulation_steps=gradient_accumulation_steps,
        num_generations=args.num_generations,
        num_iterations=num_iterations,
        max_steps=max_steps or args.grpo_steps,
        learning_rate=args.grpo_lr,
        lr_scheduler_type="constant",
        beta=getattr(args, "beta", 0.0),  # the KL anchor to the start (recipe.py's --beta)
        top_entropy_quantile=getattr(args, "top_entropy_quantile", 1.0),
        temperature=args.temperature,
        loss_type="grpo",
        scale_rewards="group",
        max_completion_length=max_completion_length,
        logging_steps=logging_steps,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=bf16,
        seed=seed,
        data_seed=data_seed,
        shuffle_dataset=False,
        gradient_checkpointing=False,
    )


def sft_trainer(
    model: Any,
    tokenizer: Any,
    records: list[dict[str, Any]],
    args: argparse.Namespace,
    output_dir: Path,
    callbacks: list[Any],
    *,
    logging_steps: int,
    bf16: bool = False,
) -> SFTTrainer:
    """TRL's ``SFTTrainer`` on demonstration records (loss on the completion only), with the
    settings both CPU examples use: batch 32, ``args.sft_lr`` held after 10 warm-up steps,
    ``args.sft_steps`` steps, nothing saved."""
    data = Dataset.from_list(
        [{"prompt": r["prompt"], "completion": r["completion"]} for r in records]
    )
    return SFTTrainer(
        model=model,
        args=SFTConfig(
            output_dir=str(output_dir),
            per_device_train_batch_size=32,
            learning_rate=args.sft_lr,
            max_steps=args.sft_steps,
            warmup_steps=10,
            lr_scheduler_type="constant_with_warmup",
            logging_steps=logging_steps,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            seed=args.seed,
            gradient_checkpointing=False,
            bf16=bf16,
        ),
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=callbacks,
    )


def add_run_arguments(
    parser: argparse.ArgumentParser,
    *,
    sft_steps: int,
    grpo_steps: int,
    grpo_lr: float,
    curve_every: int,
) -> None:
    """The model, SFT, GRPO and evaluation options this script and ``compare_credit.py`` share."""
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--sft-demos", type=int, default=3000)
    parser.add_argument("--sft-steps", type=int, default=sft_steps)
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--grpo-steps", type=int, default=grpo_steps)
    parser.add_argument("--questions-per-step", type=int, default=8)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--grpo-lr", type=float, default=grpo_lr)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--eval-episodes", type=int, default=1000)
    parser.add_argument("--curve-episodes", type=int, default=200)
    parser.add_argument("--curve-every", type=int, default=curve_every)
    parser.add_argument("--seed", type=int, default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="examples/trl/results")
    add_run_arguments(parser, sft_steps=550, grpo_steps=80, grpo_lr=1e-4, curve_every=150)
    parser.add_argument(
        "--bf16", action="store_true", help="bf16 autocast (TRL's default; slower on most CPUs)"
    )
    args = parser.parse_args()

    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="agentflow-trl-"))  # trainer scratch; nothing is saved
    t0 = time.time()

    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    model = build_model(tokenizer, args.hidden, args.layers, args.heads)
    params = sum(p.numel() for p in model.parameters())
    evaluate = Evaluator(tokenizer, args.eval_episodes)
    curve: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}

    def held_out(label: str, episodes: int | None = None) -> None:
        start = time.time()
        summary[label] = evaluate(model, episodes)
        summary[label]["eval_s"] = time.time() - start
        print(f"[eval] {label}: {summary[label]}", flush=True)

    held_out("initial", args.curve_episodes)  # untrained: every episode runs all turns (slow)

    # Phase 1: SFT on expert demonstrations, loss on the completion (the action) only.
    start = time.time()
    records = expert_demonstrations(
        range(SFT_SEEDS, SFT_SEEDS + args.sft_demos), ENV_KWARGS, style="minimal"
    )
    demo_s = time.time() - start
    sft_curve = CurveCallback("sft", evaluate, args.curve_episodes, args.curve_every, curve)
    sft = sft_trainer(
        model, tokenizer, records, args, work, [sft_curve], logging_steps=25, bf16=args.bf16
    )
    sft.train()
    sft_s = time.time() - start
    held_out("after_sft")

    # Phase 2: Flow-GRPO through the adapter (trajectory-level group-normalised reward).
    start = time.time()
    n_questions = args.grpo_steps * args.questions_per_step
    grpo_data = Dataset.from_dict(
        {"prompt": [task_prompt(GRPO_SEEDS + i) for i in range(n_questions)]}
    )
    grpo_curve = CurveCallback(
        "grpo", evaluate, args.curve_episodes, max(1, args.curve_every // 5), curve
    )
    grpo = GRPOTrainer(
        model=model,
        reward_funcs=env_reward,
        args=cpu_grpo_config(
            str(work),
            args,
            seed=args.seed,
            bf16=args.bf16,
            max_completion_length=512,
            logging_steps=5,
        ),
        train_dataset=grpo_data,
        processing_class=tokenizer,
        rollout_func=make_rollout_func(ENV_KWARGS, max_action_tokens=MAX_ACTION_TOKENS),
        callbacks=[grpo_curve],
    )
    grpo_curve.record(model, 0)
    grpo.train()
    grpo_s = time.time() - start
    held_out("after_grpo")
    train_log = [
        {
            k: v
            for k, v in entry.items()
            if k in ("step", "reward", "env/success", "loss", "env/turns")
        }
        for entry in grpo.state.log_history
        if "reward" in entry
    ]

    results = {
        "settings": {
            **{k: v for k, v in vars(args).items() if k != "out"},
            "env": ENV_KWARGS,
            "max_action_tokens": MAX_ACTION_TOKENS,
            "parameters": params,
            "sft_records": len(records),
            "torch_threads": torch.get_num_threads(),
        },
        "held_out": summary,
        "curve": curve,
        "grpo_train_log": train_log,
        "timing_s": {
            "demonstrations": demo_s,
            "sft_phase": sft_s,
            "grpo_phase": grpo_s,
            "total": time.time() - t0,
        },
    }
    (out / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, out / "learning_curve.png")
    print(json.dumps({"held_out": summary, "timing_s": results["timing_s"]}, indent=1))


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = results["settings"]
    fig, ax = plt.subplots(figsize=(7, 4))
    # Lines: the curve subset only; stars: the full held-out set (compare stars with stars).
    subset = [p for p in results["curve"] if p["episodes"] == settings["curve_episodes"]]
    sft = [p for p in subset if p["phase"] == "sft"]
    grpo = [p for p in subset if p["phase"] == "grpo"]
    offset = settings["sft_steps"]
    ax.plot(
        [0] + [p["step"] for p in sft],
        [results["held_out"]["initial"]["success"]] + [p["success"] for p in sft],
        "o-",
        label="SFT (expert demos)",
    )
    ax.plot(
        [offset + p["step"] for p in grpo],
        [p["success"] for p in grpo],
        "s-",
        label="Flow-GRPO (TRL rollout_func)",
    )
    for label in ("after_sft", "after_grpo"):
        point = results["held_out"][label]
        x = offset if label == "after_sft" else offset + settings["grpo_steps"]
        ax.plot([x], [point["success"]], "k*", markersize=12)
    ax.axvline(offset, color="grey", linestyle=":")
    ax.set_xlabel("optimizer step (SFT, then GRPO)")
    ax.set_ylabel("held-out success (greedy)")
    ax.set_ylim(0, 1)
    ax.set_title(
        f"tiny planner, 1-hop fresh worlds; stars: {settings['eval_episodes']} episodes, "
        f"dots: {settings['curve_episodes']}",
        fontsize=9,
    )
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=80)


if __name__ == "__main__":
    main()
