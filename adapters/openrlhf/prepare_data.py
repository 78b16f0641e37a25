"""Write OpenRLHF prompt JSONL for AgentFlow: one ``{"prompt", "label", "datasource"}`` per line.

``label`` is a ``TaskSpec`` JSON string (env id, env kwargs, which task) that
``agent_func.py`` turns back into the task; ``prompt`` is the question, for logs only (the env
renders the planner prompt itself). Train with ``--data.input_key prompt --data.label_key label``
and without ``--data.apply_chat_template``.

  python adapters/openrlhf/prepare_data.py synthetic --out data/train.jsonl --split train \\
      --hops 1,2 --count 2000 --fresh-world
  python adapters/openrlhf/prepare_data.py synthetic --out data/test.jsonl --split test --count 200
  python adapters/openrlhf/prepare_data.py dataset --file nq_train.jsonl --out data/nq.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from agentflow_env.rollout.spec import DEFAULT_ENV_ID, TaskSpec, dataset_specs, synthetic_specs
from agentflow_env.tasks.base import Task


def write_jsonl(rows: Iterable[tuple[TaskSpec, Task]], out: str, datasource: str) -> int:
    """Write the OpenRLHF rows; returns how many."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(out, "w", encoding="utf-8") as file:
        for spec, task in rows:
            row = {"prompt": task.question, "label": spec.to_json(), "datasource": datasource}
            file.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def _int_list(text: str | None) -> list[int] | None:
    return None if not text else [int(x) for x in text.split(",") if x.strip()]


def _str_list(text: str | None) -> list[str] | None:
    return None if not text else [x.strip() for x in text.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Write OpenRLHF prompt JSONL for AgentFlow.")
    parser.add_argument("--env-id", default=DEFAULT_ENV_ID, help="env id written into each label")
    commands = parser.add_subparsers(dest="command", required=True)

    synthetic = commands.add_parser("synthetic", help="questions over the embedded world")
    synthetic.add_argument("--out", required=True)
    synthetic.add_argument("--count", type=int, default=1000)
    synthetic.add_argument("--split", choices=("train", "test"), default="train")
    synthetic.add_argument("--hops", default=None, help="comma-separated, e.g. 1,2")
    synthetic.add_argument("--kinds", default=None, help="comma-separated question kinds")
    synthetic.add_argument("--world-seed", type=int, default=0)
    synthetic.add_argument("--world-size", choices=("default", "small"), default=None)
    synthetic.add_argument(
        "--fresh-world", action="store_true", help="a new small world per task (seed-named)"
    )
    synthetic.add_argument("--seed", type=int, default=0, help="task order / first task seed")
    synthetic.add_argument("--datasource", default="agentflow-synthetic")

    dataset = commands.add_parser("dataset", help="a QA file (FlashRAG JSONL, AgentFlow JSON)")
    dataset.add_argument("--file", required=True)
    dataset.add_argument("--out", required=True)
    dataset.add_argument("--corpus", default=None, help="corpus JSONL for local search")
    dataset.add_argument("--split", default=None)
    dataset.add_argument("--limit", type=int, default=None)
    dataset.add_argument("--env-kwargs", default="{}", help="JSON env kwargs for these tasks")
    dataset.add_argument("--datasource", default=None, help="default: the file's name")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "synthetic":
        rows = synthetic_specs(
            args.count,
            split=args.split,
            hops=_int_list(args.hops),
            kinds=_str_list(args.kinds),
            world_seed=args.world_seed,
            world_size=args.world_size,
            fresh_world=args.fresh_world,
            seed=args.seed,
            env_id=args.env_id,
        )
        datasource = args.datasource
    else:
        rows = dataset_specs(
            args.file,
            corpus=os.path.abspath(args.corpus) if args.corpus else None,
            split=args.split,
            limit=args.limit,
            env_id=args.env_id,
            env_kwargs=json.loads(args.env_kwargs),
        )
        datasource = args.datasource or Path(args.file).name.split(".")[0]
    written = write_jsonl(rows, args.out, datasource)
    print(f"wrote {written} prompts to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
