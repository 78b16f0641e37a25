"""Start verl training through Agent Lightning 1.0.2 on AgentFlow label files.

Agent Lightning hands each dataset row to a rollout as its ``input``; here a row is a task label
(``agentflow-env labels ... --format verl``: JSONL, or Parquet by name), and the controller
passes ``input.label`` to ``agentflow_agl_agent.AgentFlowAgent`` as ``AGENTFLOW_LABEL``. The
config is Agent Lightning's verl config (``agentlightning/verl/config.yaml``, verl's
``ppo_trainer`` beneath it) with this adapter's agent and the overrides given after the files,
in Hydra's ``key=value`` form. ``train_flow_grpo.sh`` starts Agent Lightning's server and
controller beside it and passes AgentFlow's settings.

    python train_flow_grpo.py --train TRAIN_FILE --val EVAL_FILE [--print-config] [key=value ...]

``--print-config`` reads the files and prints the config without training (no GPU needed).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

AGENT = [
    "agentlightning.local.agent_class=agentflow_agl_agent.AgentFlowAgent",
    "+agentlightning.local.env_map.AGENTFLOW_LABEL=input.label",
]
"""The overrides that make Agent Lightning run this adapter's agent on each row's label."""


def read_rows(path: str) -> list[dict[str, Any]]:
    """The rows of a label file, each reduced to its label (and its place, verl's ``index``)."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        records = pq.read_table(path).to_pylist()
    else:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
    missing = [i for i, row in enumerate(records) if not row.get("label")]
    if missing or not records:
        raise SystemExit(f"{path}: every row needs a label (rows without: {missing[:5]})")
    return [{"label": r["label"], "extra_info": {"index": i}} for i, r in enumerate(records)]


def build_config(overrides: Sequence[str]) -> Any:
    """Agent Lightning's verl config with this adapter's agent and ``overrides``."""
    from hydra import compose, initialize_config_dir

    folder = str(resources.files("agentlightning.verl"))
    with initialize_config_dir(config_dir=folder, version_base=None):
        return compose(config_name="config", overrides=[*AGENT, *overrides])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", required=True, help="label file to train on")
    parser.add_argument("--val", required=True, help="label file to validate on")
    parser.add_argument("--print-config", action="store_true", help="print the config, exit")
    args, overrides = parser.parse_known_args(argv)
    train, val = read_rows(args.train), read_rows(args.val)
    config = build_config(overrides)
    if args.print_config:
        from omegaconf import OmegaConf

        print(OmegaConf.to_yaml(config))
        return
    from agentlightning.verl.entrypoint import run_ppo

    run_ppo(config, train_dataset=train, val_dataset=val)


if __name__ == "__main__":
    main()
