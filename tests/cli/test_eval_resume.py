"""``eval --resume`` and ``ablate --resume``: a run killed part-way finishes with only its missing
episodes, and ends with the files an uninterrupted run writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentflow_env.cli import main
from agentflow_env.workflow.turn_log import read_turn_log

EPISODES = 400
EVAL_ARGS = ("--planner", "random", "--episodes", str(EPISODES), "--hops", "2", "--quiet")


def rows_of(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "episodes.jsonl").open()]


def rows_of_tolerant(folder: Path) -> list[dict[str, Any]]:
    """The rows of a killed run's ``episodes.jsonl`` (its last line may be cut off)."""
    rows = []
    for line in (folder / "episodes.jsonl").read_bytes().splitlines(keepends=True):
        if line.endswith(b"\n"):
            rows.append(json.loads(line))
    return rows


def outcome(row: dict[str, Any]) -> tuple[Any, ...]:
    """What an episode did, without its id and the measured latencies."""
    diagnostics = {k: v for k, v in row["diagnostics"].items() if k not in ("modules", "tools")}
    return (row.get("run"), row["index"], row["seed"], row["task_id"], row["answer"], diagnostics)


def by_episode(rows: list[dict[str, Any]]) -> dict[tuple[Any, int], tuple[Any, ...]]:
    return {(row.get("run"), row["index"]): outcome(row) for row in rows}


def without_latencies(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in ("modules", "tools")}


def kill_mid_run(out: Path, *args: str, after: int) -> None:
    """Start ``agentflow-env eval`` and SIGKILL it once ``after`` episodes are on disk."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agentflow_env.cli", "eval", "--out", str(out), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and process.poll() is None:
            path = out / "episodes.jsonl"
            if path.exists() and path.read_bytes().count(b"\n") >= after:
                break
            time.sleep(0.005)
        assert process.poll() is None, "the run ended before it could be killed"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()


def test_a_killed_eval_resumes_to_what_an_uninterrupted_run_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    kill_mid_run(killed, *EVAL_ARGS, after=30)
    before = rows_of_tolerant(killed)
    assert 30 <= len(before) < EPISODES
    with (killed / "episodes.jsonl").open("ab") as file:  # a line the kill cut off mid-write
        file.write(b'{"run": null, "index": 7, "seed": 7, "task_id": "synth')
    with (killed / "turns.jsonl").open("ab") as file:
        file.write(b'{"event": "turn", "episode_id": "ab')

    assert main(["eval", "--out", str(killed), "--resume", *EVAL_ARGS]) == 0
    assert "resuming" in capsys.readouterr().err
    assert main(["eval", "--out", str(whole), *EVAL_ARGS]) == 0
    capsys.readouterr()

    resumed, reference = rows_of(killed), rows_of(whole)
    assert len(resumed) == EPISODES and by_episode(resumed) == by_episode(reference)
    kept = {row["episode_id"] for row in before}
    assert kept <= {row["episode_id"] for row in resumed}  # finished episodes did not run again
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["episodes"] == EPISODES
    assert without_latencies(summary) == without_latencies(
        json.loads((whole / "summary.json").read_text())
    )
    log = read_turn_log(killed / "turns.jsonl")  # the unfinished episodes' lines are gone
    assert log.bad_lines == 0 and not log.partial and len(log.complete) == EPISODES
    assert {e.episode_id for e in log.episodes} == {row["episode_id"] for row in resumed}


def test_resume_refuses_other_settings_and_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    common = ("--planner", "random", "--hops", "2", "--quiet")
    assert main(["eval", "--out", str(out), "--episodes", "4", *common]) == 0
    capsys.readouterr()
    files = {path.name: path.read_bytes() for path in out.iterdir()}

    changed = ("--planner", "random", "--hops", "3", "--quiet", "--episodes", "5")
    assert main(["eval", "--out", str(out), "--resume", *changed]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--resume" in error
    assert "--hops [2] (now [3])" in error and "--episodes 4 (now 5)" in error
    assert "--planner" not in error
    assert {path.name: path.read_bytes() for path in out.iterdir()} == files

    # A default spelled out is the same setting; so is another --concurrency.
    same = ("--episodes", "4", "--max-turns", "10", "--concurrency", "1", *common)
    assert main(["eval", "--out", str(out), "--resume", *same]) == 0
    assert len(rows_of(out)) == 4


def test_resume_into_a_missing_or_empty_folder_runs_normally(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    for name in ("missing", "empty"):
        out = tmp_path / name
        assert main(["eval", "--out", str(out), "--resume", "--episodes", "3", "--quiet"]) == 0
        assert json.loads((out / "summary.json").read_text())["episodes"] == 3
        assert json.loads((out / "settings.json").read_text())["episodes"] == 3
    assert "resuming" not in capsys.readouterr().err


def test_a_run_that_failed_before_its_first_episode_can_simply_run_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unreachable = ("--planner", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
    assert main(["eval", "--out", str(tmp_path), "--episodes", "2", *unreachable]) == 2
    assert "cannot reach" in capsys.readouterr().err
    assert main(["eval", "--out", str(tmp_path), "--episodes", "2", "--quiet"]) == 0
    assert json.loads((tmp_path / "settings.json").read_text())["planner"] == "expert"


def test_resume_refuses_a_folder_that_records_no_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "--out", str(tmp_path), "--episodes", "2", "--quiet"]) == 0
    (tmp_path / "settings.json").unlink()  # as an earlier version wrote the folder
    capsys.readouterr()
    assert main(["eval", "--out", str(tmp_path), "--episodes", "2", "--quiet", "--resume"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no settings.json" in error


def test_resume_refuses_damage_other_than_a_cut_off_last_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("--episodes", "3", "--quiet")
    assert main(["eval", "--out", str(tmp_path), *args]) == 0
    lines = (tmp_path / "episodes.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "episodes.jsonl").write_bytes(lines[0] + b"not json\n" + b"".join(lines[1:]))
    capsys.readouterr()
    assert main(["eval", "--out", str(tmp_path), "--resume", *args]) == 2
    assert "line 2 is not an episode row" in capsys.readouterr().err


ABLATE_ARGS = (
    *("--episodes", "12", "--hops", "2", "--planner", "random", "--quiet"),
    *("--variant", "base", "--variant", 'budget2={"max_turns": 2}'),
)


def test_ablate_resumes_each_variant_where_it_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert main(["ablate", "--out", str(whole), *ABLATE_ARGS]) == 0
    # What a kill during the second variant leaves: the first variant whole, five episodes of
    # the second, a cut-off row, and the turn lines of every episode started, finished or not.
    cut.mkdir()
    (cut / "settings.json").write_bytes((whole / "settings.json").read_bytes())
    rows = rows_of(whole)
    kept = [r for r in rows if r["run"] == "base" or (r["run"] == "budget2" and r["index"] < 5)]
    (cut / "episodes.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in kept) + '{"run": "budget2", "ind'
    )
    (cut / "turns.jsonl").write_bytes((whole / "turns.jsonl").read_bytes())
    capsys.readouterr()

    assert main(["ablate", "--out", str(cut), "--resume", *ABLATE_ARGS]) == 0
    assert "kept 17 finished episodes, dropped 1 cut-off line" in capsys.readouterr().err
    resumed = rows_of(cut)
    assert len(resumed) == 24 and by_episode(resumed) == by_episode(rows)
    assert {r["episode_id"] for r in kept} <= {r["episode_id"] for r in resumed}
    summaries = json.loads((cut / "results.json").read_text())["summaries"]
    reference = json.loads((whole / "results.json").read_text())["summaries"]
    assert list(summaries) == ["base", "budget2"]
    assert {k: without_latencies(v) for k, v in summaries.items()} == {
        k: without_latencies(v) for k, v in reference.items()
    }
    log = read_turn_log(cut / "turns.jsonl")
    assert not log.partial and len(log.complete) == 24
    assert {e.episode_id for e in log.episodes} == {r["episode_id"] for r in resumed}

    other = [
        a if a != 'budget2={"max_turns": 2}' else 'budget2={"max_turns": 3}' for a in ABLATE_ARGS
    ]
    assert main(["ablate", "--out", str(cut), "--resume", *other]) == 2
    error = capsys.readouterr().err
    assert '--variant budget2 {"max_turns": 2} (now {"max_turns": 3})' in error
