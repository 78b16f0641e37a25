"""The recipe's summary: per seed and over seeds, paired gains against the start, the null
control and RFT, and ``recipe.png``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from recipe_common import CHECKPOINTS, mean_std, paired_gain, write


def start_result(out: Path, args: argparse.Namespace) -> Path:
    """The scores of the start (``<start>.json``, ``sft.json`` or ``sft_step<N>.json``), for
    paired gains."""
    if args.start is not None:  # a committed start's scores sit beside its weights
        return CHECKPOINTS / f"{args.start}.json"
    return out / ("sft.json" if args.start_step is None else f"sft_step{args.start_step}.json")


def summarize(out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Per seed and over seeds: greedy held-out success and paired gains (points, 95% CI)."""
    sft = json.loads(start_result(out, args).read_text())
    start = sft["greedy"]["outcomes"]
    seeds: dict[str, Any] = {}
    for path in sorted(out.glob("grpo_seed*.json")):
        grpo = json.loads(path.read_text())
        null_path = out / path.name.replace("grpo_", "null_")
        row: dict[str, Any] = {
            "grpo": grpo["greedy"]["success"],
            "grpo_ci95": grpo["greedy"]["ci95"],
            "grpo_sampled_pass_at_1": grpo["sampled"]["pass_at_1"],
            "gain_over_sft": paired_gain(start, grpo["greedy"]["outcomes"]),
            "grpo_train_s": grpo["train_s"],
        }
        if null_path.exists():
            null = json.loads(null_path.read_text())
            row.update(
                {
                    "null": null["greedy"]["success"],
                    "null_ci95": null["greedy"]["ci95"],
                    "null_gain_over_sft": paired_gain(start, null["greedy"]["outcomes"]),
                    "gain_over_null": paired_gain(
                        null["greedy"]["outcomes"], grpo["greedy"]["outcomes"]
                    ),
                    "null_train_s": null["train_s"],
                }
            )
        rft_path = out / path.name.replace("grpo_", "rft_")
        if rft_path.exists():
            rft = json.loads(rft_path.read_text())
            row.update(
                {
                    "rft": rft["greedy"]["success"],
                    "rft_gain_over_sft": paired_gain(start, rft["greedy"]["outcomes"]),
                    "gain_over_rft": paired_gain(
                        rft["greedy"]["outcomes"], grpo["greedy"]["outcomes"]
                    ),
                    "rft_train_s": rft["train_s"],
                }
            )
        seeds[str(grpo["seed"])] = row

    def over_seeds(key: str) -> dict[str, float] | None:
        values = [r[key]["points"] for r in seeds.values() if key in r]
        return mean_std(values) if values else None

    summary: dict[str, Any] = {
        "sft": {
            "start": start_result(out, args).name,
            "greedy": sft["greedy"]["success"],
            "ci95": sft["greedy"]["ci95"],
            "episodes": sft["greedy"]["episodes"],
            "sampled": sft["sampled"],
            "train_s": sft.get("train_s"),
        },
        "seeds": seeds,
        "gain_over_sft_points": over_seeds("gain_over_sft"),
        "gain_over_null_points": over_seeds("gain_over_null"),
        "null_gain_over_sft_points": over_seeds("null_gain_over_sft"),
        "rft_gain_over_sft_points": over_seeds("rft_gain_over_sft"),
        "every_seed_beats_sft": all(r["gain_over_sft"]["points"] > 0 for r in seeds.values()),
        "every_seed_beats_null": all(
            r.get("gain_over_null", {}).get("points", 0) > 0 for r in seeds.values()
        ),
    }
    more = out / "more_sft.json"
    if more.exists():
        data = json.loads(more.read_text())
        summary["more_sft"] = {
            "greedy": data["greedy"]["success"],
            "gain_over_sft": paired_gain(start, data["greedy"]["outcomes"]),
            "steps": data["steps"],
            "train_s": data["train_s"],
        }
    write(out / "summary.json", summary)
    plot(out, summary)
    print(json.dumps(summary, indent=1))
    return summary


def plot(out: Path, summary: dict[str, Any]) -> None:
    """Left: each run's held-out probe along training (greedy pass@1, solid: Flow-GRPO, dashed:
    null control). Right: final greedy success on the whole suite per seed, with 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (probe, final) = plt.subplots(1, 2, figsize=(11, 4))
    for index, seed in enumerate(summary["seeds"]):
        color = f"C{index}"
        for phase, style in (("grpo", "o-"), ("null", "s--")):
            path = out / f"diagnostics_{phase}_seed{seed}.jsonl"
            if not path.exists():
                continue
            rows = [json.loads(x) for x in path.read_text().splitlines()]
            points = [
                (r["step"], r["held_out/greedy_pass_at_1"])
                for r in rows
                if "held_out/greedy_pass_at_1" in r
            ]
            if points:
                probe.plot(
                    *zip(*points, strict=True), style, color=color, label=f"{phase} seed {seed}"
                )
    probe.set_xlabel("GRPO step")
    probe.set_ylabel("greedy success, held-out probe")
    probe.legend(fontsize=7)
    sft = summary["sft"]
    final.axhspan(*sft["ci95"], color="grey", alpha=0.3, label="SFT start (95% CI)")
    for index, (seed, row) in enumerate(summary["seeds"].items()):
        for offset, key in ((-0.1, "grpo"), (0.1, "null")):
            if key not in row:
                continue
            value = row[key]
            low, high = row[f"{key}_ci95"]
            final.errorbar(
                [index + offset],
                [value],
                yerr=[[value - low], [high - value]],
                fmt="o" if key == "grpo" else "s",
                color=f"C{index}",
                label=f"{key} seed {seed}",
            )
    if "more_sft" in summary:
        final.axhline(summary["more_sft"]["greedy"], color="black", linestyle=":", label="more SFT")
    final.set_xticks(range(len(summary["seeds"])), [f"seed {s}" for s in summary["seeds"]])
    final.set_ylabel(f"greedy success, {sft['episodes']} held-out episodes")
    final.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "recipe.png", dpi=80)
