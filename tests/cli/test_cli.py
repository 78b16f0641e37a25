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


def test_served_planner_and_llm_modules_from_the_command_line(capsys, monkeypatch):
    from fake_openai_server import FakeOpenAIServer, generic_responder

    with FakeOpenAIServer(generic_responder(stop_after=2)) as server:
        monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("AGENTFLOW_LLM_MODEL", "fake")
        rate, out = run_cli(
            capsys,
            *("--planner", "openai", "--base-url", server.base_url, "--model", "fake"),
            *("--modules", "llm", "--episodes", "1", "--hops", "1", "--max-turns", "3"),
        )
        roles = set(server.roles())
    assert {"planner", "initializer", "executor", "verifier", "generalist"} <= roles
    assert "Turn 2 | Search | STOP" in out  # the served verifier stopped after two steps
    assert rate == 0.0  # the scripted generalist answers "unknown"


def test_local_hf_planner_from_the_command_line(capsys, tiny_llama_dir):
    rate, out = run_cli(
        capsys,
        "--planner",
        f"hf:{tiny_llama_dir}",
        "--episodes",
        "1",
        "--max-turns",
        "2",
        "--verbose",
    )
    assert rate == 0.0  # an untrained model
    assert "Turn 2 |" in out
