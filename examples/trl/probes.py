"""Probe runs: does the TRL training path learn what a probe isolates, from reward alone?

For each probe env (``AgentFlow-Probe-*-v0``, ``agentflow_env.envs.config.PROBE_ENV_IDS``)
this builds the tiny planner of ``train_tiny_cpu.py`` (a Llama-style model from a config over the
bundled 512-token BPE), fine-tunes it briefly on the probe's random demonstrator (``agentflow_env.rollout.agents.probes``:
the warm start is at chance), measures greedy success on held-out test-split episodes, trains it
with TRL's ``GRPOTrainer`` through ``adapters/trl/rollout.py`` (``make_rollout_func(env_id=...)``)
and measures again on the same episodes. Writes ``OUT/<probe>.json``: start and final success,
the curve, steps to 90 %, settings, seed, wall times and TRL's log history
(``OUT/<probe>_monte_carlo.json`` with ``--credit monte_carlo``, ``OUT/<probe>_turns.json``
with ``--samples turns``).

    python examples/trl/probes.py --probe tool_choice --out examples/trl/results/probes
    python examples/trl/probes.py --probe all --out examples/trl/results/probes
    python examples/trl/probes.py --probe delayed_credit --credit monte_carlo --out runs/probes
    python examples/trl/probes.py --probe delayed_credit --samples turns --out runs/probes

``--samples turns`` trains one row per planner turn on AgentFlow's structured prompts
(``TurnSamplesGRPOTrainer``, ``adapters/trl/turn_samples.py``) and evaluates in the same
observation mode; the SFT warm start is the same as the flat runs' (flat-mode demonstrations,
whose first prompt is the structured one too).

A probe that does not learn points at the training path (rollout, masks, advantages, loss), not
at the task: each is solvable by its expert planner and learnable by this model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
import transformers
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOTrainer

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer
from agentflow_env.rollout.agents.probes import probe_demonstrations
from agentflow_env.rollout.labels.probe_labels import probe_env_id

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "adapters" / "trl"))
sys.path.insert(0, str(HERE))
from rollout import HFGenerator, env_reward, make_rollout_func, run_episodes, task_prompt  # noqa: E402
from train_tiny_cpu import build_model, cpu_grpo_config, sft_trainer  # noqa: E402
from turn_credit import TurnCreditGRPOTrainer  # noqa: E402
from turn_samples import TurnSamplesGRPOTrainer  # noqa: E402

PROBES = ("tool_choice", "stop", "delayed_credit", "copying")
# Seed ranges keep demonstrations, GRPO tasks and evaluation apart; evaluation also draws from
# the test split, whose tasks come from other seeds than the train split's.
SFT_SEEDS, GRPO_SEEDS, EVAL_SEEDS = 0, 1_000_000, 2_000_000
_KEYS = ("sft_demos", "sft_steps", "grpo_steps", "grpo_lr", "max_action_tokens")
DEFAULTS: dict[str, dict[str, Any]] = {
    probe: dict(zip(_KEYS, values, strict=True))
    for probe, values in {
        "tool_choice": (1000, 150, 60, 3e-4, 24),
        "stop": (1000, 150, 150, 5e-4, 16),
        "delayed_credit": (1000, 400, 60, 3e-4, 24),
        "copying": (2000, 1200, 60, 5e-4, 32),
    }.items()
}
"""Per-probe defaults of the options given as ``None`` on the command line (``_KEYS``; a whole
action's tokens, end-of-turn token included)."""
LOG_KEYS = (
    "step",
    "loss",
    "grad_norm",
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "entropy",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
    "completions/mean_length",
    "env/success",
    "env/turns",
    "env/invalid_actions",
    "env/failed",
    "step_time",
    "turns/rows",
    "turns/padding_rows",
    "turns/rows_per_trajectory",
    "turns/informative_groups",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", required=True, choices=[*PROBES, "all"])
    parser.add_argument("--out", default="examples/trl/results/probes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument(
        "--sft-demos", type=int, default=None, help="demonstrated episodes (default: per probe)"
    )
    parser.add_argument("--sft-steps", type=int, default=None, help="default: per probe")
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--grpo-steps", type=int, default=None, help="default: per probe")
    parser.add_argument("--questions-per-step", type=int, default=8)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--grpo-lr", type=float, default=None, help="default: per probe")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-action-tokens", type=int, default=None, help="default: per probe")
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--curve-every", type=int, default=5, help="GRPO steps between evals")
    parser.add_argument(
        "--credit",
        choices=("broadcast", "monte_carlo"),
        default="broadcast",
        help="broadcast: TRL's GRPOTrainer (Flow-GRPO); monte_carlo: per-turn V(s')-V(s) from "
        "forked continuations (TurnCreditGRPOTrainer)",
    )
    parser.add_argument("--value-forks", type=int, default=2, help="forks per state (monte_carlo)")
    parser.add_argument(
        "--samples",
        choices=("flat", "turns"),
        default="flat",
        help="flat: one sequence per episode; turns: one row per planner turn on its structured "
        "prompt (TurnSamplesGRPOTrainer)",
    )
    parser.add_argument(
        "--normalize",
        choices=("trajectory", "turn"),
        default="trajectory",
        help="--samples turns: group statistics over trajectories (the paper) or turn samples",
    )
    parser.add_argument(
        "--flat-prompts",
        action="store_true",
        help="--samples turns on flat (growing) prompts instead of structured ones: the rows "
        "differ from the flat shape's only in how they are cut (an ablation)",
    )
    return parser


def with_defaults(args: argparse.Namespace, probe: str) -> argparse.Namespace:
    """``args`` with ``probe``'s defaults for the options left ``None``."""
    given = {k: v for k, v in vars(args).items() if v is not None}
    return argparse.Namespace(**{**DEFAULTS[probe], **given, "probe": probe})


@contextlib.contextmanager
def reproducible(seed: int, threads: int) -> Iterator[None]:
    """Seeds, ``threads`` CPU threads and deterministic kernels for the block, then the process's
    settings back. Deterministic kernels come without the NaN fill of every new tensor they
    bring by default (it triples the CPU time of a step here and changes no result)."""
    saved = (
        torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,  # type: ignore[attr-defined]
    )
    torch.set_num_threads(threads)
    transformers.set_seed(seed)  # random, numpy and torch
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
    try:
        yield
    finally:
        torch.set_num_threads(saved[0])
        torch.use_deterministic_algorithms(saved[1])
        torch.utils.deterministic.fill_uninitialized_memory = saved[2]  # type: ignore[attr-defined]


def evaluate(
    model: Any, tokenizer: Any, args: argparse.Namespace, *, sample: bool = False
) -> dict[str, float]:
    """Success on ``args.eval_episodes`` test-split episodes (the same every time): greedy, or
    with ``sample`` sampled at the training temperature (what GRPO's groups see: about chance
    at the start)."""
    settings = {"split": "test", **observation_kwargs(args)}
    specs = [(EVAL_SEEDS + i, settings) for i in range(args.eval_episodes)]
    generate = HFGenerator(
        model,
        tokenizer.pad_token_id,
        [tokenizer.eos_token_id],
        temperature=args.temperature,
        greedy=not sample,
    )
    start = time.time()
    with torch.no_grad():
        results = run_episodes(
            specs,
            generate,
            tokenizer,
            env_id=probe_env_id(args.probe),
            max_action_tokens=args.max_action_tokens,
            samples=args.samples,
        )
    n = len(results)
    return {
        "episodes": n,
        "success": sum(r.success for r in results) / n,
        "mean_turns": sum(r.turns for r in results) / n,
        "invalid_actions": sum(r.metrics.get("invalid_actions", 0) for r in results) / n,
        "failed": sum(r.failed for r in results),
        "eval_s": time.time() - start,
    }


class Curve(TrainerCallback):
    """Held-out success every ``every`` GRPO steps, and the first step it reaches 90 %."""

    def __init__(self, tokenizer: Any, args: argparse.Namespace) -> None:
        self.tokenizer, self.args = tokenizer, args
        self.points: list[dict[str, Any]] = []
        self.steps_to_90: int | None = None
        self.start = time.time()

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any):
        every = self.args.curve_every
        if every > 0 and state.global_step % every == 0 and state.global_step < state.max_steps:
            self.record(model, state.global_step)

    def record(self, model: Any, step: int) -> dict[str, Any]:
        was_training = model.training
        model.eval()
        point = {"step": step, "wall_s": time.time() - self.start}
        point.update(evaluate(model, self.tokenizer, self.args))
        model.train(was_training)
        self.points.append(point)
        if self.steps_to_90 is None and point["success"] >= 0.9:
            self.steps_to_90 = step
        print(f"[curve] step {step}: success {point['success']:.3f}", flush=True)
        return point


def grpo_trainer(
    model: Any, tokenizer: Any, args: argparse.Namespace, work: Path, curve: Curve
) -> GRPOTrainer:
    """TRL's ``GRPOTrainer`` (``TurnCreditGRPOTrainer`` for Monte Carlo credit,
    ``TurnSamplesGRPOTrainer`` for turn samples) on the probe's train-split tasks through the
    adapter's ``rollout_func``."""
    prompts = [
        task_prompt(GRPO_SEEDS + i) for i in range(args.grpo_steps * args.questions_per_step)
    ]
    credit: dict[str, Any] = {}
    trainer_class = GRPOTrainer
    if args.credit == "monte_carlo":
        credit = {"credit": "monte_carlo", "value_forks": args.value_forks}
        trainer_class = TurnCreditGRPOTrainer
    if args.samples == "turns":
        credit.update(samples="turns", normalize=args.normalize)
        trainer_class = TurnSamplesGRPOTrainer
    credit["env_kwargs"] = observation_kwargs(args)
    return trainer_class(
        model=model,
        reward_funcs=env_reward,
        args=cpu_grpo_config(
            str(work), args, seed=args.seed, max_completion_length=1024, data_seed=args.seed
        ),
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
        rollout_func=make_rollout_func(
            env_id=probe_env_id(args.probe), max_action_tokens=args.max_action_tokens, **credit
        ),
        callbacks=[curve],
    )


def observation_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The env kwargs ``--flat-prompts`` adds (none otherwise: each shape's own mode)."""
    if not args.flat_prompts:
        return {}
    if args.samples != "turns":
        raise ValueError("--flat-prompts is for --samples turns (flat samples are flat already)")
    return {"observation_mode": "flat"}


def run_probe(args: argparse.Namespace, probe: str) -> dict[str, Any]:
    """SFT on the random demonstrator, held-out success, GRPO, held-out success again."""
    args = with_defaults(args, probe)
    with reproducible(args.seed, args.threads):
        return _run(args, probe)


def _run(args: argparse.Namespace, probe: str) -> dict[str, Any]:
    t0 = time.time()
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    model = build_model(tokenizer, args.hidden, args.layers, args.heads)
    timing: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix=f"probe-{probe}-") as scratch:
        start = time.time()
        records = probe_demonstrations(
            probe, range(SFT_SEEDS, SFT_SEEDS + args.sft_demos), seed=args.seed
        )
        timing["demonstrations_s"] = time.time() - start
        start = time.time()
        sft = sft_trainer(
            model, tokenizer, records, args, Path(scratch) / "sft", [], logging_steps=25
        )
        sft.train()
        timing["sft_s"] = time.time() - start
        curve = Curve(tokenizer, args)
        initial = curve.record(model, 0)
        initial_sampled = evaluate(model, tokenizer, args, sample=True)
        start = time.time()
        grpo = grpo_trainer(model, tokenizer, args, Path(scratch) / "grpo", curve)
        grpo.train()
        timing["grpo_s"] = time.time() - start
        final = curve.record(model, args.grpo_steps)
        final_sampled = evaluate(model, tokenizer, args, sample=True)
    timing["eval_s"] = sum(p["eval_s"] for p in curve.points)
    timing["eval_sampled_s"] = initial_sampled["eval_s"] + final_sampled["eval_s"]
    timing["total_s"] = time.time() - t0
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    return {
        "probe": probe,
        "env_id": probe_env_id(probe),
        "start_success": initial["success"],
        "final_success": final["success"],
        "start_sampled_success": initial_sampled["success"],
        "final_sampled_success": final_sampled["success"],
        "eval_episodes": args.eval_episodes,
        "grpo_steps": args.grpo_steps,
        "sft_steps": args.sft_steps,
        "steps_to_90": curve.steps_to_90,
        "seed": args.seed,
        "settings": {
            **settings,
            "sft_records": len(records),
            "parameters": sum(p.numel() for p in model.parameters()),
            "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "start": initial,
        "final": final,
        "start_sampled": initial_sampled,
        "final_sampled": final_sampled,
        "curve": curve.points,
        "timing_s": timing,
        "train_log": [
            {k: v for k, v in entry.items() if k in LOG_KEYS}
            for entry in grpo.state.log_history
            if "reward" in entry
        ],
    }


def result_name(args: argparse.Namespace, probe: str) -> str:
    """``<probe>[_<credit>][_turns[_turn_normalized][_flat_prompts]]``; the flat broadcast run
    is ``<probe>``."""
    parts = [probe] + ([args.credit] if args.credit != "broadcast" else [])
    if args.samples == "turns":
        parts += ["turns"] + (["turn_normalized"] if args.normalize == "turn" else [])
        parts += ["flat_prompts"] if args.flat_prompts else []
    return "_".join(parts)


def main() -> None:
    args = build_parser().parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for probe in PROBES if args.probe == "all" else (args.probe,):
        result = run_probe(args, probe)
        result["command"] = " ".join(["python", "examples/trl/probes.py", *sys.argv[1:]])
        (out / f"{result_name(args, probe)}.json").write_text(json.dumps(result, indent=1))
        summary = {k: result[k] for k in ("start_success", "final_success", "steps_to_90")}
        print(
            json.dumps({probe: {**summary, "total_s": result["timing_s"]["total_s"]}}), flush=True
        )


if __name__ == "__main__":
    main()
