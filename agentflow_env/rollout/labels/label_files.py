"""The task-label datasets trainers train on: one row per task, in each trainer's format.

Every adapter reads the task of an episode from a label: a ``TaskSpec`` JSON string
(``rollout.spec``) naming the env, its kwargs and the task. A label file holds one row per task in
a row format (``row_formats``): the core's ``generic`` rows ``{"prompt", "label", "datasource"}``,
or a trainer's, which its adapter registers (``adapters/<trainer>/<trainer>_row_format.py``) and
converts from the generic rows.

The question rides along only for logs and some trainers' prompt-length filters:
the env renders the planner's prompt itself. A file is JSONL, or Parquet when its name ends in
``.parquet`` (needs ``pyarrow``).

``add_label_commands`` adds the options that choose the tasks (``synthetic``, ``dataset``,
``probe``, generated from the env configs) and ``convert`` (a label file in another format) to
a parser; ``write_labels`` loads the adapters' row formats (``--adapters``) and writes what they
name. ``agentflow-env labels`` is that parser.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from agentflow_env.base.jsonl import jsonl_line, read_jsonl
from agentflow_env.base.settings import read_env_var
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
from agentflow_env.rollout.labels.row_formats import (
    GENERIC,
    Row,
    load_row_formats,
    row_format,
)
from agentflow_env.rollout.labels.spec import (
    DEFAULT_ENV_ID,
    TaskSpec,
    dataset_specs,
    variant_specs,
)
from agentflow_env.tasks.base import Task
from agentflow_env.workflow.agentflow_source import SOURCE_ENV_VAR, read_agentflow_source
from agentflow_env.workflow.prompts import style_rules

ADAPTER_SETTINGS = tuple(ADAPTER_KWARGS)
"""Env settings every adapter sets itself: a label must not (no option writes them)."""
DATASET_FLAGS = {"dataset": "--file", "dataset_split": "--split", "dataset_limit": "--limit"}
"""The ``dataset`` source's option names for the dataset settings."""


# -- rows --------------------------------------------------------------------------------------
def generic_label_row(spec: TaskSpec, task: Task, datasource: str) -> dict[str, Any]:
    """The ``generic`` row of one task: the question (for logs), the label and the data source."""
    return {"prompt": task.question, "label": spec.to_json(), "datasource": datasource}


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
    tasks: Iterable[tuple[TaskSpec, Task]], datasource: str, label_format: str = GENERIC
) -> Iterator[dict[str, Any]]:
    """The rows of ``label_format`` (a registered row format) for ``(spec, task)`` pairs."""
    convert = row_format(label_format).convert
    for index, (spec, task) in enumerate(tasks):
        yield convert(generic_label_row(spec, task, datasource), index)


def write_label_rows(
    tasks: Iterable[tuple[TaskSpec, Task]],
    out: str | os.PathLike[str],
    datasource: str,
    label_format: str = GENERIC,
) -> int:
    """Write the rows of ``label_format`` for ``(spec, task)`` pairs to ``out``; returns how
    many. Raises ``ValueError`` (``TaskSpecError`` too) for settings the env would reject."""
    return write_rows(label_rows(tasks, datasource, label_format), out)


def convert_label_file(
    source: str | os.PathLike[str], out: str | os.PathLike[str], label_format: str
) -> int:
    """Rewrite a ``generic`` label file (JSONL) in ``label_format``; returns the row count."""
    convert = row_format(label_format).convert
    records = (record for _, record in read_jsonl(Path(source)))
    return write_rows((convert(record, index) for index, record in enumerate(records)), out)


# -- what a dataset's questions say ------------------------------------------------------------
def checkout_suffix(env_kwargs: Mapping[str, Any]) -> str | None:
    """AgentFlow's own answer-tag sentence when the labels name an AgentFlow checkout
    (``agentflow_source``, else ``$AGENTFLOW_SOURCE``), as its training rollout appends it;
    ``None``: the project's own instruction."""
    path = env_kwargs.get("agentflow_source") or read_env_var(SOURCE_ENV_VAR)
    return read_agentflow_source(path).answer_suffix if path else None


def pack_commit(env_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``{"agentflow_commit": COMMIT}`` when labels with ``env_kwargs`` are rendered by a prompt
    pack read from an AgentFlow checkout or pack file (``agentflow_source``, else
    ``$AGENTFLOW_SOURCE``) at a known commit: every label then records it, and a worker whose
    wording comes from another commit refuses the label instead of rendering other words."""
    if "agentflow_commit" in env_kwargs:
        return {}
    try:
        style = with_preset(env_kwargs, {"prompt_style"}).get("prompt_style")
        if style is None or not style_rules(str(style)).renders_pack:
            return {}
    except (KeyError, ValueError):  # an unknown preset or style: the labels' check reports it
        return {}
    path = env_kwargs.get("agentflow_source") or read_env_var(SOURCE_ENV_VAR)
    commit = read_agentflow_source(path).commit if path else None
    return {} if commit is None else {"agentflow_commit": commit}


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


def agentflow_script(env_kwargs: Mapping[str, Any]) -> str | None:
    """The AgentFlow script the labels' settings reproduce (``agentflow_script``, given or
    filled by their preset): an inline record reaches the env as written, so a dataset's
    questions are written as the env would read them (verbatim under a preset)."""
    try:
        filled = with_preset(env_kwargs, {"agentflow_script"})
    except ValueError:  # an unknown preset: the labels' check reports it
        return None
    script = filled.get("agentflow_script")
    return None if script is None else str(script)


# -- options -----------------------------------------------------------------------------------
def add_label_commands(parser: argparse.ArgumentParser) -> None:
    """Add ``--env-id`` and the subcommands ``synthetic``, ``dataset``, ``probe`` (which tasks;
    their env options are generated from the env configs) and ``convert`` to ``parser``; each
    writes ``--out`` in ``--format``. ``write_labels`` runs the parsed arguments."""
    parser.add_argument("--env-id", default=DEFAULT_ENV_ID, help="env id written into each label")
    commands = parser.add_subparsers(dest="source", required=True, metavar="SOURCE")
    search = {SearchEnvConfig.env_id: SearchEnvConfig}

    synthetic = commands.add_parser(
        "synthetic",
        help="the tasks --env-id's own source draws (the embedded world of AgentFlow-Search-v0, "
        "the computations of AgentFlow-Code-v0, any registered variant's)",
    )
    _out_arguments(synthetic)
    synthetic.add_argument("--count", type=int, default=1000)
    synthetic.add_argument("--seed", type=int, default=0, help="task order / first task seed")
    synthetic.add_argument("--datasource", default="agentflow-synthetic")
    world = add_config_arguments(
        synthetic,
        ENV_CONFIGS,
        only=[name for cls in ENV_CONFIGS.values() for name in cls.section_settings("tasks")],
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
        "convert", help="a generic label file (JSONL) in another trainer's format"
    )
    convert.add_argument("labels", help="label JSONL with prompt, label, datasource per line")
    _out_arguments(convert)


def _out_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="file to write (.parquet: Parquet)")
    parser.add_argument(
        "--format",
        dest="label_format",
        default=GENERIC,
        help=f"the trainer's row format: {GENERIC} (prompt, label, datasource; the default) or "
        "one a trainer's adapter registers (its */*_row_format.py under --adapters)",
    )
    parser.add_argument(
        "--adapters",
        metavar="DIR",
        default=None,
        help="the adapters folder whose */*_row_format.py files register the trainers' row formats "
        "(default: the adapters/ folder of this checkout, else of the current directory)",
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
    the env would reject, a file that cannot be read or a format no adapter registers."""
    load_row_formats(getattr(args, "adapters", None))
    row_format(args.label_format)  # before any work
    if args.source == "convert":
        return convert_label_file(args.labels, args.out, args.label_format)
    label_kwargs = settings_from_args(args, args.label_settings)
    label_kwargs.update(
        pack_commit({**json.loads(getattr(args, "env_kwargs", "{}")), **label_kwargs})
    )
    tasks: Iterable[tuple[TaskSpec, Task]]
    if args.source == "probe":
        tasks = probe_specs(
            args.probe, args.count, split=args.split, seed=args.seed, env_kwargs=label_kwargs
        )
        datasource = args.datasource or f"probe-{args.probe}"
    elif args.source == "synthetic":
        tasks = variant_specs(
            args.count,
            seed=args.seed,
            env_id=args.env_id,
            env_kwargs={**label_kwargs, **settings_from_args(args, args.world_settings)},
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
            strip_questions=agentflow_script(env_kwargs) is None,
        )
        datasource = args.datasource or Path(given["dataset"]).name.split(".")[0]
    return write_label_rows(tasks, args.out, datasource, args.label_format)


__all__ = [
    "ADAPTER_SETTINGS",
    "DATASET_FLAGS",
    "add_label_commands",
    "agentflow_script",
    "answer_tag_suffix",
    "checkout_suffix",
    "convert_label_file",
    "generic_label_row",
    "label_rows",
    "pack_commit",
    "write_label_rows",
    "write_labels",
    "write_rows",
]
