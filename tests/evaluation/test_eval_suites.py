"""The published evaluation suites: frozen fingerprints, unique tasks, ``eval --suite`` and the
labels trainers' eval hooks run.

``PUBLISHED`` was computed once, when the suites were published. A failure here means the task
generator (or a suite's data) changed: published numbers no longer apply to that suite. Do not
update a digest; publish a new version of the suite (``-v2``) with its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from agentflow_env.base.tokens import load_default_tokenizer
from agentflow_env.cli import main
from agentflow_env.evaluation.eval_suite import (
    EvalSuite,
    SuiteChangedError,
    seed_range,
    seed_ranges,
    suite_fingerprint,
)
from agentflow_env.evaluation.suites import SUITES, UnknownSuiteError, get_suite, suite_specs
from agentflow_env.rollout.labels.spec import TaskSpec, TaskSpecError
from agentflow_env.rollout.training.driver import run_episodes
from agentflow_env.rollout.training.pool import EnvPool

PUBLISHED = {
    "search-h1-d0-v1": "ed582bc1d7e48b3b",
    "search-h1-d0.5-v1": "468ba1b8baa8f0f4",
    "search-h1-d1-v1": "f2ec4b739f4614b3",
    "search-h2-d0-v1": "9fff6c6e7725aff6",
    "search-h2-d0.5-v1": "980ecdf265b37be0",
    "search-h2-d1-v1": "8542522ca378924a",
    "search-h3-d0-v1": "b1f275b203d1cd3e",
    "search-h3-d0.5-v1": "f09c430c5a4d5e0f",
    "search-h3-d1-v1": "5e82d589b0bdf238",
    "search-h4-d0-v1": "181d54b68e92dd11",
    "search-h4-d0.5-v1": "e3cf129d3a51168b",
    "search-h4-d1-v1": "7b995c6d9b9db0d3",
    "code-v1": "538ad6f9bbcff381",
    "tiny-bridge-v1": "96c5fa0b93f78147",
}
TINY_KWARGS = {
    "hops": [1, 2],
    "kinds": "bridge",
    "fresh_world": True,
    "world_size": "small",
    "prompt_style": "compact",
    "max_turns": 4,
    "split": "test",
}


def test_every_published_suite_is_pinned_here() -> None:
    assert list(SUITES) == list(PUBLISHED)
    assert {name: s.fingerprint for name, s in SUITES.items()} == PUBLISHED
    assert get_suite("tiny-bridge-v1").settings() == TINY_KWARGS
    assert get_suite("search-h2-d0.5-v1").settings()["distractors"] == 0.5


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_a_suite_generates_its_published_tasks_each_once(name: str) -> None:
    suite = get_suite(name)
    tasks = suite.tasks()
    assert len(tasks) == suite.episodes
    assert suite_fingerprint(suite.env_id, suite.env_kwargs, suite.seeds, tasks) == PUBLISHED[name]
    ids = [task.task_id for task in tasks]
    assert len(set(ids)) == len(ids), "a task repeats within the suite"
    assert {task.split for task in tasks} == {"test"}
    hops = suite.env_kwargs.get("hops")
    if hops is not None:
        assert {task.hops for task in tasks} == set(hops if isinstance(hops, list) else [hops])


def test_a_changed_generator_is_caught_by_the_fingerprint() -> None:
    published = get_suite("search-h1-d0-v1")
    changed = EvalSuite(
        name="search-h1-d0-v1",
        env_id=published.env_id,
        env_kwargs={**published.settings(), "world_size": "default"},
        seeds=published.seeds[:3],
        fingerprint=published.fingerprint,
    )
    with pytest.raises(SuiteChangedError, match="published fingerprint"):
        changed.check_fingerprint()


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["eval", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("name", ["search-h3-d1-v1", "code-v1"])
def test_eval_runs_the_first_episodes_of_a_suite_with_the_expert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    suite = get_suite(name)
    out = tmp_path / "out"
    code, printed, _ = run_cli(capsys, "--suite", name, "--episodes", "2", "--out", str(out))
    assert code == 0 and "success rate" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env"] == suite.env_id and summary["suite"] == name
    assert summary["suite_fingerprint"] == PUBLISHED[name] and summary["episodes"] == 2
    assert summary["suite_complete"] is False and summary["settings_beyond_suite"] == {}
    assert summary["success_rate"]["value"] == 1.0
    rows = sorted(
        (json.loads(line) for line in (out / "episodes.jsonl").open()), key=lambda r: r["index"]
    )
    assert [row["seed"] for row in rows] == list(suite.seeds[:2])
    assert [row["task_id"] for row in rows] == [task.task_id for task in suite.tasks(limit=2)]


def test_an_unknown_suite_is_one_line_naming_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "--suite", "search-h9-v1", "--out", str(tmp_path / "o"))
    assert code == 2 and err.count("\n") == 1
    assert "unknown suite 'search-h9-v1'" in err
    assert all(name in err for name in PUBLISHED)
    assert not (tmp_path / "o").exists()
    with pytest.raises(UnknownSuiteError, match="tiny-bridge-v1"):
        get_suite("tiny-v1")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--hops", "2"], "drop --hops"),
        (["--max-turns", "3"], "drop --max-turns"),
        (["--distractors", "0.5"], "drop --distractors"),
        (["--seed", "4"], "drop --seed"),
        (["--episodes", "201"], "at most that"),
        (["--env", "AgentFlow-Code-v0"], "drop --env"),
    ],
)
def test_a_suite_fixes_its_tasks_seeds_and_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    args = ["--suite", "search-h2-d0-v1", "--out", str(tmp_path / "o"), *arguments]
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_list_suites_needs_no_output_folder(capsys: pytest.CaptureFixture[str]) -> None:
    code, printed, _ = run_cli(capsys, "--list-suites")
    assert code == 0
    for name, digest in PUBLISHED.items():
        assert f"{name}  (" in printed and digest in printed
    assert "seeds 11000000-11000159, 11000161-11000200" in printed  # code-v1 skips a repeat
    code, _, err = run_cli(capsys, "--suite", "code-v1")
    assert code == 2 and "--out is required" in err


def test_suite_labels_run_through_the_batched_driver() -> None:
    """What a trainer's eval hook does: the labels (or seed pairs) into ``run_episodes``."""
    tokenizer = load_default_tokenizer()
    nonsense = tokenizer.encode("I am not sure.") + [tokenizer.eos_token_id]

    def generate(
        prompts: Sequence[Sequence[int]], max_new_tokens: int
    ) -> tuple[list[list[int]], None]:
        return [list(nonsense) for _ in prompts], None

    specs = suite_specs("tiny-bridge-v1", limit=2)
    assert [TaskSpec.from_json(spec.to_json()) for spec in specs] == specs
    assert [spec.seed for spec in specs] == [2_000_000, 2_000_001]
    code = get_suite("code-v1")
    labels = [*specs, *code.task_specs(limit=1)]
    results = run_episodes(labels, generate, tokenizer, pool=EnvPool())
    assert [r.error for r in results] == [None, None, None]
    assert [r.turns for r in results] == [4, 4, 10]  # each suite's max_turns
    pairs = code.seed_pairs(limit=1)
    results = run_episodes(pairs, generate, tokenizer, pool=EnvPool(), env_id=code.env_id)
    assert results[0].error is None and results[0].turns == 10


def test_a_suite_is_checked_when_defined() -> None:
    kwargs = {"hops": 1, "split": "test"}
    with pytest.raises(ValueError, match="version suffix"):
        EvalSuite("search", "AgentFlow-Search-v0", kwargs, (1, 2), "0" * 16)
    with pytest.raises(ValueError, match="distinct"):
        EvalSuite("search-v1", "AgentFlow-Search-v0", kwargs, (1, 1), "0" * 16)
    with pytest.raises(TaskSpecError, match="hops"):
        EvalSuite("code-v9", "AgentFlow-Code-v0", kwargs, (1, 2), "0" * 16)
    suite = EvalSuite("search-v1", "AgentFlow-Search-v0", kwargs, (1, 2), "0" * 16)
    with pytest.raises(TypeError):
        suite.env_kwargs["hops"] = 2  # type: ignore[index]
    assert seed_range(5, 4, skip=[6]) == (5, 7, 8, 9)
    assert seed_ranges((5, 7, 8, 9, 12)) == "5, 7-9, 12"
