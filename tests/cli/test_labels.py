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
    TaskSpec,
    load_row_formats,
    read_task_spec,
    register_row_format,
    row_formats,
)
from agentflow_env.rollout.labels import row_formats as registry

SYNTHETIC = ["synthetic", "--count", "3", "--hops", "1,2", "--fresh-world", "--max-turns", "3"]


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write(tmp_path: Path, label_format: str, *argv: str) -> Path:
    out = tmp_path / label_format / "rows.jsonl"  # the folder does not exist yet
    assert main(["labels", *(argv or SYNTHETIC), "--format", label_format, "--out", str(out)]) == 0
    return out


LABEL_FORMATS = ("generic", "openrlhf", "verl", "skyrl", "trl")
verl_row = load_adapter(
    "adapters/verl/verl_row_format.py", "agentflow_test_verl_row_format"
).verl_row
skyrl_row = load_adapter(
    "adapters/skyrl/skyrl_row_format.py", "agentflow_test_skyrl_row_format"
).skyrl_row


def test_every_format_is_the_generic_rows_converted(tmp_path: Path, capsys: Any) -> None:
    assert rows(write(tmp_path, "openrlhf")) == rows(write(tmp_path, "generic"))
    capsys.readouterr()
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
    assert set(row_formats()) == set(LABEL_FORMATS)  # the core's own, and the adapters'


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
    unwritten = str(tmp_path / "unwritten.jsonl")
    assert main(["labels", *SYNTHETIC, "--format", "nope", "--out", unwritten]) == 2
    assert main(["labels", *SYNTHETIC, "--adapters", str(tmp_path / "no"), "--out", unwritten]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 5 and all(e.startswith("agentflow-env labels: error: ") for e in errors)
    assert "is a directory" in errors[2]
    assert "unknown row format 'nope' (offered: generic, openrlhf, skyrl, trl, verl)" in errors[3]
    assert "not a folder" in errors[4] and not Path(unwritten).exists()
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


def test_a_format_registered_outside_the_package_is_offered(
    tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trainer's adapter registers its format in ``<adapters>/<trainer>/<trainer>_row_format.py``:
    ``--adapters DIR`` loads it, and ``labels`` offers it and writes its rows."""
    monkeypatch.setattr(registry, "_FORMATS", dict(registry._FORMATS))  # no lasting registration
    adapters = tmp_path / "adapters"
    (adapters / "mytrainer").mkdir(parents=True)
    (adapters / "mytrainer" / "mytrainer_row_format.py").write_text(
        "from agentflow_env.rollout import register_row_format\n"
        "register_row_format('mine', lambda row, i: {'n': i, 'task': row['label']}, rows='mine')\n"
    )
    base = rows(write(tmp_path, "generic"))
    assert "mine" not in row_formats()
    out = tmp_path / "mine.jsonl"
    argv = ["labels", *SYNTHETIC, "--adapters", str(adapters), "--format", "mine"]
    assert main([*argv, "--out", str(out)]) == 0
    assert rows(out) == [{"n": i, "task": row["label"]} for i, row in enumerate(base)]
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote 3 mine to {out}"
    assert "mine" in row_formats()
    convert = ["labels", "convert", str(tmp_path / "generic" / "rows.jsonl"), "--format", "x"]
    assert main([*convert, "--out", str(out)]) == 2
    assert "offered: generic, mine, " in capsys.readouterr().err
    register_row_format("inline", lambda row, i: {"label": row["label"]})  # in-process too
    assert main([*argv[:-1], "inline", "--out", str(out)]) == 0
    assert rows(out) == [{"label": row["label"]} for row in base]


# -- the launch scripts ----------------------------------------------------------------------------
@pytest.mark.parametrize("trainer", ["openrlhf", "verl", "skyrl"])
def test_launch_scripts_write_labels_through_common_sh(trainer: str) -> None:
    script = (ROOT / "adapters" / trainer / "train_flow_grpo.sh").read_text(encoding="utf-8")
    assert f"\nTRAINER={trainer}\n" in script and trainer in load_row_formats()
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


# -- every variant's labels resolve at reset -------------------------------------------------------
def test_code_labels_in_every_format_reset_an_env(tmp_path: Path) -> None:
    """``labels --env-id AgentFlow-Code-v0 synthetic`` once wrote Search world task ids every
    episode failed on at reset; each written label now names a Code task the env resets to."""
    argv = [
        "--env-id",
        "AgentFlow-Code-v0",
        "synthetic",
        "--count",
        "3",
        "--kinds",
        "make24,compute",
    ]
    for label_format in load_row_formats():
        written = rows(write(tmp_path, label_format, *argv))
        assert len(written) == 3, label_format
        for row in written:
            label = row.get("label", row.get("prompt"))  # trl rows: the label is the prompt
            spec = read_task_spec(label)
            assert spec.env_id == "AgentFlow-Code-v0" and spec.seed is not None, label_format
            env = spec.make_env()
            task = spec.resolve(env.task_source)
            _, info = env.reset(options={"task": task})
            assert info["question"] == task.question and task.kind in ("make24", "compute")
            env.close()


@pytest.mark.parametrize(
    ("argv", "question"),
    [
        ((), "Who?"),  # this project's own: stripped
        (("--preset", "agentflow_eval"), "  Who?\n"),  # as the env reads it under the preset
        (("--agentflow-script", "eval"), "  Who?\n"),
    ],
)
def test_dataset_labels_carry_the_question_the_env_would_read(
    tmp_path: Path, argv: tuple[str, ...], question: str
) -> None:
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"id": "a", "question": "  Who?\n", "answers": ["Ada"]}) + "\n")
    (row,) = rows(write(tmp_path, "generic", "dataset", "--file", str(qa), *argv))
    spec = TaskSpec.from_json(row["label"])
    assert spec.record is not None and spec.record["question"] == question
    assert row["prompt"] == question
