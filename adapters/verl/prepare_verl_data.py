"""Turn AgentFlow prompt JSONL into verl rows that select the AgentFlow agent loop.

Write the prompts with ``adapters/openrlhf/prepare_data.py`` (one ``{"prompt", "label",
"datasource"}`` per line, ``label`` a ``TaskSpec`` JSON string), then::

  python adapters/verl/prepare_verl_data.py data/train.jsonl data/verl/train.jsonl

Each verl row keeps the ``label`` (the agent loop reads it), names the loop
(``agent_name: agentflow``) and carries the question as its chat prompt, which verl only uses to
filter over-long prompts and in logs: the env renders the planner's prompt itself. verl reads
JSONL (``data.train_files=...jsonl``) as it reads parquet.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentflow_env.base.jsonl import rewrite_jsonl

AGENT_NAME = "agentflow"


def verl_row(row: Mapping[str, Any], index: int) -> dict:
    """One verl dataset row from one AgentFlow prompt row."""
    return {
        "data_source": row.get("datasource") or "agentflow",
        "prompt": [{"role": "user", "content": row["prompt"]}],
        "agent_name": AGENT_NAME,
        "label": row["label"],
        "reward_model": {"style": "agentflow-env", "ground_truth": ""},  # the env scores
        "extra_info": {"index": index},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", help="AgentFlow prompt JSONL (adapters/openrlhf/prepare_data.py)")
    parser.add_argument("out", help="verl JSONL to write")
    args = parser.parse_args(argv)
    count = rewrite_jsonl(Path(args.source), Path(args.out), verl_row)
    print(f"wrote {count} verl rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
