"""The task-label datasets trainers train on: one row per task, in each trainer's format.

Every adapter reads the task of an episode from a label: a ``TaskSpec`` JSON string
(``rollout.spec``) naming the env, its kwargs and the task. A label file holds one row per task,
shaped for the trainer's data loader (``LABEL_FORMATS``):

- ``openrlhf``: ``{"prompt", "label", "datasource"}`` (``--data.input_key prompt
  --data.label_key label``, no chat template); the rows the other formats are made from;
- ``verl``: ``{"data_source", "prompt", "agent_name", "label", "reward_model", "extra_info"}``,
  ``agent_name`` selecting the AgentFlow agent loop;
- ``skyrl``: ``{"prompt", "env_class", "label", "data_source"}``, ``env_class`` naming the
  AgentFlow env (SkyRL hands ``label`` to the generator and the env as ``env_extras``);
- ``trl``: ``{"prompt"}``, the label itself (TRL hands the prompts to ``rollout_func``, which
  reads each as a label).

The question rides along only for logs and trainers' prompt-length filters (verl's, SkyRL's):
the env renders the planner's prompt itself. A file is JSONL, or Parquet when its name ends in
``.parquet`` (needs ``pyarrow``).

``add_label_commands`` adds the options that choose the tasks (``synthetic``, ``dataset``,
``probe``, generated from the env configs) and ``convert`` (a label file in another format) to
a parser; ``write_labels`` writes what they name. ``agentflow-env labels`` is that parser.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from agentflow_env.base.jsonl import jsonl_line, read_jsonl
from agentflow_env.envs.config import (
    EnvConfig,
    SearchEnvConfig,
    add_config_arguments,
    settings_from_args,
)
from agentflow_env.envs.config.presets import with_preset
from agentflow_env.envs.registration import ENV_CONFIGS
from agentflow_env.rollout.labels.plans import ADAPTER_KWARGS
from agentflow_env.rollout.labels.probe_labels import PROBE_ENV_IDS, probe_specs
from agentflow_env.rollout.labels.spec import (
    DEFAULT_ENV_ID,
    TaskSpec,
    dataset_specs,
    synthetic_specs,
)
from agentflow_env.tasks.base import Task
from agentflow_env.workflow.agentflow_source import SOURCE_ENV_VAR, read_agentflow_source

VERL_AGENT_NAME = "agentflow"
"""The ``agent_name`` of verl rows: the name the AgentFlow agent loop is registered under."""
SKYRL_ENV_CLASS = "agentflow"
"""The ``env_class`` of SkyRL rows: the name the AgentFlow env is registered under."""
ADAPTER_SETTINGS = tuple(ADAPTER_KWARGS)
"""Env settings every adapter sets itself: a label must not (no option writes them)."""
DATASET_FLAGS = {"dataset": "--file", "dataset_split": "--split", "dataset_limit": "--limit"}
"""The ``dataset`` source's option names for the dataset settings."""

Row = Mapping[str, Any]


# -- rows --------------------------------------------------------------------------------------
def openrlhf_row(spec: TaskSpec, task: Task, datasource: str) -> dict[str, Any]:
    """The label row of one task: the question (for logs), the label and the data source."""
    return {"prompt": task.question, "label": spec.to_json(), "datasource": datasource}


def verl_row(row: Row, index: int) -> dict[str, Any]:
    """One verl dataset row from one ``openrlhf`` row (``index``: its place in the file)."""
    return {
        "data_source": row.get("datasource") or "agentflow",
        "prompt": [{"role": "user", "content": row["prompt"]}],
        "agent_name": VERL_AGENT_NAME,
        "label": row["label"],
        "reward_model": {"style": "agentflow-env", "ground_truth": ""},  # the env scores
        "extra_info": {"index": index},
    }


def skyrl_row(row: Row) -> dict[str, Any]:
    """One SkyRL dataset row from one ``openrlhf`` row."""
    return {
        "prompt": [{"role": "user", "content": row["prompt"]}],
        "env_class": SKYRL_ENV_CLASS,
        "label": row["label"],
        "data_source": row.get("datasource") or "agentflow",
    }


def trl_row(row: Row) -> dict[str, Any]:
    """One TRL dataset row from one ``openrlhf`` row: the label is the prompt."""
    return {"prompt": row["label"]}


CONVERTERS: dict[str, Callable[[Row, int], dict[str, Any]]] = {
    "openrlhf": lambda row, index: dict(row),
    "verl": verl_row,
    "skyrl": lambda row, index: skyrl_row(row),
    "trl": lambda row, index: trl_row(row),
}
"""Per format, its row from an ``openrlhf`` row and the row's index."""
LABEL_FORMATS = tuple(CONVERTERS)
"""The trainers' row formats (``openrlhf`` first: the default)."""
ROW_NAMES = {
    "openrlhf": "prompts",
    "verl": "verl rows",
    "skyrl": "SkyRL rows",
    "trl": "TRL prompts",
}
"""What a format's rows are called in messages."""


# -- files -------------------------------------------------------------------------------------
def write_rows(rows: Iterable[Row], out: str | os.PathLike[str]) -> int:
    """Write ``rows`` to ``out`` (its folder created): JSONL, or Parquet for a ``.parquet``
    name. Returns how many."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        return _write_parquet(list(rows), path)
    count = 0
    with path.open("w", encoding="utf-8") as file:
        for row in rows:
            file.write(jsonl_line(row))
            count += 1
    return count


def _write_parquet(rows: list[Row], path: Path) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as error:  # pragma: no cover - depends on the installation
        raise ValueError(f"{path}: writing Parquet needs pyarrow (pip install pyarrow)") from error
    pq.write_table(pa.Table.from_pylist([dict(row) for row in rows]), path)
    return len(rows)


def label_rows(
    tasks: Iterable[tuple[TaskSpec, Task]], datasource: str, label_format: str = "openrlhf"
) -> Iterator[dict[str, Any]]:
    """The rows of ``label_format`` for ``(spec, task)`` pairs."""
    convert = CONVERTERS[label_format]
    for index, (spec, task) in enumerate(tasks):
        yield convert(openrlhf_row(spec, task, datasource), index)


def write_label_rows(
    tasks: Iterable[tuple[TaskSpec, Task]],
    out: str | os.PathLike[str],
    datasource: str,
    label_format: str = "openrlhf",
) -> int:
    """Write the rows of ``label_format`` for ``(spec, task)`` pairs to ``out``; returns how
    many. Raises ``ValueError`` (``TaskSpecError`` too) for settings the env would reject."""
    return write_rows(label_rows(tasks, datasource, label_format), out)


def convert_label_file(
    source: str | os.PathLike[str], out: str | os.PathLike[str], label_format: str
) -> int:
    """Rewrite an ``openrlhf`` label file (JSONL) in ``label_format``; returns the row count."""
    convert = CONVERTERS[label_format]
    records = (record for _, record in read_jsonl(Path(source)))
    return write_rows((convert(record, index) for index, record in enumerate(records)), out)


# -- what a dataset's questions say ------------------------------------------------------------
def checkout_suffix(env_kwargs: Mapping[str, Any]) -> str | None:
    """AgentFlow's own answer-tag sentence when the labels name an AgentFlow checkout
    (``agentflow_source``, else ``$AGENTFLOW_SOURCE``), as its training rollout appends it;
    ``None``: the project's own instruction."""
    path = env_kwargs.get("agentflow_source") or os.environ.get(SOURCE_ENV_VAR)
    return read_agentflow_source(path).answer_suffix if path else None


def answer_tag_suffix(given: Mapping[str, Any], env_kwargs: Mapping[str, Any]) -> bool:
    """``--answer-tag-suffix`` as given, else what the labels' preset asks of a dataset's
    questions (``agentflow_train`` asks for the answer in ``<answer>`` tags, as AgentFlow's
    rollout does): an inline record reaches the env without its dataset, so the question is
    written with the instruction here."""
    if given.get("answer_tag_suffix") is not None:
        return bool(given["answer_tag_suffix"])
    preset = env_kwargs.get("preset")
    if preset is None:
        return False
    try:
        filled = with_preset({"preset": preset, "dataset": "given"}, {"answer_tag_suffix"})
    except ValueError:  # an unknown preset: the labels' check reports it
        return False
    return bool(filled.get("answer_tag_suffix"))


# -- options -----------------------------------------------------------------------------------
def add_label_commands(parser: argparse.ArgumentParser) -> None:
    """Add ``--env-id`` and the subcommands ``synthetic``, ``dataset``, ``probe`` (which tasks;
    their env options are generated from the env configs) and ``convert`` to ``parser``; each
    writes ``--out`` in ``--format``. ``write_labels`` runs the parsed arguments."""
    parser.add_argument("--env-id", default=DEFAULT_ENV_ID, help="env id written into each label")
    commands = parser.add_subparsers(dest="source", required=True, metavar="SOURCE")
    search = {SearchEnvConfig.env_id: SearchEnvConfig}

    synthetic = commands.add_parser("synthetic", help="questions over the embedded world")
    _out_arguments(synthetic)
    synthetic.add_argument("--count", type=int, default=1000)
    synthetic.add_argument("--seed", type=int, default=0, help="task order / first task seed")
    synthetic.add_argument("--datasource", default="agentflow-synthetic")
    world = add_config_arguments(
        synthetic,
        search,
        only=SearchEnvConfig.section_settings("tasks"),
    )
    synthetic.set_defaults(world_settings=world)
    _label_settings(synthetic)

    dataset = commands.add_parser("dataset", help="a QA file (FlashRAG JSONL, AgentFlow JSON)")
    _out_arguments(dataset)
    dataset.add_argument("--env-kwargs", default="{}", help="JSON env kwargs for these tasks")
    dataset.add_argument("--datasource", default=None, help="default: the file's name")
    files = add_config_arguments(
        dataset,
        search,
        only=SearchEnvConfig.section_settings("dataset"),
        exclude=("index_cache_dir",),
        flags=DATASET_FLAGS,
        required=("dataset",),
    )
    dataset.set_defaults(dataset_settings=files)
    _label_settings(dataset)

    probe = commands.add_parser(
        "probe", help="a probe env's tasks (AgentFlow-Probe-*-v0): does training learn at all?"
    )
    probe.add_argument("--probe", required=True, choices=list(PROBE_ENV_IDS))
    _out_arguments(probe)
    probe.add_argument("--count", type=int, default=2000)
    probe.add_argument("--seed", type=int, default=0, help="first task seed")
    probe.add_argument("--split", choices=("train", "test"), default="train")
    probe.add_argument("--datasource", default=None, help="default: probe-<name>")
    _label_settings(probe)

    convert = commands.add_parser(
        "convert", help="an openrlhf label file (JSONL) in another trainer's format"
    )
    convert.add_argument("labels", help="label JSONL with prompt, label, datasource per line")
    _out_arguments(convert)


def _out_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="file to write (.parquet: Parquet)")
    parser.add_argument(
        "--format",
        dest="label_format",
        choices=LABEL_FORMATS,
        default=LABEL_FORMATS[0],
        help="the trainer's row format",
    )


def _label_settings(parser: argparse.ArgumentParser) -> None:
    names = add_config_arguments(
        parser,
        ENV_CONFIGS,
        only=EnvConfig.settings(),
        exclude=ADAPTER_SETTINGS,
        title="env settings (in each label)",
    )
    parser.set_defaults(label_settings=names)


def write_labels(args: argparse.Namespace) -> int:
    """Write the label file ``args`` (parsed by ``add_label_commands``' parser) name; returns
    the row count. Raises ``ValueError`` (``TaskSpecError``, ``DatasetError``) for settings
    the env would reject or a file that cannot be read."""
    if args.source == "convert":
        return convert_label_file(args.labels, args.out, args.label_format)
    label_kwargs = settings_from_args(args, args.label_settings)
    tasks: Iterable[tuple[TaskSpec, Task]]
    if args.source == "probe":
        tasks = probe_specs(
            args.probe, args.count, split=args.split, seed=args.seed, env_kwargs=label_kwargs
        )
        datasource = args.datasource or f"probe-{args.probe}"
    elif args.source == "synthetic":
        tasks = synthetic_specs(
            args.count,
            seed=args.seed,
            env_id=args.env_id,
            env_kwargs=label_kwargs,
            **settings_from_args(args, args.world_settings),
        )
        datasource = args.datasource
    else:
        given = settings_from_args(args, args.dataset_settings)
        corpus = given.get("corpus")
        env_kwargs = {**json.loads(args.env_kwargs), **label_kwargs}
        tagged = answer_tag_suffix(given, env_kwargs)
        tasks = dataset_specs(
            given["dataset"],
            corpus=os.path.abspath(corpus) if corpus else None,
            split=given.get("dataset_split"),
            limit=given.get("dataset_limit"),
            env_id=args.env_id,
            env_kwargs=env_kwargs,
            answer_tag_suffix=tagged,
            question_suffix=checkout_suffix(env_kwargs) if tagged else None,
        )
        datasource = args.datasource or Path(given["dataset"]).name.split(".")[0]
    return write_label_rows(tasks, args.out, datasource, args.label_format)


__all__ = [
    "ADAPTER_SETTINGS",
    "CONVERTERS",
    "DATASET_FLAGS",
    "LABEL_FORMATS",
    "ROW_NAMES",
    "SKYRL_ENV_CLASS",
    "VERL_AGENT_NAME",
    "add_label_commands",
    "answer_tag_suffix",
    "checkout_suffix",
    "convert_label_file",
    "label_rows",
    "openrlhf_row",
    "skyrl_row",
    "trl_row",
    "verl_row",
    "write_label_rows",
    "write_labels",
    "write_rows",
]
