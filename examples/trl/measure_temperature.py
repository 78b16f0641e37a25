"""The rollout temperature, chosen from a measurement: what groups sampled at T can teach greedy.

From a committed SFT start (``--start``), on the first ``--episodes`` episodes of the frozen
suite: greedy success once, then at each temperature ``k`` samples per episode, read as GRPO
groups would be: pass@1, pass@k, the share of groups with mixed rewards (informative), and the
share of episodes that greedy fails while a sample succeeds (the groups that can change greedy's
answer; ``recipe_common.sampling_headroom``). Writes one JSON file.

    python examples/trl/measure_temperature.py --start sft800 \\
        --out examples/trl/results/quick_checks/temperature.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare_credit import MAX_ACTION_TOKENS  # noqa: E402
from recipe_common import COMMITTED_STARTS, PairedEvaluator, load_start, seed_everything  # noqa: E402
from train_tiny_cpu import build_model  # noqa: E402

from agentflow_env.base.tokens import load_default_tokenizer, to_hf_tokenizer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", default="sft800", choices=sorted(COMMITTED_STARTS))
    parser.add_argument("--temperatures", nargs="+", type=float, default=[0.4, 0.5, 0.7])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--suite", default="tiny-bridge-v1")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    seed_everything(0, args.threads)
    tokenizer = to_hf_tokenizer(load_default_tokenizer())
    model = load_start(build_model(tokenizer, 64, 2, 4), args.start).eval()
    evaluate = PairedEvaluator(tokenizer, args.suite, args.episodes, MAX_ACTION_TOKENS)
    start = time.time()
    greedy = evaluate.greedy(model)
    rows = []
    for temperature in args.temperatures:
        row = evaluate.sampled(
            model, temperature, args.k, args.episodes, greedy_outcomes=greedy["outcomes"]
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {
        "command": " ".join(["python", "examples/trl/measure_temperature.py", *sys.argv[1:]]),
        "settings": vars(args),
        "greedy": {k: v for k, v in greedy.items() if k != "outcomes"},
        "temperatures": rows,
        "wall_s": time.time() - start,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
