"""Write OpenRLHF prompt JSONL for AgentFlow: ``agentflow-env labels``, kept under its old name.

One ``{"prompt", "label", "datasource"}`` per line: ``label`` is a ``TaskSpec`` JSON string (env
id, env kwargs, which task) that ``agent_func.py`` turns back into the task; ``prompt`` is the
question, for logs only (the env renders the planner prompt itself). Train with
``--data.input_key prompt --data.label_key label`` and without ``--data.apply_chat_template``.

The options, the rows and the errors are ``agentflow-env labels``' (``agentflow_env.rollout.
label_files``); the env options are generated from the env configs, and ``--format`` writes the
trainers' rows too (each registered by ``adapters/<trainer>/<trainer>_row_format.py``)::

  agentflow-env labels synthetic --out data/train.jsonl --split train --hops 1,2 --count 2000 \\
      --fresh-world
  python adapters/openrlhf/prepare_data.py synthetic --out data/train.jsonl --split train \\
      --hops 1,2 --count 2000 --fresh-world        # the same
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from agentflow_env.rollout import (
    ADAPTER_SETTINGS,
    add_label_commands,
    load_row_formats,
    write_label_rows,
    write_labels,
)

load_row_formats(Path(__file__).resolve().parents[1])  # the adapters' formats, for --format

write_jsonl = write_label_rows
"""``write_jsonl(rows, out, datasource)``: the OpenRLHF rows of ``(spec, task)`` pairs."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Write OpenRLHF prompt JSONL for AgentFlow.")
    add_label_commands(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        written = write_labels(args)
    except ValueError as error:  # settings the env would reject (TaskSpecError too)
        parser.error(" ".join(str(error).split()))
    print(f"wrote {written} prompts to {args.out}")
    return 0


__all__ = ["ADAPTER_SETTINGS", "build_parser", "main", "write_jsonl"]


if __name__ == "__main__":
    raise SystemExit(main())
