"""Turn AgentFlow label JSONL into SkyRL rows that name the AgentFlow env.

``agentflow-env labels ... --format skyrl`` writes SkyRL rows directly; this script converts a
label file written before (``agentflow-env labels`` in its default format, one ``{"prompt",
"label", "datasource"}`` per line, ``label`` a ``TaskSpec`` JSON string)::

  python adapters/skyrl/prepare_skyrl_data.py data/train.jsonl data/skyrl/train.jsonl
  agentflow-env labels convert data/train.jsonl --format skyrl --out data/skyrl/train.jsonl  # same

Each SkyRL row names the env (``env_class: agentflow``) and keeps the ``label`` and the data
source, which SkyRL hands the env and the generator as ``env_extras``; its chat prompt is the
question, which SkyRL only uses to filter over-long prompts: the env renders the planner's prompt.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from agentflow_env.rollout import convert_label_file, load_row_file

_ROWS = load_row_file(Path(__file__).with_name("skyrl_row_format.py"))  # registers --format skyrl
ENV_CLASS = _ROWS.ENV_CLASS
skyrl_row = _ROWS.skyrl_row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", help="AgentFlow label JSONL (agentflow-env labels)")
    parser.add_argument("out", help="SkyRL JSONL to write")
    args = parser.parse_args(argv)
    count = convert_label_file(args.source, args.out, "skyrl")
    print(f"wrote {count} SkyRL rows to {args.out}")
    return 0


__all__ = ["ENV_CLASS", "main", "skyrl_row"]


if __name__ == "__main__":
    raise SystemExit(main())
