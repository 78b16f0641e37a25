"""``eval`` settings that make a number comparable: one episode per dataset record (``--episodes``
and ``--repeat``, also under ``--resume``), the planner's reply cap following the env's
``max_action_tokens`` (``--max-tokens``), ``--sampling agentflow``, and the presets' limits.
The served planner is a real HTTP server on 127.0.0.1; its modules ask a second one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import FakeOpenAIServer, generic_responder

from agentflow_env import SearchEnvConfig
from agentflow_env.cli import main
from agentflow_env.cli.common import UsageError
from agentflow_env.cli.evaluate import DEFAULT_EPISODES, episode_count

RECORDS = ["q0", "q1", "q2"]


@pytest.fixture
def dataset(tmp_path: Path) -> tuple[str, ...]:
    """``--dataset`` and ``--corpus`` options for a three-record file."""
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        "".join(
            json.dumps({"id": rid, "question": f"Who kept light {i}?", "golden_answers": ["Odo"]})
            + "\n"
            for i, rid in enumerate(RECORDS)
        )
    )
    corpus = tmp_path / "wiki.jsonl"
    corpus.write_text(json.dumps({"id": "1", "contents": "Lights\nOdo kept them."}) + "\n")
    return ("--dataset", str(qa), "--corpus", str(corpus))


def run_eval(out: Path, *args: str) -> int:
    return main(["eval", "--out", str(out), "--quiet", "--planner", "random", *args])


def task_ids(out: Path) -> list[str]:
    rows = [json.loads(line) for line in (out / "episodes.jsonl").open()]
    return [row["task_id"] for row in sorted(rows, key=lambda row: row["index"])]


def settings_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "settings.json").read_text())


# -- episodes over a dataset -----------------------------------------------------------------------


def test_a_dataset_runs_each_record_once_by_default(
    tmp_path: Path, dataset: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_eval(tmp_path / "all", *dataset, "--max-turns", "1") == 0
    assert task_ids(tmp_path / "all") == RECORDS
    assert json.loads((tmp_path / "all" / "summary.json").read_text())["episodes"] == 3
    assert settings_of(tmp_path / "all")["episodes"] is None  # every record

    assert run_eval(tmp_path / "first", *dataset, "--max-turns", "1", "--episodes", "2") == 0
    assert task_ids(tmp_path / "first") == ["q0", "q1"]

    assert run_eval(tmp_path / "twice", *dataset, "--max-turns", "1", "--repeat", "2") == 0
    assert task_ids(tmp_path / "twice") == RECORDS * 2
    capsys.readouterr()


def test_more_episodes_than_records_needs_repeat(
    tmp_path: Path, dataset: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_eval(tmp_path / "over", *dataset, "--episodes", "4") == 2
    error = capsys.readouterr().err
    assert "holds 3 records" in error and "--repeat" in error and error.count("\n") == 1
    assert (tmp_path / "over" / "episodes.jsonl").read_text() == ""  # refused before any ran

    # The same folder takes the run that says so.
    over = ("--max-turns", "1", "--episodes", "4", "--repeat", "2")
    assert run_eval(tmp_path / "over", *dataset, *over) == 0
    assert task_ids(tmp_path / "over") == [*RECORDS, "q0"]
    assert run_eval(tmp_path / "over2", *dataset, "--episodes", "7", "--repeat", "2") == 2
    assert "makes 6 episodes" in capsys.readouterr().err


def test_repeat_needs_a_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_eval(tmp_path / "a", "--repeat", "2") == 2
    assert "drop --repeat" in capsys.readouterr().err
    assert main(["eval", "--out", str(tmp_path / "b"), "--suite", "code-v1", "--repeat", "2"]) == 2
    assert "fixes its episodes: drop --repeat" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("requested", "repeat", "records", "expected"),
    [
        (None, None, None, DEFAULT_EPISODES),
        (7, None, None, 7),
        (None, None, 40, 40),
        (25, None, 40, 25),
        (None, 3, 40, 120),
        (100, 3, 40, 100),
    ],
)
def test_episode_count(
    requested: int | None, repeat: int | None, records: int | None, expected: int
) -> None:
    assert episode_count(requested, repeat, records) == expected


@pytest.mark.parametrize(("requested", "repeat"), [(41, None), (121, 3)])
def test_episode_count_refuses_more_than_the_passes_hold(
    requested: int, repeat: int | None
) -> None:
    with pytest.raises(UsageError, match="--episodes"):
        episode_count(requested, repeat, 40)


def test_resume_keeps_a_dataset_runs_episodes_and_its_repeat(
    tmp_path: Path, dataset: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    common = (*dataset, "--max-turns", "1", "--repeat", "2")
    assert run_eval(out, *common) == 0
    assert settings_of(out)["repeat"] == 2
    rows = (out / "episodes.jsonl").read_text().splitlines(keepends=True)
    (out / "episodes.jsonl").write_text("".join(rows[:4]))  # as if killed after four episodes
    (out / "summary.json").unlink()

    assert run_eval(out, *dataset, "--max-turns", "1", "--repeat", "3", "--resume") == 2
    assert "--repeat 2 (now 3)" in capsys.readouterr().err
    assert run_eval(out, *common, "--resume") == 0
    assert "kept 4 finished episodes" in capsys.readouterr().err
    assert task_ids(out) == RECORDS * 2


# -- the served planner's requests ---------------------------------------------------------------


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeOpenAIServer, FakeOpenAIServer]]:
    """The planner's server and the frozen modules' (tools and judge included) server."""
    with FakeOpenAIServer(generic_responder()) as planner, FakeOpenAIServer() as modules:
        monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", modules.base_url)
        monkeypatch.setenv("AGENTFLOW_LLM_MODEL", "frozen")
        yield planner, modules


def eval_served(out: Path, planner: FakeOpenAIServer, *args: str) -> int:
    served = ("--planner", "openai", "--base-url", planner.base_url, "--model", "fake")
    common = ("--episodes", "1", "--max-turns", "1", "--no-budget-curve", "--quiet")
    return main(["eval", "--out", str(out), *served, *common, *args])


@pytest.mark.parametrize("preset", ["agentflow_eval", "agentflow_train"])
def test_the_planner_request_carries_2048_tokens_under_the_presets(
    tmp_path: Path, servers: tuple[FakeOpenAIServer, FakeOpenAIServer], preset: str
) -> None:
    planner, modules = servers
    assert eval_served(tmp_path / "out", planner, "--preset", preset) == 0
    assert planner.requests and modules.requests
    assert {request["max_tokens"] for request in planner.requests} == {2048}
    assert "top_p" not in planner.requests[0]  # no sampling beyond the temperature unless asked


def test_the_reply_cap_follows_the_env_or_max_tokens(
    tmp_path: Path, servers: tuple[FakeOpenAIServer, FakeOpenAIServer]
) -> None:
    planner, _ = servers
    assert eval_served(tmp_path / "a", planner, "--max-action-tokens", "96") == 0
    assert {request["max_tokens"] for request in planner.requests} == {96}
    planner.requests.clear()
    assert eval_served(tmp_path / "b", planner, "--max-tokens", "300") == 0
    assert {request["max_tokens"] for request in planner.requests} == {300}
    assert settings_of(tmp_path / "b")["max_tokens"] == 300


def test_sampling_agentflow_sends_agentflows_planner_sampling(
    tmp_path: Path, servers: tuple[FakeOpenAIServer, FakeOpenAIServer]
) -> None:
    planner, modules = servers
    assert eval_served(tmp_path / "out", planner, "--sampling", "agentflow") == 0
    sent = {
        key: planner.requests[0][key]
        for key in ("temperature", "top_p", "frequency_penalty", "presence_penalty")
    }
    assert sent == {
        "temperature": 0.7,
        "top_p": 0.99,
        "frequency_penalty": 1.2,
        "presence_penalty": 0.0,
    }
    assert all("top_p" not in request for request in modules.requests)  # the planner's only
    assert settings_of(tmp_path / "out")["sampling"] == "agentflow"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--planner", "openai", "--sampling", "agentflow", "--temperature", "0"),
            "drop --temperature",
        ),
        (("--planner", "random", "--sampling", "agentflow"), "--planner openai"),
    ],
)
def test_sampling_refuses_what_it_would_override(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    assert main(["eval", "--out", str(tmp_path / "o"), *args]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert not (tmp_path / "o").exists()


# -- the presets' limits -----------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["agentflow_eval", "agentflow_train"])
def test_the_presets_give_tools_two_minutes_and_the_planner_2048_tokens(preset: str) -> None:
    config = SearchEnvConfig.from_kwargs(preset=preset)
    assert (config.tool_timeout_s, config.max_action_tokens) == (120.0, 2048)
    given = SearchEnvConfig.from_kwargs(preset=preset, tool_timeout_s=30.0, max_action_tokens=512)
    assert (given.tool_timeout_s, given.max_action_tokens) == (30.0, 512)
    assert SearchEnvConfig.from_kwargs().tool_timeout_s == 10.0  # no preset: unchanged


@pytest.mark.parametrize("preset", ["agentflow_eval", "agentflow_train"])
def test_under_the_presets_every_model_tool_gets_its_two_minutes(
    preset: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The effective limit of a tool call is the smaller of the tool's own and the env's."""
    import gymnasium as gym

    monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", "http://127.0.0.1:9/v1")  # never called
    monkeypatch.setenv("AGENTFLOW_LLM_MODEL", "planner")
    env = gym.make("AgentFlow-Search-v0", preset=preset)
    session_limit = env.unwrapped.session_config.tool_timeout_s
    tools = env.unwrapped.tools
    model_tools = [tools.get(name) for name in tools.names]
    model_tools = [t for t in model_tools if getattr(t, "requires_llm", False)]
    assert model_tools  # the generalist, Python, Web RAG and Wikipedia tools call a model
    for tool in model_tools:
        assert min(tool.timeout_s, session_limit) >= 120.0, tool.name
    env.close()
