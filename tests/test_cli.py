"""The ``agentflow-env run`` command, and the planners' success rates it reports."""

from __future__ import annotations

import json
import re

import pytest

from agentflow_env.cli import main

SUMMARY = re.compile(
    r"success rate ([\d.]+)%, mean turns ([\d.]+), tool calls (\d+), invalid calls (\d+)"
)


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[float, str]:
    assert main(["run", *args]) == 0
    out = capsys.readouterr().out
    match = SUMMARY.search(out)
    assert match, out
    return float(match.group(1)) / 100, out


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_expert_solves_every_episode(capsys, hops):
    rate, _ = run_cli(
        capsys, "--planner", "expert", "--episodes", "300", "--hops", str(hops), "--quiet"
    )
    assert rate == 1.0


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_random_planner_rarely_succeeds(capsys, hops):
    rate, out = run_cli(
        capsys, "--planner", "random", "--episodes", "300", "--hops", str(hops), "--quiet"
    )
    assert rate < 0.10
    calls = int(SUMMARY.search(out).group(3))
    assert calls > 0


def test_verbose_run_prints_turns_and_writes_jsonl(capsys, tmp_path):
    out_file = tmp_path / "trajectories.jsonl"
    rate, out = run_cli(
        capsys, "--planner", "expert", "--episodes", "2", "--hops", "2", "--out", str(out_file)
    )
    assert rate == 1.0
    assert "Turn 1 | Search" in out and "SUCCESS" in out
    lines = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert len(lines) == 2
    assert all(line["success"] and line["memory"] and line["actions"] for line in lines)
    assert lines[0]["seed"] == 0 and lines[1]["seed"] == 1
