"""``agentflow-env labels``: the task-label dataset a trainer trains on, in its row format."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agentflow_env.cli.common import UsageError
from agentflow_env.rollout.labels.label_files import add_label_commands, write_labels
from agentflow_env.rollout.labels.row_formats import row_format


def add_labels_command(commands: Any) -> None:
    labels = commands.add_parser(
        "labels",
        help="write the task labels a trainer trains on (OpenRLHF, verl, SkyRL, TRL rows)",
        description=(
            "Write one row per task, each with its label: a TaskSpec JSON string naming the env, "
            "its settings and the task, which every adapter turns back into the episode. SOURCE "
            "chooses the tasks: the synthetic world, a QA dataset, a probe, or (convert) an "
            "existing generic label file. --format shapes the rows: generic (prompt, label, "
            "datasource; the default), or a trainer's format, which its adapter registers "
            "(adapters/<trainer>/<trainer>_row_format.py, loaded from --adapters DIR, by default this "
            "checkout's adapters/ folder: openrlhf, verl, skyrl, trl); an --out name ending in "
            ".parquet writes Parquet (needs pyarrow), any other JSONL."
        ),
    )
    add_label_commands(labels)
    labels.set_defaults(handler=_labels_command)


def _labels_command(args: argparse.Namespace) -> int:
    if Path(args.out).is_dir():  # a missing folder is made, as the launch scripts expect
        raise UsageError(f"--out {args.out} is a directory: give a file path")
    try:
        count = write_labels(args)
    except ValueError as error:  # settings the env would reject, a file that cannot be read
        raise UsageError(str(error)) from error
    print(f"wrote {count} {row_format(args.label_format).rows} to {args.out}")
    return 0
