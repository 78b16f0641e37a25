"""The recipe's summary: per seed and over seeds, paired gains against the start, the null
control and RFT; the per-turn runs beside the flat ones; and ``recipe.png``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from recipe_common import CHECKPOINTS, mean_std, paired_gain, write


def start_result(out: Path, args: argparse.Namespace) -> Path:
    """The scores of the start (``<start>.json``, ``sft.json`` or ``sft_step<N>.json``), for
    paired gains."""
    if args.start is not None:  # a committed start's scores sit beside its weights
        return CHECKPOINTS / f"{args.start}.json"
    return out / ("sft.json" if args.start_step is None else f"sft_step{args.start_step}.json")


def pass_at_k(sampled: dict[str, Any]) -> float:
    """The ``pass_at_<k>`` figure of a ``sampled`` score, whatever its k."""
    return sampled[f"pass_at_{sampled['k']}"]


def gap_closed(start: dict[str, Any], run: dict[str, Any]) -> float | None:
    """The fraction of the start's gap between greedy success and pass@k that a run's greedy
    success closes, on the episodes pass@k was scored on (the suite's first ones)."""
    episodes = start["sampled"]["episodes"]
    start_greedy = sum(start["greedy"]["outcomes"][:episodes]) / episodes
    run_greedy = sum(run["greedy"]["outcomes"][:episodes]) / episodes
    gap = pass_at_k(start["sampled"]) - start_greedy
    return None if gap <= 0 else (run_greedy - start_greedy) / gap


def gain_by_hops(
    hops: Sequence[int], before: Sequence[int], after: Sequence[int]
) -> dict[str, dict[str, Any]]:
    """The paired gain on each hop count's episodes (``hops``: the suite's, episode by episode)."""
    if len(hops) != len(before):
        raise ValueError("one hop count per scored episode")
    gains = {}
    for count in sorted(set(hops)):
        chosen = [i for i, h in enumerate(hops) if h == count]
        gains[str(count)] = paired_gain([before[i] for i in chosen], [after[i] for i in chosen])
    return gains


def run_figures(
    start: dict[str, Any], run: dict[str, Any], hops: Sequence[int] | None = None
) -> dict[str, Any]:
    """One scored run beside its start: greedy success, paired gain (per hop count too, given the
    suite's ``hops``), pass@k (at the start's temperature), invalid actions per episode, the gap
    closed and the wall time."""
    if run["sampled"]["temperature"] != start["sampled"]["temperature"]:
        raise ValueError("pass@k must be scored at the start's temperature to compare")
    by_hops = (
        {}
        if hops is None
        else {
            "gain_over_start_by_hops": gain_by_hops(
                hops, start["greedy"]["outcomes"], run["greedy"]["outcomes"]
            )
        }
    )
    return {
        **by_hops,
        "greedy": run["greedy"]["success"],
        "ci95": run["greedy"]["ci95"],
        "gain_over_start": paired_gain(start["greedy"]["outcomes"], run["greedy"]["outcomes"]),
        "pass_at_k": pass_at_k(run["sampled"]),
        "sampled_pass_at_1": run["sampled"]["pass_at_1"],
        "invalid_actions": run["greedy"]["invalid_actions"],
        "gap_closed": gap_closed(start, run),
        "train_s": run["train_s"],
    }


def start_figures(name: str, start: dict[str, Any]) -> dict[str, Any]:
    """A start's scores as the summary reports them."""
    return {
        "name": name,
        "greedy": start["greedy"]["success"],
        "ci95": start["greedy"]["ci95"],
        "episodes": start["greedy"]["episodes"],
        "invalid_actions": start["greedy"]["invalid_actions"],
        "sampled": start["sampled"],
        "train_s": start.get("train_s"),
    }


def turns_summary(
    out: Path, flat_start: dict[str, Any], hops: Sequence[int] | None = None
) -> dict[str, Any] | None:
    """The per-turn runs (``grpo_turns_seed<N>.json``) against the same start scored on the
    structured prompts they play (``start_turns.json``), and against the flat run of their seed
    on the same episodes; ``None`` without per-turn runs."""
    runs = sorted(out.glob("grpo_turns_seed*.json"))
    if not runs:
        return None
    start_path = out / "start_turns.json"
    if not start_path.exists():
        raise SystemExit("per-turn runs need their start's score: --phases start --samples turns")
    start = json.loads(start_path.read_text())
    seeds: dict[str, Any] = {}
    for path in runs:
        run = json.loads(path.read_text())
        row = {**run_figures(start, run, hops), "steps": run.get("steps")}
        flat_path = out / path.name.replace("grpo_turns_", "grpo_")
        if flat_path.exists():
            flat = json.loads(flat_path.read_text())
            row["gain_over_flat"] = paired_gain(
                flat["greedy"]["outcomes"], run["greedy"]["outcomes"]
            )
            row["flat_train_s"] = flat["train_s"]
        seeds[str(run["seed"])] = row
    return {
        "start": {
            **start_figures(start_path.name, start),
            "gain_over_flat_start": paired_gain(  # the suite's first episodes, both scored
                flat_start["greedy"]["outcomes"][: len(start["greedy"]["outcomes"])],
                start["greedy"]["outcomes"],
            ),
        },
        "seeds": seeds,
    }


def target_checks(start: dict[str, Any], seeds: dict[str, Any]) -> dict[str, bool]:
    """The main-task target, check by check, over the seeds' ``run_figures`` (``grpo`` and, when
    scored, ``null``)."""
    grpo = [row["grpo"] for row in seeds.values()]
    gains = [r["gain_over_start"]["points"] for r in grpo]
    closed = [r["gap_closed"] for r in grpo]
    return {
        "every_seed_beats_its_null": bool(seeds)
        and all("gain_over_null" in r and r["gain_over_null"]["ci95_points"][0] > 0 for r in grpo),
        "mean_gain_at_least_6_points": bool(gains) and sum(gains) / len(gains) >= 6,
        "every_seed_gain_ci_above_0": all(r["gain_over_start"]["ci95_points"][0] > 0 for r in grpo),
        "half_the_pass_at_k_gap_closed": bool(closed)
        and None not in closed
        and sum(closed) / len(closed) >= 0.5,
        "pass_at_k_not_fallen": all(r["pass_at_k"] >= pass_at_k(start["sampled"]) for r in grpo),
        "invalid_actions_not_risen": all(
            r["invalid_actions"] <= start["greedy"]["invalid_actions"] for r in grpo
        ),
    }


def summarize(
    out: Path, args: argparse.Namespace, hops: Sequence[int] | None = None
) -> dict[str, Any]:
    """Per seed and over seeds: greedy held-out success and paired gains (points, 95% CI), split
    by hop count when the suite's ``hops`` are given."""
    sft = json.loads(start_result(out, args).read_text())
    seeds: dict[str, Any] = {}
    for path in sorted(out.glob("grpo_seed*.json")):
        grpo = json.loads(path.read_text())
        null_path = out / path.name.replace("grpo_", "null_")
        row: dict[str, Any] = {"grpo": run_figures(sft, grpo, hops)}
        if null_path.exists():
            null = json.loads(null_path.read_text())
            row["null"] = run_figures(sft, null, hops)
            row["grpo"]["gain_over_null"] = paired_gain(
                null["greedy"]["outcomes"], grpo["greedy"]["outcomes"]
            )
        rft_path = out / path.name.replace("grpo_", "rft_")
        if rft_path.exists():
            rft = json.loads(rft_path.read_text())
            row["rft"] = run_figures(sft, rft, hops)
            row["grpo"]["gain_over_rft"] = paired_gain(
                rft["greedy"]["outcomes"], grpo["greedy"]["outcomes"]
            )
        seeds[str(grpo["seed"])] = row

    def over_seeds(arm: str, figure: str, field: str | None = "points") -> dict[str, float] | None:
        """Mean and spread over the seeds that have ``figure`` in ``arm`` (a gain's ``points``)."""
        values = [row[arm][figure] for row in seeds.values() if figure in row.get(arm, {})]
        values = [v if field is None else v[field] for v in values if v is not None]
        return mean_std(values) if values else None

    summary: dict[str, Any] = {
        "start": start_figures(start_result(out, args).name, sft),
        "seeds": seeds,
        "over_seeds": {
            "gain_over_start_points": over_seeds("grpo", "gain_over_start"),
            "gain_over_null_points": over_seeds("grpo", "gain_over_null"),
            "gain_over_rft_points": over_seeds("grpo", "gain_over_rft"),
            "null_gain_over_start_points": over_seeds("null", "gain_over_start"),
            "rft_gain_over_start_points": over_seeds("rft", "gain_over_start"),
            "gap_closed": over_seeds("grpo", "gap_closed", field=None),
            "grpo_train_s": over_seeds("grpo", "train_s", field=None),
        },
        "targets": target_checks(sft, seeds),
    }
    more = out / "more_sft.json"
    if more.exists():
        data = json.loads(more.read_text())
        summary["more_sft"] = {**run_figures(sft, data, hops), "steps": data["steps"]}
    turns = turns_summary(out, sft, hops)
    if turns is not None:
        summary["turns"] = turns
    write(out / "summary.json", summary)
    plot(out, summary)
    print(json.dumps(summary, indent=1))
    return summary


def plot(out: Path, summary: dict[str, Any]) -> None:
    """Left: each run's held-out probe along training (greedy pass@1, solid: Flow-GRPO, dashed:
    null control, dash-dot: one row per planner turn). Right: final greedy success on the whole
    suite per seed, with 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (probe, final) = plt.subplots(1, 2, figsize=(12, 4))
    for index, seed in enumerate(summary["seeds"]):
        color = f"C{index}"
        for phase, style in (("grpo", "o-"), ("null", "s--"), ("grpo_turns", "D-.")):
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
    sft = summary["start"]
    final.axhspan(*sft["ci95"], color="grey", alpha=0.3, label="SFT start (95% CI)")
    for index, (seed, row) in enumerate(summary["seeds"].items()):
        for offset, key in ((-0.15, "grpo"), (0.0, "null"), (0.15, "rft")):
            if key not in row:
                continue
            value = row[key]["greedy"]
            low, high = row[key]["ci95"]
            final.errorbar(
                [index + offset],
                [value],
                yerr=[[value - low], [high - value]],
                fmt={"grpo": "o", "null": "s", "rft": "^"}[key],
                color=f"C{index}",
                label=f"{key} seed {seed}",
            )
    positions = {seed: index for index, seed in enumerate(summary["seeds"])}
    for index, (seed, row) in enumerate(summary.get("turns", {}).get("seeds", {}).items()):
        value, (low, high) = row["greedy"], row["ci95"]
        final.errorbar(
            [positions[seed] + 0.3 if seed in positions else index],  # beside its flat seed
            [value],
            yerr=[[value - low], [high - value]],
            fmt="D",
            color="black",
            label=f"per-turn seed {seed}",
        )
    if "turns" in summary:
        final.axhline(
            summary["turns"]["start"]["greedy"],
            color="grey",
            linestyle="--",
            label="SFT start, structured prompts",
        )
    if "more_sft" in summary:
        final.axhline(summary["more_sft"]["greedy"], color="black", linestyle=":", label="more SFT")
    final.set_xticks(range(len(summary["seeds"])), [f"seed {s}" for s in summary["seeds"]])
    final.set_ylabel(f"greedy success, {sft['episodes']} held-out episodes")
    final.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(out / "recipe.png", dpi=80)
