"""``agentflow-env labels``: the task-label dataset every trainer trains on, in each trainer's rows.

- Every format's rows are the ``openrlhf`` rows converted (the old two-step path: labels, then
  ``prepare_verl_data.py`` / ``prepare_skyrl_data.py``), and every label names its task.
- ``convert`` and Parquet files; one-line usage errors; a missing output folder is made.
- The old prepare scripts are thin wrappers writing the same bytes.
- The launch scripts write their labels through ``adapters/common.sh``'s ``write_labels``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, load_adapter

from agentflow_env.cli import main
from agentflow_env.rollout import (
    LABEL_FORMATS,
    TaskSpec,
    read_task_spec,
    skyrl_row,
    verl_row,
)

SYNTHETIC = ["synthetic", "--count", "3", "--hops", "1,2", "--fresh-world", "--max-turns", "3"]


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write(tmp_path: Path, label_format: str, *argv: str) -> Path:
    out = tmp_path / label_format / "rows.jsonl"  # the folder does not exist yet
    assert main(["labels", *(argv or SYNTHETIC), "--format", label_format, "--out", str(out)]) == 0
    return out


def test_every_format_is_the_openrlhf_rows_converted(tmp_path: Path, capsys: Any) -> None:
    base = rows(write(tmp_path, "openrlhf"))
    assert [sorted(row) for row in base] == [["datasource", "label", "prompt"]] * 3
    specs = [TaskSpec.from_json(row["label"]) for row in base]
    assert [spec.seed for spec in specs] == [0, 1, 2]
    env = specs[0].make_env()
    assert specs[2].resolve(env.task_source).question == base[2]["prompt"]
    env.close()
    assert rows(write(tmp_path, "verl")) == [verl_row(row, i) for i, row in enumerate(base)]
    assert rows(write(tmp_path, "skyrl")) == [skyrl_row(row) for row in base]
    trl = rows(write(tmp_path, "trl"))
    assert trl == [{"prompt": row["label"]} for row in base]
    assert read_task_spec(trl[1]["prompt"]) == specs[1]  # what TRL's rollout_func reads
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"wrote 3 prompts to {tmp_path / 'openrlhf' / 'rows.jsonl'}"
    assert [line.split()[2:4] for line in printed[1:]] == [
        ["verl", "rows"],
        ["SkyRL", "rows"],
        ["TRL", "prompts"],
    ]
    assert set(LABEL_FORMATS) == {"openrlhf", "verl", "skyrl", "trl"}


def test_probe_and_dataset_sources(tmp_path: Path) -> None:
    probe = rows(write(tmp_path, "skyrl", "probe", "--probe", "tool_choice", "--count", "2"))
    assert [row["data_source"] for row in probe] == ["probe-tool_choice"] * 2
    assert json.loads(probe[0]["label"])["env_id"] == "AgentFlow-Probe-ToolChoice-v0"
    qa = tmp_path / "nq_train.jsonl"
    qa.write_text(json.dumps({"id": "q1", "question": "Who wrote Foo?", "golden_answers": ["B"]}))
    (row,) = rows(write(tmp_path, "verl", "dataset", "--file", str(qa)))
    assert row["data_source"] == "nq_train" and row["agent_name"] == "agentflow"
    assert TaskSpec.from_json(row["label"]).record["question"] == "Who wrote Foo?"


def test_convert_and_parquet(tmp_path: Path) -> None:
    labels = write(tmp_path, "openrlhf")
    for label_format in LABEL_FORMATS:
        out = tmp_path / f"converted_{label_format}.jsonl"
        assert (
            main(["labels", "convert", str(labels), "--format", label_format, "--out", str(out)])
            == 0
        )
        assert rows(out) == rows(write(tmp_path, label_format))
    pq = pytest.importorskip("pyarrow.parquet")
    parquet = tmp_path / "verl.parquet"
    assert main(["labels", *SYNTHETIC, "--format", "verl", "--out", str(parquet)]) == 0
    assert pq.read_table(parquet).to_pylist() == rows(write(tmp_path, "verl"))


def test_usage_errors_are_one_line(tmp_path: Path, capsys: Any) -> None:
    out = str(tmp_path / "x.jsonl")
    assert main(["labels", "dataset", "--file", str(tmp_path / "none.jsonl"), "--out", out]) == 2
    assert main(["labels", "convert", str(tmp_path / "none.jsonl"), "--out", out]) == 2
    assert main(["labels", *SYNTHETIC, "--out", str(tmp_path)]) == 2  # a directory
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 3 and all(e.startswith("agentflow-env labels: error: ") for e in errors)
    assert "is a directory" in errors[2]
    with pytest.raises(SystemExit) as exit_:  # argparse's own check of a setting
        main(["labels", *SYNTHETIC, "--max-turns", "0", "--out", out])
    assert exit_.value.code == 2


def test_the_old_scripts_write_the_same_bytes(tmp_path: Path) -> None:
    prepare = load_adapter("adapters/openrlhf/prepare_data.py", "agentflow_prepare_wrapper")
    verl = load_adapter("adapters/verl/prepare_verl_data.py", "agentflow_prepare_verl_wrapper")
    skyrl = load_adapter("adapters/skyrl/prepare_skyrl_data.py", "agentflow_prepare_skyrl_wrapper")
    labels = tmp_path / "labels.jsonl"
    assert prepare.main([*SYNTHETIC, "--out", str(labels)]) == 0
    assert labels.read_bytes() == write(tmp_path, "openrlhf").read_bytes()
    for name, script in (("verl", verl), ("skyrl", skyrl)):
        out = tmp_path / f"{name}.jsonl"
        assert script.main([str(labels), str(out)]) == 0
        assert out.read_bytes() == write(tmp_path, name).read_bytes()
    assert verl.AGENT_NAME == "agentflow" and skyrl.ENV_CLASS == "agentflow"


# -- the launch scripts ----------------------------------------------------------------------------
@pytest.mark.parametrize("trainer", ["openrlhf", "verl", "skyrl"])
def test_launch_scripts_write_labels_through_common_sh(trainer: str) -> None:
    script = (ROOT / "adapters" / trainer / "train_flow_grpo.sh").read_text(encoding="utf-8")
    assert f"\nTRAINER={trainer}\n" in script and trainer in LABEL_FORMATS
    assert '/../common.sh"\n' in script and "\nwrite_labels\n" in script
    assert "prepare_" not in script  # no other adapter's (or its own) data script


def test_write_labels_calls_agentflow_env_labels(tmp_path: Path) -> None:
    """``write_labels`` with a stand-in ``agentflow-env`` that records its arguments: each missing
    file is written in the trainer's format, an existing one is kept."""
    (tmp_path / "test.jsonl").write_text("kept\n")
    shell = f"""
        set -euo pipefail
        TRAINER=verl DATA_DIR={tmp_path}
        source adapters/common.sh
        agentflow-env() {{ echo "$*" >> {tmp_path}/calls; }}
        write_labels
        echo "$REPO|$TRAIN_FILE|$GPUS_PER_NODE"
    """
    done = subprocess.run(["bash", "-c", shell], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{ROOT}|{tmp_path / 'train.jsonl'}|8"
    (call,) = (tmp_path / "calls").read_text().splitlines()
    assert call.startswith(f"labels synthetic --format verl --out {tmp_path / 'train.jsonl'} ")
    assert "--count 4000 --fresh-world" in call
