"""Quick checks of the recipe's options: a few Flow-GRPO updates from the committed start, each
beside its null control, read from the diagnostics log.

Every check is ``recipe.py``'s GRPO run (``run_grpo``) from ``--start`` (default ``sft800``) with
its options on top of ``BASE``, and the same run with permuted advantages (``null_control``). A
check is not a learning result: it is a few updates, cheap enough (under 10 CPU minutes for the
pair) to run for every option, and it answers what the option does to a batch. Per run:

- informative groups per update (groups with mixed rewards in the batch that trained) and, with
  dynamic sampling, what was dropped and refilled and how many episodes that cost;
- the gradient signal against the null: the held-out probe (greedy and sampled pass@1 at the
  start and after the last update, the same episodes for both runs), the KL to the start, the
  mean |advantage| the loss used;
- the format: invalid actions per episode in the first and last training batches and greedy on
  the probe.

    python examples/trl/quick_checks.py --checks baseline dynamic \\
        --out examples/trl/results/quick_checks
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from statistics import mean
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import recipe  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402

BASE = {
    "grpo_steps": 8,
    "questions_per_step": 8,
    "grpo_lr": 2e-4,
    "train_hops": [1, 2],
    "held_out_every": 8,
    "held_out_episodes": 32,
    "diagnostics_every": 2,
    "pass_k": 4,
    "no_final_score": True,
}
"""What every check shares: 8 updates of 8 questions x G = 8 at lr 2e-4, 1- and 2-hop
questions, the held-out probe (32 test-split episodes) before the first and after the last."""
CHECKS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "dynamic": {"refill_rounds": 2, "screen_candidates": 2},
    "entropy": {"top_entropy_quantile": 0.2},
    "no_anchor_lr4e-4": {"grpo_lr": 4e-4},
    "kl_anchor_lr4e-4": {"grpo_lr": 4e-4, "beta": 0.05},
    "error_anchor_lr4e-4": {"grpo_lr": 4e-4, "lambda_errors": 0.1},
}
"""Each check's options over ``BASE`` (``recipe.py``'s flags, as attribute names)."""


def check_args(name: str, start: str, seed: int, threads: int) -> argparse.Namespace:
    defaults = vars(recipe.build_parser().parse_args([]))
    return argparse.Namespace(
        **{**defaults, **BASE, **CHECKS[name], "start": start, "seeds": [seed], "threads": threads}
    )


def read_run(diagnostics: Path, result: dict[str, Any], groups: int) -> dict[str, Any]:
    """One run's figures from its diagnostics JSONL and its result (TRL's log)."""
    rows = [json.loads(x) for x in diagnostics.read_text().splitlines()]
    steps = [r for r in rows if "diag/informative_groups" in r]
    probes = [r for r in rows if "held_out/greedy_pass_at_1" in r]
    kls = [r["diag/kl_to_start"] for r in steps if r.get("diag/kl_to_start") is not None]
    invalid = [e["env/invalid_actions"] for e in result["log"] if "env/invalid_actions" in e]
    figures: dict[str, Any] = {
        "updates": len(steps),
        "informative_groups_per_update": mean(r["diag/informative_groups"] for r in steps) * groups,
        "mean_abs_advantage_used": mean(r["diag/mean_abs_advantage_used"] for r in steps),
        "kl_to_start_last": kls[-1] if kls else None,
        "train_invalid_actions_first_last": [invalid[0], invalid[-1]] if invalid else None,
        "train_reward_first_last": [
            next(e["reward"] for e in result["log"] if "reward" in e),
            [e["reward"] for e in result["log"] if "reward" in e][-1],
        ],
        "probe_start": _probe(probes[0]),
        "probe_end": _probe(probes[-1]),
        "train_s": result["train_s"],
        "s_per_update": result["train_s"] / max(1, len(steps)),
    }
    if any("dynamic/dropped" in r for r in steps):
        figures["dynamic_per_update"] = {
            key: mean(r[f"dynamic/{key}"] for r in steps)
            for key in ("dropped", "refilled", "kept_equal", "screened", "episodes")
        }
        reasons: dict[str, int] = {}
        for r in steps:
            for drop in r.get("dynamic/dropped_groups", []):
                reasons[drop["reason"]] = reasons.get(drop["reason"], 0) + 1
        figures["dynamic_dropped_reasons"] = reasons
    return figures


def _probe(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "step": row["step"],
        "greedy": row["held_out/greedy_pass_at_1"],
        "sampled": row["held_out/sampled_pass_at_1"],
        "invalid_actions": row.get("held_out/invalid_actions"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", nargs="+", default=list(CHECKS), choices=list(CHECKS))
    parser.add_argument("--start", default="sft800", help="a committed start or weights file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, help="override BASE's updates (a smoke run)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="examples/trl/results/quick_checks")
    options = parser.parse_args()
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    for name in options.checks:
        args = check_args(name, options.start, options.seed, options.threads)
        if options.steps:
            args.grpo_steps = args.held_out_every = options.steps
        folder = out / name
        folder.mkdir(exist_ok=True)
        runs = {}
        started, cpu = time.time(), time.process_time()
        for null in (False, True):
            result = recipe.run_grpo(args, tokenizer, None, folder, folder, options.seed, null)
            label = "null" if null else "grpo"
            diagnostics = folder / f"diagnostics_{label}_seed{options.seed}.jsonl"
            runs[label] = read_run(diagnostics, result, args.questions_per_step)
            recipe.write(folder / f"{label}_seed{options.seed}.json", result)
        summary = {
            "check": name,
            "command": f"python examples/trl/quick_checks.py --checks {name} --start "
            f"{options.start} --seed {options.seed} --threads {options.threads}",
            "options": CHECKS[name],
            "base": BASE,
            "wall_s_pair": time.time() - started,
            "cpu_s_pair": time.process_time() - cpu,
            **runs,
            "probe_change_over_null": {
                kind: (runs["grpo"]["probe_end"][kind] - runs["grpo"]["probe_start"][kind])
                - (runs["null"]["probe_end"][kind] - runs["null"]["probe_start"][kind])
                for kind in ("greedy", "sampled")
            },
        }
        recipe.write(folder / "summary.json", summary)
        print(json.dumps(summary, indent=1), flush=True)


if __name__ == "__main__":
    main()
