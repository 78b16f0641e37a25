"""Turn AgentFlow label JSONL into verl rows that select the AgentFlow agent loop.

``agentflow-env labels ... --format verl`` writes verl rows directly; this script converts a
label file written before (``agentflow-env labels`` in its default format, one ``{"prompt",
"label", "datasource"}`` per line, ``label`` a ``TaskSpec`` JSON string)::

  python adapters/verl/prepare_verl_data.py data/train.jsonl data/verl/train.jsonl
  agentflow-env labels convert data/train.jsonl --format verl --out data/verl/train.jsonl  # same

Each verl row keeps the ``label`` (the agent loop reads it), names the loop
(``agent_name: agentflow``) and carries the question as its chat prompt, which verl only uses to
filter over-long prompts and in logs: the env renders the planner's prompt itself. verl reads
JSONL (``data.train_files=...jsonl``) as it reads parquet (an ``out`` ending in ``.parquet``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from agentflow_env.rollout import convert_label_file, load_row_file

_ROWS = load_row_file(Path(__file__).with_name("verl_row_format.py"))  # registers --format verl
AGENT_NAME = _ROWS.AGENT_NAME
verl_row = _ROWS.verl_row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", help="AgentFlow label JSONL (agentflow-env labels)")
    parser.add_argument("out", help="verl JSONL to write")
    args = parser.parse_args(argv)
    count = convert_label_file(args.source, args.out, "verl")
    print(f"wrote {count} verl rows to {args.out}")
    return 0


__all__ = ["AGENT_NAME", "main", "verl_row"]


if __name__ == "__main__":
    raise SystemExit(main())
