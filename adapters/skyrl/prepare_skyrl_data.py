"""Turn AgentFlow prompt JSONL into SkyRL rows that name the AgentFlow env.

Write the prompts with ``adapters/openrlhf/prepare_data.py`` (one ``{"prompt", "label",
"datasource"}`` per line, ``label`` a ``TaskSpec`` JSON string), then::

  python adapters/skyrl/prepare_skyrl_data.py data/train.jsonl data/skyrl/train.jsonl

Each SkyRL row names the env (``env_class: agentflow``) and keeps the ``label`` and the data
source, which SkyRL hands the env and the generator as ``env_extras``; its chat prompt is the
question, which SkyRL only uses to filter over-long prompts: the env renders the planner's prompt.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentflow_env.base.jsonl import rewrite_jsonl

ENV_CLASS = "agentflow"


def skyrl_row(row: Mapping[str, Any]) -> dict:
    """One SkyRL dataset row from one AgentFlow prompt row."""
    return {
        "prompt": [{"role": "user", "content": row["prompt"]}],
        "env_class": ENV_CLASS,
        "label": row["label"],
        "data_source": row.get("datasource") or "agentflow",
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", help="AgentFlow prompt JSONL (adapters/openrlhf/prepare_data.py)")
    parser.add_argument("out", help="SkyRL JSONL to write")
    args = parser.parse_args(argv)
    count = rewrite_jsonl(Path(args.source), Path(args.out), lambda row, index: skyrl_row(row))
    print(f"wrote {count} SkyRL rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
