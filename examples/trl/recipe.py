"""A CPU recipe where Flow-GRPO beats its SFT start, measured against a null control.

The tiny planner of ``train_tiny_cpu.py`` (a Llama-style model built from a config over the
bundled 512-token BPE) on the search task of ``compare_credit.py``: bridge questions of one and
two hops, a fresh small world per episode, at most 4 turns. Phases (``--phases``):

- ``sft``: one SFT start on expert demonstrations, saved to ``WORK/sft_model.pt``; scored greedy
  on the held-out episodes and sampled (pass@1, pass@k at the training temperature).
- ``checkpoints``: the SFT checkpoints (``--sft-checkpoints``) scored the same way, so the
  SFT curve shows what more SFT buys at this point;
- ``start``: the start scored in the sample shape of ``--samples`` (``start_<shape>.json``): the
  paired baseline of ``--samples turns`` runs, which play AgentFlow's structured prompts;
- ``grpo``: Flow-GRPO from that start, once per ``--seeds`` seed (``AgentFlowGRPOTrainer``:
  TRL's ``GRPOTrainer`` with the training diagnostics); with ``--samples turns`` one row per
  planner turn (``grpo_turns_seed<N>.json``), and ``--grpo-seconds`` caps its wall time;
- ``null``: the same run with the advantages permuted across each batch (``null_control``): what
  the optimizer does to the policy with the same step sizes and no signal;
- ``more_sft``: the SFT start trained further with SFT for the mean GRPO wall time;
- ``rft``: rejection-sampling fine-tuning (``rft.py``: SFT on the policy's own successful
  rollouts) from the same start for the same wall time, once per seed;
- ``summary``: ``summary.json`` (per seed and mean +- std: paired gains with 95% intervals) and
  ``recipe.png``.

Every model is scored on the same episodes of the frozen suite ``--suite`` (default
``tiny-bridge-v1``: 1000 test-split episodes; ``docs/benchmark.md``), greedy, so gains are
paired. Writes ``sft.json``, ``<phase>_seed<N>.json``, ``summary.json`` and the diagnostics JSONL
of every run (``diagnostics_<phase>_seed<N>.jsonl``) into ``--out``.

    python examples/trl/recipe.py --out examples/trl/results/recipe
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer
from agentflow_env.rollout.agents.demonstrations import expert_demonstrations

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "adapters" / "trl"))
sys.path.insert(0, str(HERE))
from compare_credit import ENV_KWARGS, MAX_ACTION_TOKENS  # noqa: E402  (the same task)
from diagnostics import AgentFlowGRPOTrainer  # noqa: E402
from recipe_common import (  # noqa: E402
    COMMITTED_STARTS,
    PairedEvaluator,
    load_start,
    seed_everything,
    write,
)
from recipe_summary import summarize  # noqa: E402
from rft import run_rft  # noqa: E402
from rollout import env_reward, make_rollout_func, task_prompt  # noqa: E402
from train_tiny_cpu import build_model, cpu_grpo_config, sft_trainer  # noqa: E402

from agentflow_env.rollout import DynamicSampling  # noqa: E402

SFT_SEEDS, GRPO_SEEDS = 0, 1_000_000  # held-out: the test split (tiny-bridge-v1's seeds)
RESERVE_SEEDS = 5_000_000  # dynamic sampling's refill questions (seed S: its own range)
HELD_OUT_PROBE_SEEDS = 3_000_000  # the small frozen set the trainer probes along the way
PHASES = ("sft", "checkpoints", "start", "grpo", "null", "more_sft", "rft", "summary")
DEFAULT_PHASES = [phase for phase in PHASES if phase != "start"]  # flat runs use the SFT's score


class Checkpoints(TrainerCallback):
    """Saves the model's weights at the given optimizer steps (``WORK/sft_step<N>.pt``)."""

    def __init__(self, steps: list[int], work: Path) -> None:
        self.steps, self.work = set(steps), work

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any):
        if state.global_step in self.steps:
            torch.save(model.state_dict(), self.work / f"sft_step{state.global_step}.pt")


def score(evaluate: PairedEvaluator, model: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Greedy on every held-out episode; sampled pass@1 / pass@k on the first ``--pass-episodes``."""
    greedy = evaluate.greedy(model)
    temperature = args.temperature if args.pass_temperature is None else args.pass_temperature
    sampled = evaluate.sampled(model, temperature, args.pass_k, args.pass_episodes)
    print(
        f"[eval] greedy {greedy['success']:.3f} ({greedy['episodes']}), sampled pass@1 "
        f"{sampled['pass_at_1']:.3f} pass@{args.pass_k} {sampled[f'pass_at_{args.pass_k}']:.3f}",
        flush=True,
    )
    return {"greedy": greedy, "sampled": sampled}


def run_sft(args: argparse.Namespace, tokenizer: Any, evaluate: PairedEvaluator, work: Path):
    seed_everything(args.sft_seed, args.threads)
    model = build_model(tokenizer, args.hidden, args.layers, args.heads)
    start = time.time()
    records = expert_demonstrations(
        range(SFT_SEEDS, SFT_SEEDS + args.sft_demos), ENV_KWARGS, style="minimal"
    )
    demo_s = time.time() - start
    sft_args = argparse.Namespace(**{**vars(args), "seed": args.sft_seed})
    with tempfile.TemporaryDirectory(prefix="recipe-sft-") as scratch:
        trainer = sft_trainer(
            model,
            tokenizer,
            records,
            sft_args,
            Path(scratch),
            [Checkpoints(args.sft_checkpoints, work)],
            logging_steps=50,
        )
        trainer.train()
    train_s = time.time() - demo_s - start
    torch.save(model.state_dict(), work / "sft_model.pt")
    result = {
        "records": len(records),
        "parameters": sum(p.numel() for p in model.parameters()),
        "demo_s": demo_s,
        "train_s": train_s,
        "log": [e for e in trainer.state.log_history if "loss" in e],
        **score(evaluate, model, args),
    }
    return result


def grpo_config(args: argparse.Namespace, scratch: Path, seed: int) -> GRPOConfig:
    """The recipe's GRPO settings: fp32 on CPU (``bf16=False`` explicitly: TRL's default is
    bf16 autocast even on CPU), one update per batch, a constant learning rate, no KL."""
    if args.questions_per_step % 2:
        raise SystemExit("--questions-per-step must be even (micro-batches of two groups)")
    # One optimizer step per generation batch of questions_per_step groups, computed in
    # micro-batches of two groups: one forward over 128 long sequences at once is several
    # times slower on CPU than eight of 16 (the attention matrix no longer fits in cache).
    return cpu_grpo_config(
        str(scratch),
        args,
        seed=seed,
        per_device_train_batch_size=2 * args.num_generations,
        gradient_accumulation_steps=args.questions_per_step // 2,
    )


def run_grpo(
    args: argparse.Namespace,
    tokenizer: Any,
    evaluate: PairedEvaluator,
    work: Path,
    out: Path,
    seed: int,
    null: bool,
) -> dict[str, Any]:
    """Flow-GRPO (or its null control) from the SFT start with one seed."""
    seed_everything(seed, args.threads)
    model = start_model(args, tokenizer, work)
    # Each seed trains on its own question stream; the arm and its null control share it.
    first = GRPO_SEEDS + seed * 100_000
    questions = args.grpo_steps * args.questions_per_step
    # Training questions: the hops whose groups carry signal (--train-hops); held-out
    # evaluation stays on the suite's mix.
    train_kwargs = {**ENV_KWARGS, "hops": args.train_hops}
    if args.lambda_errors is not None:  # the format anchor in the reward: a cost per invalid action
        train_kwargs["lambda_errors"] = args.lambda_errors
    data = Dataset.from_dict(
        {"prompt": [task_prompt(first + i, **train_kwargs) for i in range(questions)]}
    )
    name = arm_name("null" if null else "grpo", seed, args.samples)
    diagnostics = out / f"diagnostics_{name}.jsonl"
    diagnostics.unlink(missing_ok=True)
    held_out = [
        (HELD_OUT_PROBE_SEEDS + i, {**ENV_KWARGS, "split": "test"})
        for i in range(args.held_out_episodes)
    ]
    with tempfile.TemporaryDirectory(prefix=f"recipe-{name}-") as scratch:
        if args.beta:  # TRL loads the KL reference from the model's path: save the start there
            model.save_pretrained(Path(scratch) / "start")
            model.config._name_or_path = str(Path(scratch) / "start")
        trainer = AgentFlowGRPOTrainer(
            model=model,
            reward_funcs=env_reward,
            args=grpo_config(args, Path(scratch), seed),
            train_dataset=data,
            processing_class=tokenizer,
            rollout_func=make_rollout_func(
                train_kwargs,
                max_action_tokens=MAX_ACTION_TOKENS,
                dynamic_sampling=dynamic_sampling(args, seed, train_kwargs),
                samples=args.samples,
            ),
            diagnostics_path=str(diagnostics),
            null_control=null,
            null_seed=seed,
            held_out_specs=held_out,
            held_out_every=args.held_out_every,
            held_out_k=args.pass_k,
            max_action_tokens=MAX_ACTION_TOKENS,
            diagnostics_every=args.diagnostics_every,
            callbacks=[] if args.grpo_seconds is None else [StopAfter(args.grpo_seconds)],
        )
        start = time.time()
        trainer.train()
        train_s = time.time() - start
    keep = ("step", "reward", "frac_reward_zero_std", "entropy", "loss", "grad_norm", "kl")
    prefixes = ("env/", "diag/", "held_out/", "dynamic/")
    log = [
        {k: v for k, v in e.items() if k in keep or k.startswith(prefixes)}
        for e in trainer.state.log_history
    ]
    result = {
        "arm": name,
        "seed": seed,
        "null_control": null,
        "samples": args.samples,
        "steps": trainer.state.global_step,
        "train_s": train_s,
        "log": log,
    }
    if args.no_final_score:  # a quick check: the diagnostics log holds the figures
        return result
    return {**result, **score(evaluate, model, args)}


def arm_name(phase: str, seed: int, samples: str = "flat") -> str:
    """A run's file stem: ``grpo_seed0``, or ``grpo_turns_seed0`` for one row per planner turn."""
    return f"{phase}{'_turns' if samples == 'turns' else ''}_seed{seed}"


def dynamic_sampling(
    args: argparse.Namespace, seed: int, train_kwargs: dict[str, Any]
) -> DynamicSampling | None:
    """``--refill-rounds N``: equal-reward groups are dropped and refilled from new questions of
    this seed's own reserve (``--screen-candidates``: greedy failures first)."""
    if not args.refill_rounds:
        return None
    seeds = iter(range(RESERVE_SEEDS + seed * 100_000, RESERVE_SEEDS + (seed + 1) * 100_000))

    def reserve(n: int) -> list[str]:
        return [task_prompt(next(seeds), **train_kwargs) for _ in range(n)]

    return DynamicSampling(reserve, args.refill_rounds, args.screen_candidates)


class StopAfter(TrainerCallback):
    """Stops training once ``seconds`` of wall time have passed since training began."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.start = seconds, 0.0

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.start = time.time()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if time.time() - self.start >= self.seconds:
            control.should_training_stop = True


def run_more_sft(
    args: argparse.Namespace, tokenizer: Any, evaluate: PairedEvaluator, work: Path, out: Path
) -> dict[str, Any]:
    """The SFT start trained further with SFT, on new demonstrations, for the mean wall time of
    the GRPO runs (``--more-sft-seconds`` overrides it)."""
    seconds = grpo_wall_time(out, args.more_sft_seconds, "more_sft")
    seed_everything(args.sft_seed, args.threads)
    model = start_model(args, tokenizer, work)
    first = SFT_SEEDS + args.sft_demos  # demonstrations the SFT start never saw
    records = expert_demonstrations(
        range(first, first + args.sft_demos), ENV_KWARGS, style="minimal"
    )
    more_args = argparse.Namespace(**{**vars(args), "seed": args.sft_seed, "sft_steps": 100_000})
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="recipe-more-sft-") as scratch:
        trainer = sft_trainer(
            model,
            tokenizer,
            records,
            more_args,
            Path(scratch),
            [StopAfter(seconds)],
            logging_steps=50,
        )
        trainer.train()
    return {
        "budget_s": seconds,
        "train_s": time.time() - start,
        "steps": trainer.state.global_step,
        **score(evaluate, model, args),
    }


def grpo_wall_time(out: Path, override: float | None, phase: str) -> float:
    """A comparison's budget: ``override``, else the mean wall time of the GRPO runs in ``out``."""
    if override is not None:
        return override
    times = [json.loads(p.read_text())["train_s"] for p in sorted(out.glob("grpo_seed*.json"))]
    if not times:
        raise SystemExit(f"{phase} needs grpo_seed*.json in --out, or its --*-seconds")
    return sum(times) / len(times)


def run_rft_phase(
    args: argparse.Namespace,
    tokenizer: Any,
    evaluate: PairedEvaluator,
    work: Path,
    out: Path,
    seed: int,
) -> dict[str, Any]:
    """Rejection-sampling fine-tuning (``rft.py``) from the GRPO start, on the seed's GRPO
    question stream, for the GRPO runs' mean wall time (``--rft-seconds`` overrides it)."""
    seconds = grpo_wall_time(out, args.rft_seconds, "rft")
    train_kwargs = {**ENV_KWARGS, "hops": args.train_hops}
    first = GRPO_SEEDS + seed * 100_000
    questions = (task_prompt(first + i, **train_kwargs) for i in itertools.count())
    model, result = run_rft(
        args, tokenizer, start_weights(work, args), seed, seconds, questions, MAX_ACTION_TOKENS
    )
    return {"arm": f"rft_seed{seed}", "seed": seed, **result, **score(evaluate, model, args)}


def start_weights(work: Path, args: argparse.Namespace) -> Path | str:
    """The weights GRPO starts from: a committed start (``--start sft800``), the checkpoint
    ``--start-step`` of this run's SFT, or the end of it."""
    if args.start is not None:
        return args.start
    if args.start_step is None:
        return work / "sft_model.pt"
    return work / f"sft_step{args.start_step}.pt"


def start_model(args: argparse.Namespace, tokenizer: Any, work: Path) -> Any:
    """The recipe's model with the start's weights (``start_weights``) loaded."""
    model = build_model(tokenizer, args.hidden, args.layers, args.heads)
    return load_start(model, start_weights(work, args))


def build_parser() -> argparse.ArgumentParser:
    """The recipe's settings (``quick_checks.py`` starts from the same defaults)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="examples/trl/results/recipe")
    parser.add_argument("--work", default="runs/recipe", help="SFT weights and scratch")
    parser.add_argument("--phases", nargs="+", default=DEFAULT_PHASES, choices=PHASES)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--sft-seed", type=int, default=0)
    parser.add_argument("--sft-demos", type=int, default=8000)
    parser.add_argument("--sft-steps", type=int, default=1200)
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--sft-checkpoints", nargs="*", type=int, default=[800])
    parser.add_argument(
        "--start-step",
        type=int,
        help="start GRPO (and more_sft) from this SFT checkpoint instead of the end of SFT",
    )
    parser.add_argument(
        "--start",
        help="start GRPO (and more_sft) from a committed SFT start by name "
        f"({', '.join(sorted(COMMITTED_STARTS))}: examples/trl/checkpoints/) or a weights file",
    )
    parser.add_argument("--grpo-steps", type=int, default=36)
    parser.add_argument(
        "--grpo-seconds",
        type=float,
        help="stop GRPO after this much wall time (a per-turn run at a flat run's wall time)",
    )
    parser.add_argument("--grpo-lr", type=float, default=2e-4)
    parser.add_argument("--questions-per-step", type=int, default=16)
    parser.add_argument(
        "--train-hops",
        nargs="+",
        type=int,
        default=[2],
        help="hops of the GRPO questions (the SFT start solves 1-hop ones: no signal there)",
    )
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument(
        "--samples",
        choices=("flat", "turns"),
        default="flat",
        help="the sample shape: one flat sequence per trajectory, or one row per planner turn",
    )
    parser.add_argument(
        "--refill-rounds",
        type=int,
        default=0,
        help="dynamic sampling: drop equal-reward groups and refill them in up to N rounds",
    )
    parser.add_argument(
        "--screen-candidates",
        type=int,
        default=0,
        help="dynamic sampling: per missing group, screen this many questions greedily and "
        "refill from greedy's failures first",
    )
    parser.add_argument(
        "--top-entropy-quantile",
        type=float,
        default=1.0,
        help="train only on this top fraction of planner tokens by entropy (TRL's option)",
    )
    parser.add_argument("--beta", type=float, default=0.0, help="KL to the start (TRL's beta)")
    parser.add_argument(
        "--lambda-errors", type=float, help="the env's reward cost per invalid action"
    )
    parser.add_argument(
        "--no-final-score",
        action="store_true",
        help="skip scoring on the suite at the end (quick checks read the diagnostics log)",
    )
    parser.add_argument("--held-out-every", type=int, default=18)
    parser.add_argument("--diagnostics-every", type=int, default=4)
    parser.add_argument("--held-out-episodes", type=int, default=48)
    parser.add_argument("--more-sft-seconds", type=float, help="default: mean GRPO wall time")
    parser.add_argument("--rft-seconds", type=float, help="default: mean GRPO wall time")
    parser.add_argument("--rft-lr", type=float, default=1e-4, help="RFT's SFT learning rate")
    parser.add_argument(
        "--rft-steps-per-round", type=int, default=8, help="SFT steps after each sampling round"
    )
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument(
        "--pass-temperature",
        type=float,
        help="pass@k's sampling temperature (default: --temperature); the committed starts "
        "were scored at 0.7",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: steady on a busy machine)"
    )
    parser.add_argument("--suite", default="tiny-bridge-v1", help="held-out evaluation suite")
    parser.add_argument("--eval-episodes", type=int, help="the suite's first N (default: all)")
    parser.add_argument("--pass-episodes", type=int, default=200)
    parser.add_argument("--pass-k", type=int, default=4)
    return parser


def main() -> None:
    args = build_parser().parse_args()

    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    if args.samples == "turns" and {"sft", "checkpoints", "more_sft", "rft"} & set(args.phases):
        raise SystemExit(
            "sft, checkpoints, more_sft and rft train flat; run them with --samples flat"
        )
    evaluate = PairedEvaluator(
        tokenizer, args.suite, args.eval_episodes, MAX_ACTION_TOKENS, samples=args.samples
    )
    settings = {
        **{k: v for k, v in vars(args).items() if k not in ("out", "work", "phases")},
        "env": ENV_KWARGS,
        "max_action_tokens": MAX_ACTION_TOKENS,
    }
    if "sft" in args.phases:
        sft = run_sft(args, tokenizer, evaluate, work)
        write(work / "sft.json", {"settings": settings, **sft})
        write(out / "sft.json", {"settings": settings, **sft})
    if "checkpoints" in args.phases:
        for step in args.sft_checkpoints:
            model = build_model(tokenizer, args.hidden, args.layers, args.heads)
            model.load_state_dict(torch.load(work / f"sft_step{step}.pt"))
            write(
                out / f"sft_step{step}.json",
                {"settings": settings, "step": step, **score(evaluate, model, args)},
            )
    if "start" in args.phases:
        seed_everything(args.sft_seed, args.threads)
        model = start_model(args, tokenizer, work)
        write(
            out / f"start_{args.samples}.json",
            {"settings": settings, "samples": args.samples, **score(evaluate, model, args)},
        )
    for phase in ("grpo", "null"):
        if phase not in args.phases:
            continue
        for seed in args.seeds:
            result = run_grpo(args, tokenizer, evaluate, work, out, seed, null=phase == "null")
            write(out / f"{result['arm']}.json", {"settings": settings, **result})
    if "rft" in args.phases:
        for seed in args.seeds:
            result = run_rft_phase(args, tokenizer, evaluate, work, out, seed)
            write(out / f"rft_seed{seed}.json", {"settings": settings, **result})
    if "more_sft" in args.phases:
        write(
            out / "more_sft.json",
            {"settings": settings, **run_more_sft(args, tokenizer, evaluate, work, out)},
        )
    if "summary" in args.phases:
        summarize(out, args, hops=[task.hops for task in evaluate.suite.tasks(args.eval_episodes)])


if __name__ == "__main__":
    main()
