"""Draw the training diagnostics of one or more runs (the JSONL ``AgentFlowGRPOTrainer`` writes).

    python examples/trl/plot_diagnostics.py runs/a/diagnostics.jsonl runs/b/diagnostics.jsonl \
        --labels grpo null --out diagnostics.png

Six panels, one line per run: the log-prob gap (sampler vs trainer, log scale, with the 1e-3
"a bug" line), the share of groups without signal, entropy on planner tokens, KL to the starting
policy, the held-out probe (greedy pass@1 solid, sampled pass@1 dashed, pass@k dotted) and the
seconds per step spent generating, in the envs and in the update. How to read them:
``docs/training-diagnostics.md``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
    return [p[0] for p in points], [p[1] for p in points]


def plot(runs: dict[str, list[dict[str, Any]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    panels = [
        ("diag/logprob_gap_max", "log-prob gap, max (nats)", True),
        ("diag/equal_reward_groups", "groups with equal rewards", False),
        ("diag/entropy", "entropy on planner tokens", False),
        ("diag/kl_to_start", "KL to the starting policy", False),
    ]
    for ax, (key, title, log_scale) in zip(axes.flat, panels, strict=False):
        for label, records in runs.items():
            ax.plot(*series(records, key), label=label)
        if log_scale:
            ax.set_yscale("log")
            ax.axhline(1e-3, color="red", linestyle=":", linewidth=1)
        ax.set_title(title, fontsize=9)
    held_out, timing = axes.flat[4], axes.flat[5]
    for label, records in runs.items():
        (line,) = held_out.plot(*series(records, "held_out/greedy_pass_at_1"), "o-", label=label)
        color = line.get_color()
        held_out.plot(*series(records, "held_out/sampled_pass_at_1"), "--", color=color)
        keys = [k for r in records for k in r if k.startswith("held_out/pass_at_")]
        if keys:
            held_out.plot(*series(records, keys[0]), ":", color=color)
    held_out.set_title("held-out: greedy (solid), sampled (dashed), pass@k (dotted)", fontsize=9)
    first = next(iter(runs.values()))
    for key in ("time/generate_s", "time/env_s", "time/update_s"):
        timing.plot(*series(first, key), label=key.split("/")[1])
    timing.set_title(f"seconds per step ({next(iter(runs))})", fontsize=9)
    timing.legend(fontsize=7)
    axes.flat[0].legend(fontsize=7)
    for ax in axes.flat:
        ax.set_xlabel("step", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--labels", nargs="*")
    parser.add_argument("--out", type=Path, default=Path("diagnostics.png"))
    args = parser.parse_args()
    labels = args.labels or [p.stem for p in args.paths]
    if len(labels) != len(args.paths):
        parser.error("give one label per file")
    plot({label: read(path) for label, path in zip(labels, args.paths, strict=True)}, args.out)
    print(args.out)


if __name__ == "__main__":
    main()
