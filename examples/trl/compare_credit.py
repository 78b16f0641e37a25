"""Turn-level credit on a CPU: one SFT start, then Flow-GRPO with three ways to credit turns.

The tiny planner of ``train_tiny_cpu.py`` (a Llama-style model built from a config over the
bundled 512-token BPE) on bridge questions of one and two hops (a two-hop question needs the
second search's name read out of the first search's result), each in a freshly generated world,
at most 4 turns. Phase 1 (SFT on
expert demonstrations) runs once and is saved; phase 2 starts every arm from those same weights
with the same GRPO settings, questions and number of updates, and differs only in the
advantages TRL's loss sees:

- ``broadcast``: TRL's own ``GRPOTrainer`` (Flow-GRPO: the group-normalised terminal reward on
  every planner token);
- ``progress``: the env's potential-based shaping rewards (``reward_shaping="progress"``) as
  group-normalised shaped returns to go, per turn (``TurnCreditGRPOTrainer``);
- ``monte_carlo``: per-turn ``V(s') - V(s)`` with values from ``--value-forks`` forked
  continuations of every state (``TurnCreditGRPOTrainer``; costs extra rollouts).

Held-out success (greedy, test-split worlds) on the same ``--eval-episodes`` episodes for the SFT
start and after each arm, and on a ``--curve-episodes`` subset along the way. Writes
``sft.json``, ``arm_<name>.json`` per arm, ``summary.json`` and ``credit_comparison.png``.

    python examples/trl/compare_credit.py --out examples/trl/results/credit

``--reuse-sft`` starts the arms from ``WORK/sft_model.pt`` and ``WORK/sft.json`` of an earlier run;
``--arms`` with no names only trains (or, with ``--reuse-sft``, only summarises).
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

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer
from agentflow_env.rollout.agents.demonstrations import expert_demonstrations

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "adapters" / "trl"))
sys.path.insert(0, str(HERE))
from rollout import env_reward, make_rollout_func, task_prompt  # noqa: E402
from train_tiny_cpu import (  # noqa: E402
    CurveCallback,
    Evaluator,
    add_run_arguments,
    build_model,
    cpu_grpo_config,
    sft_trainer,
)
from turn_credit import TurnCreditGRPOTrainer  # noqa: E402

ENV_KWARGS: dict[str, Any] = {
    "hops": [1, 2],
    "kinds": "bridge",
    "fresh_world": True,
    "world_size": "small",
    "prompt_style": "compact",
    "max_turns": 4,
}
MAX_ACTION_TOKENS = 32
SFT_SEEDS, GRPO_SEEDS = 0, 1_000_000  # evaluation: the test split (train_tiny_cpu.EVAL_SEEDS)
ARMS = ("broadcast", "progress", "monte_carlo")


def arm_setup(arm: str, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The env kwargs and ``make_rollout_func`` options of an arm."""
    if arm == "broadcast":
        return dict(ENV_KWARGS), {}
    if arm == "progress":
        shaped = {**ENV_KWARGS, "reward_shaping": "progress", "shaping_weight": args.shaping_weight}
        return shaped, {"credit": "progress"}
    if arm == "monte_carlo":
        return dict(ENV_KWARGS), {"credit": "monte_carlo", "value_forks": args.value_forks}
    raise ValueError(f"unknown arm {arm!r}; arms are {list(ARMS)}")


def train_sft(args: argparse.Namespace, tokenizer: Any, evaluate: Evaluator, work: Path) -> dict:
    torch.manual_seed(args.seed)
    model = build_model(tokenizer, args.hidden, args.layers, args.heads)
    start = time.time()
    records = expert_demonstrations(
        range(SFT_SEEDS, SFT_SEEDS + args.sft_demos), ENV_KWARGS, style="minimal"
    )
    curve: list[dict[str, Any]] = []
    callback = CurveCallback("sft", evaluate, args.curve_episodes, args.curve_every, curve)
    trainer = sft_trainer(
        model, tokenizer, records, args, work / "sft-scratch", [callback], logging_steps=50
    )
    trainer.train()
    train_s = time.time() - start
    held_out = timed_eval(evaluate, model)
    curve.append(
        {"phase": "sft", "step": args.sft_steps, **timed_eval(evaluate, model, args.curve_episodes)}
    )
    torch.save(model.state_dict(), work / "sft_model.pt")
    return {
        "records": len(records),
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_s": train_s,
        "held_out": held_out,
        "curve": curve,
    }


def train_arm(
    arm: str,
    args: argparse.Namespace,
    tokenizer: Any,
    evaluate: Evaluator,
    start: Path,
    scratch: Path,
) -> dict:
    torch.manual_seed(args.seed)
    model = build_model(tokenizer, args.hidden, args.layers, args.heads)
    model.load_state_dict(torch.load(start))
    env_kwargs, credit = arm_setup(arm, args)
    questions = args.grpo_steps * args.questions_per_step
    data = Dataset.from_dict(
        {"prompt": [task_prompt(GRPO_SEEDS + i, **env_kwargs) for i in range(questions)]}
    )
    curve: list[dict[str, Any]] = []
    callback = CurveCallback(arm, evaluate, args.curve_episodes, args.curve_every_grpo, curve)
    trainer = TurnCreditGRPOTrainer(
        model=model,
        reward_funcs=env_reward,
        args=cpu_grpo_config(
            str(scratch),
            args,
            seed=args.seed,
            num_iterations=args.num_iterations,
            max_steps=args.grpo_steps * args.num_iterations,
            logging_steps=args.num_iterations,
        ),
        train_dataset=data,
        processing_class=tokenizer,
        rollout_func=make_rollout_func(env_kwargs, max_action_tokens=MAX_ACTION_TOKENS, **credit),
        callbacks=[callback],
    )
    start = time.time()
    trainer.train()
    train_s = time.time() - start
    held_out = timed_eval(evaluate, model)
    log = [
        {k: v for k, v in e.items() if k in ("step", "reward", "env/success", "env/turns", "loss")}
        for e in trainer.state.log_history
        if "reward" in e
    ]
    return {
        "arm": arm,
        "credit": credit,
        "env": env_kwargs,
        "train_s": train_s,
        "held_out": held_out,
        "curve": curve,
        "train_log": log,
    }


def timed_eval(evaluate: Evaluator, model: Any, episodes: int | None = None) -> dict[str, Any]:
    start = time.time()
    result: dict[str, Any] = evaluate(model, episodes)
    result["eval_s"] = time.time() - start
    print(f"[eval] {result}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="examples/trl/results/credit")
    parser.add_argument("--work", default="runs/credit", help="SFT weights and trainer scratch")
    parser.add_argument("--arms", nargs="*", default=list(ARMS), choices=ARMS)
    parser.add_argument("--reuse-sft", action="store_true", help="start from WORK/sft_model.pt")
    add_run_arguments(parser, sft_steps=800, grpo_steps=40, grpo_lr=5e-4, curve_every=250)
    parser.add_argument("--num-iterations", type=int, default=2)
    parser.add_argument("--shaping-weight", type=float, default=0.5)
    parser.add_argument("--value-forks", type=int, default=2)
    parser.add_argument("--curve-every-grpo", type=int, default=20)
    args = parser.parse_args()

    torch.set_num_threads(2)
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    evaluate = Evaluator(
        tokenizer, args.eval_episodes, env_kwargs=ENV_KWARGS, max_action_tokens=MAX_ACTION_TOKENS
    )
    settings = {
        **{k: v for k, v in vars(args).items() if k not in ("out", "work")},
        "env": ENV_KWARGS,
        "max_action_tokens": MAX_ACTION_TOKENS,
        "torch_threads": torch.get_num_threads(),
    }
    if not args.reuse_sft:
        sft = train_sft(args, tokenizer, evaluate, work)
        write(work / "sft.json", {"settings": settings, **sft})
    sft = json.loads((work / "sft.json").read_text())
    write(out / "sft.json", sft)
    for arm in args.arms:
        with tempfile.TemporaryDirectory(prefix=f"credit-{arm}-") as scratch:
            start = work / "sft_model.pt"
            result = train_arm(arm, args, tokenizer, evaluate, start, Path(scratch))
        write(out / f"arm_{arm}.json", {"settings": settings, **result})
    summarize(out, sft)


def write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=1))


def summarize(out: Path, sft: dict[str, Any]) -> None:
    start = sft["held_out"]["success"]
    arms = {}
    for arm in ARMS:
        path = out / f"arm_{arm}.json"
        if path.exists():
            data = json.loads(path.read_text())
            arms[arm] = {
                "held_out_success": data["held_out"]["success"],
                "gain_points": 100 * (data["held_out"]["success"] - start),
                "train_s": data["train_s"],
            }
    write(out / "summary.json", {"sft_success": start, "arms": arms})
    plot(out, sft, arms)
    print(json.dumps({"sft_success": start, "arms": arms}, indent=1))


def plot(out: Path, sft: dict[str, Any], arms: dict[str, Any]) -> None:
    """Lines: the curve subset (dots, from the SFT end); stars: the full held-out set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    start = sft["curve"][-1]["success"]  # the SFT weights on the curve subset
    for arm in arms:
        data = json.loads((out / f"arm_{arm}.json").read_text())
        iterations = data["settings"]["num_iterations"]
        points = [(0, start)] + [(p["step"] // iterations, p["success"]) for p in data["curve"]]
        (line,) = ax.plot(*zip(*points, strict=True), "o-", label=arm)
        x = data["settings"]["grpo_steps"]
        ax.plot([x], [data["held_out"]["success"]], "*", markersize=13, color=line.get_color())
    ax.plot([0], [sft["held_out"]["success"]], "k*", markersize=13, label="SFT start")
    ax.set_xlabel("GRPO step (generation batches of 64 episodes)")
    ax.set_ylabel("held-out success (greedy)")
    ax.set_title(
        f"tiny planner, 1- and 2-hop bridge questions in fresh worlds; stars: "
        f"{sft['held_out']['episodes']} held-out episodes, dots: {sft['curve'][-1]['episodes']}",
        fontsize=8,
    )
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "credit_comparison.png", dpi=80)


if __name__ == "__main__":
    main()
