"""Write OpenRLHF prompt JSONL for AgentFlow: one ``{"prompt", "label", "datasource"}`` per line.

``label`` is a ``TaskSpec`` JSON string (env id, env kwargs, which task) that
``agent_func.py`` turns back into the task; ``prompt`` is the question, for logs only (the env
renders the planner prompt itself). Train with ``--data.input_key prompt --data.label_key label``
and without ``--data.apply_chat_template``.

The options naming env settings are generated from the env configs
(``agentflow_env.envs.config``): the synthetic world's settings, the dataset's, and the env
settings written into every label (``--max-turns``, ``--tools``, ``--reward``, ...; the adapter
sets the tokenizer and the observation mode itself).

  python adapters/openrlhf/prepare_data.py synthetic --out data/train.jsonl --split train \\
      --hops 1,2 --count 2000 --fresh-world
  python adapters/openrlhf/prepare_data.py synthetic --out data/test.jsonl --split test --count 200
  python adapters/openrlhf/prepare_data.py dataset --file nq_train.jsonl --out data/nq.jsonl
  python adapters/openrlhf/prepare_data.py dataset --file combined_train.parquet \
      --out data/agentflow.jsonl --preset agentflow_train   # AgentFlow's training rows
  python adapters/openrlhf/prepare_data.py probe --probe tool_choice --out data/probe.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentflow_env.envs.config import (
    EnvConfig,
    SearchEnvConfig,
    add_config_arguments,
    settings_from_args,
)
from agentflow_env.envs.config.presets import with_preset
from agentflow_env.envs.registration import ENV_CONFIGS
from agentflow_env.rollout.probes import PROBE_ENV_IDS, probe_specs
from agentflow_env.rollout.spec import DEFAULT_ENV_ID, TaskSpec, dataset_specs, synthetic_specs
from agentflow_env.tasks.base import Task
from agentflow_env.workflow.agentflow_source import SOURCE_ENV_VAR, read_agentflow_source

ADAPTER_SETTINGS = ("tokenizer", "observation_mode")
"""Env settings the OpenRLHF adapter sets itself: a label must not."""
DATASET_FLAGS = {"dataset": "--file", "dataset_split": "--split", "dataset_limit": "--limit"}
"""The dataset subcommand's names for the dataset settings."""


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


def _label_settings(parser: argparse.ArgumentParser) -> None:
    names = add_config_arguments(
        parser,
        ENV_CONFIGS,
        only=EnvConfig.settings(),
        exclude=ADAPTER_SETTINGS,
        title="env settings (in each label)",
    )
    parser.set_defaults(label_settings=names)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Write OpenRLHF prompt JSONL for AgentFlow.")
    parser.add_argument("--env-id", default=DEFAULT_ENV_ID, help="env id written into each label")
    commands = parser.add_subparsers(dest="command", required=True)
    search = {SearchEnvConfig.env_id: SearchEnvConfig}

    synthetic = commands.add_parser("synthetic", help="questions over the embedded world")
    synthetic.add_argument("--out", required=True)
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
    dataset.add_argument("--out", required=True)
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
    probe.add_argument("--out", required=True)
    probe.add_argument("--count", type=int, default=2000)
    probe.add_argument("--seed", type=int, default=0, help="first task seed")
    probe.add_argument("--split", choices=("train", "test"), default="train")
    probe.add_argument("--datasource", default=None, help="default: probe-<name>")
    _label_settings(probe)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    label_kwargs = settings_from_args(args, args.label_settings)
    if args.command == "probe":
        rows = probe_specs(
            args.probe, args.count, split=args.split, seed=args.seed, env_kwargs=label_kwargs
        )
        datasource = args.datasource or f"probe-{args.probe}"
    elif args.command == "synthetic":
        rows = synthetic_specs(
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
        rows = dataset_specs(
            given["dataset"],
            corpus=os.path.abspath(corpus) if corpus else None,
            split=given.get("dataset_split"),
            limit=given.get("dataset_limit"),
            env_id=args.env_id,
            env_kwargs=env_kwargs,
            answer_tag_suffix=answer_tag_suffix(given, env_kwargs),
            question_suffix=checkout_suffix(env_kwargs)
            if answer_tag_suffix(given, env_kwargs)
            else None,
        )
        datasource = args.datasource or Path(given["dataset"]).name.split(".")[0]
    try:
        written = write_jsonl(rows, args.out, datasource)
    except ValueError as error:  # settings the env would reject (TaskSpecError too)
        parser.error(" ".join(str(error).split()))
    print(f"wrote {written} prompts to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
