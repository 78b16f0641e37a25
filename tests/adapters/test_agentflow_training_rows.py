"""AgentFlow's training rows (``question``, ``result``, ``extra_info.ground_truth``) load from
Parquet and JSONL: through ``load_tasks``, the ``agentflow_train`` preset and the adapters' data
preparation (OpenRLHF prompts, then verl and SkyRL rows).

Every row here is invented; only the shape follows AgentFlow's data preparation, which joins an
NQ question's aliases with ``"; "`` into ``result`` and keeps a math answer as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import load_adapter

from agentflow_env import SearchEnvConfig
from agentflow_env.rollout.labels.spec import TaskSpec, task_from_record
from agentflow_env.tasks.datasets import DatasetError, load_tasks
from agentflow_env.tasks.scoring import ANSWER_TAG_INSTRUCTION

ROWS: list[dict[str, Any]] = [
    {
        "id": 0,
        "question": "Who kept the Dunmore light?",
        "chain": "",
        "result": "Odo Varn; O. Varn; Varn",
        "source": "nq",
        "extra_info": {"ground_truth": "Odo Varn; O. Varn; Varn", "idx": 17},
    },
    {
        "id": 1,
        "question": "Solve for the pair: x + y = 3 and x - y = 1.",
        "chain": "",
        "result": "x = 2; y = 1",
        "source": "mathhard",
        "extra_info": {"ground_truth": "x = 2; y = 1", "idx": 4},
    },
    {
        "id": 2,
        "question": "What is 6 times 7?",
        "chain": "",
        "result": "42",
        "source": "mathhard",
        "extra_info": {"ground_truth": "42", "idx": 5},
    },
]
GOLD = [("Odo Varn", "O. Varn", "Varn"), ("x = 2; y = 1",), ("42",)]


def write_rows(folder: Path, fmt: str, rows: list[dict[str, Any]] = ROWS) -> Path:
    if fmt == "jsonl":
        path = folder / "combined_train.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return path
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    path = folder / "combined_train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_corpus(folder: Path) -> Path:
    path = folder / "wiki.jsonl"
    path.write_text(json.dumps({"id": "1", "contents": "Dunmore\nOdo Varn kept the light."}) + "\n")
    return path


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_training_rows_load_with_their_aliases(tmp_path: Path, fmt: str) -> None:
    tasks = load_tasks(write_rows(tmp_path, fmt))
    assert [task.question for task in tasks] == [row["question"] for row in ROWS]
    assert [task.gold_answers for task in tasks] == GOLD  # NQ split; math kept whole
    assert [task.task_id for task in tasks] == ["0", "1", "2"]
    assert {task.split for task in tasks} == {"train"}  # from the file's name
    assert json.loads(tasks[0].metadata["extra_info"])["idx"] == 17


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_ground_truth_alone_is_read_too(tmp_path: Path, fmt: str) -> None:
    rows = [{k: v for k, v in row.items() if k != "result"} for row in ROWS]
    assert [task.gold_answers for task in load_tasks(write_rows(tmp_path, fmt, rows))] == GOLD


def test_a_row_without_any_gold_is_refused_by_name(tmp_path: Path) -> None:
    rows = [{"question": "Who?", "source": "nq", "extra_info": {"idx": 0}}]
    with pytest.raises(DatasetError, match=r"record 0 \(0-based\): missing gold answers"):
        load_tasks(write_rows(tmp_path, "parquet", rows))


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_the_training_preset_runs_them_with_tagged_answers(tmp_path: Path, fmt: str) -> None:
    config = SearchEnvConfig.from_kwargs(
        preset="agentflow_train",
        dataset=str(write_rows(tmp_path, fmt)),
        corpus=str(write_corpus(tmp_path)),
    )
    tasks = config.make_task_source().tasks
    assert [task.gold_answers for task in tasks] == GOLD
    assert all(task.question.endswith(ANSWER_TAG_INSTRUCTION) for task in tasks)
    assert config.reward == "llm_judge"


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_the_adapters_prepare_them(tmp_path: Path, fmt: str) -> None:
    prepare = load_adapter("adapters/openrlhf/prepare_data.py", "agentflow_prepare_rows")
    verl = load_adapter("adapters/verl/prepare_verl_data.py", "agentflow_prepare_verl_rows")
    skyrl = load_adapter("adapters/skyrl/prepare_skyrl_data.py", "agentflow_prepare_skyrl_rows")
    prompts = tmp_path / "prompts.jsonl"
    argv = ["dataset", "--file", str(write_rows(tmp_path, fmt)), "--out", str(prompts)]
    assert prepare.main([*argv, "--preset", "agentflow_train"]) == 0
    rows = [json.loads(line) for line in prompts.read_text().splitlines()]
    assert [row["datasource"] for row in rows] == ["combined_train"] * 3
    specs = [TaskSpec.from_json(row["label"]) for row in rows]
    assert [spec.env_kwargs for spec in specs] == [{"preset": "agentflow_train"}] * 3
    tasks = [task_from_record(spec.record or {}) for spec in specs]  # inline records
    assert [task.gold_answers for task in tasks] == GOLD
    assert all(task.question.endswith(ANSWER_TAG_INSTRUCTION) for task in tasks)
    assert [row["prompt"] for row in rows] == [task.question for task in tasks]

    assert verl.main([str(prompts), str(tmp_path / "verl.jsonl")]) == 0
    assert skyrl.main([str(prompts), str(tmp_path / "skyrl.jsonl")]) == 0
    for name in ("verl", "skyrl"):
        out = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        assert [row["label"] for row in out] == [row["label"] for row in rows]
        assert out[0]["prompt"] == [{"role": "user", "content": rows[0]["prompt"]}]

    # Without the training preset, the questions are the rows' own (unless asked for tags).
    plain = tmp_path / "plain.jsonl"
    assert prepare.main(["dataset", "--file", argv[2], "--out", str(plain)]) == 0
    first = json.loads(plain.read_text().splitlines()[0])
    assert first["prompt"] == ROWS[0]["question"]
    tagged = tmp_path / "tagged.jsonl"
    assert (
        prepare.main(["dataset", "--file", argv[2], "--out", str(tagged), "--answer-tag-suffix"])
        == 0
    )
    assert json.loads(tagged.read_text().splitlines()[0])["prompt"].endswith(ANSWER_TAG_INSTRUCTION)
