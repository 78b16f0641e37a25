"""Where a planner's held-out failures come from: each failed episode's searches against the
task's gold evidence chain.

For every failed episode of a frozen suite (greedy), each gold step is classified by the first
action whose ``Context`` should have done it: ``exact`` (the gold context), ``garbled`` (a
near copy: a character similarity of at least 0.75), ``other`` (another name), or ``missing``
(no action reached that step). A failure is put down to its first step that is not ``exact``.

    python examples/trl/failure_kinds.py --weights runs/recipe/sft_model.pt \
        --out examples/trl/results/recipe/failure_kinds_sft.json
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer
from agentflow_env.evaluation.suites import get_suite

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "adapters" / "trl"))
sys.path.insert(0, str(HERE))
from rollout import HFGenerator, run_episodes  # noqa: E402
from train_tiny_cpu import build_model  # noqa: E402


def contexts(result: Any, tokenizer: Any) -> list[str]:
    """The ``Context:`` value of every planner action of a flat sample."""
    actions, current = [], []
    for token, planner in zip(result.completion_ids, result.env_mask, strict=True):
        if planner:
            current.append(token)
        elif current:
            actions.append(current)
            current = []
    if current:
        actions.append(current)
    out = []
    for ids in actions:
        text = tokenizer.decode(ids, skip_special_tokens=True)
        line = next((x for x in text.splitlines() if x.startswith("Context:")), "")
        out.append(line.removeprefix("Context:").strip())
    return out


def classify(said: str | None, gold: str) -> str:
    if said is None:
        return "missing"
    if said == gold:
        return "exact"
    if difflib.SequenceMatcher(None, said, gold).ratio() >= 0.75:
        return "garbled"
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--suite", default="tiny-bridge-v1")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    args = parser.parse_args()

    torch.set_num_threads(1)
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    model = build_model(tokenizer, args.hidden, args.layers, args.heads)
    model.load_state_dict(torch.load(args.weights))
    suite = get_suite(args.suite)
    tasks, specs = suite.tasks(), suite.seed_pairs()
    generate = HFGenerator(model, tokenizer.pad_token_id, [tokenizer.eos_token_id], greedy=True)
    results = run_episodes(specs, generate, tokenizer, max_action_tokens=32)
    by_hops: dict[int, Counter] = {}
    for task, result in zip(tasks, results, strict=True):
        counts = by_hops.setdefault(task.hops, Counter())
        counts["episodes"] += 1
        if result.success:
            counts["success"] += 1
            continue
        said = contexts(result, tokenizer)
        for index, step in enumerate(task.gold_plan):
            kind = classify(said[index] if index < len(said) else None, step.context)
            if kind != "exact":
                counts[f"step{index + 1}_{kind}"] += 1
                break
        else:
            counts["all_steps_exact"] += 1
    report = {
        "weights": args.weights,
        "suite": args.suite,
        "by_hops": {str(h): dict(sorted(c.items())) for h, c in sorted(by_hops.items())},
    }
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
