"""Each registered variant uses the settings it is given or rejects them: invalid values and
settings a variant would ignore raise ``ValueError`` naming what is allowed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import agentflow_env  # noqa: F401  (registers the environments)
from agentflow_env.tasks.code import FACT_MATH
from agentflow_env.tasks.synthetic import SyntheticTaskSource

CODE = "AgentFlow-Code-v0"
SEARCH = "AgentFlow-Search-v0"


def make(env_id: str, **kwargs: object) -> gym.Env:
    env = gym.make(env_id, **kwargs)
    return env


# -- AgentFlow-Code-v0 -------------------------------------------------------------------------


def test_code_rejects_the_settings_it_does_not_use() -> None:
    with pytest.raises(ValueError) as error:
        make(CODE, hops=3, world_seed=99, world_size="huge")
    message = str(error.value)
    assert message.startswith("AgentFlow-Code-v0 does not use hops=: it generates its own tasks")
    assert "world_seed=, world_size=)" in message  # named as settings it does use


@pytest.mark.parametrize(
    ("kwargs", "unused"),
    [
        ({"dataset": "qa.jsonl"}, "dataset="),
        ({"corpus": "wiki.jsonl", "dataset_limit": 3}, "corpus=, dataset_limit="),
        ({"task_source": SyntheticTaskSource()}, "task_source="),
    ],
)
def test_code_rejects_other_task_sources(kwargs: dict[str, object], unused: str) -> None:
    with pytest.raises(ValueError, match=f"^AgentFlow-Code-v0 does not use {re.escape(unused)}:"):
        make(CODE, **kwargs)


def test_code_uses_world_seed_and_world_size() -> None:
    rng = np.random.default_rng(0)
    small = make(CODE, kinds=FACT_MATH, world_seed=99, world_size="small")
    default = make(CODE, kinds=FACT_MATH, world_seed=99)
    try:
        small_task = small.unwrapped.task_source.sample(rng)
        default_task = default.unwrapped.task_source.sample(np.random.default_rng(0))
    finally:
        small.close()
        default.close()
    assert small_task.metadata["world_seed"] == default_task.metadata["world_seed"] == 99
    assert small_task.corpus is not None and default_task.corpus is not None
    assert len(small_task.corpus) < len(default_task.corpus)


def test_code_world_settings_need_fact_questions() -> None:
    with pytest.raises(ValueError) as error:
        make(CODE, kinds="make24", world_seed=5)
    assert str(error.value) == (
        "world_seed= only shape the world of fact_math questions, and kinds=['make24'] has "
        "none: add 'fact_math' to kinds or drop them"
    )
    with pytest.raises(ValueError, match="name the same world seed"):
        make(CODE, seed=1, world_seed=2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"world_size": "huge"},
            "world_size must be one of ['default', 'small'] (or None: 'small' with "
            "fresh_world=True, else 'default'), got 'huge'",
        ),
        (
            {"kinds": ["make24", "sudoku"]},
            "unknown kinds ['sudoku']; expected some of ['make24', 'fact_math', 'compute']",
        ),
        ({"kinds": []}, "no kinds; expected some of ['make24', 'fact_math', 'compute']"),
        ({"split": "all"}, "split must be one of ['train', 'test'], got 'all'"),
    ],
)
def test_code_invalid_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as error:
        make(CODE, **kwargs)
    assert str(error.value) == message


# -- AgentFlow-Search-v0: invalid values -------------------------------------------------------

HOPS = "[1, 2, 3, 4] (bridge: [1, 2, 3, 4], comparison: [2, 3, 4], arithmetic: [2, 3, 4])"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"world_size": "huge"},
            "world_size must be one of ['default', 'small'] (or None: 'small' with "
            "fresh_world=True, else 'default'), got 'huge'",
        ),
        ({"hops": 0}, f"hops (documents a question needs) must be among {HOPS}, got [0]"),
        ({"hops": [1, 7]}, f"hops (documents a question needs) must be among {HOPS}, got [7]"),
        ({"hops": True}, f"hops (documents a question needs) must be among {HOPS}, got [True]"),
        (
            {"kinds": ["bridge", "foo"]},
            "unknown kinds ['foo']; expected some of ['bridge', 'comparison', 'arithmetic']",
        ),
        ({"kinds": []}, "no kinds; expected some of ['bridge', 'comparison', 'arithmetic']"),
        ({"split": "all"}, "split must be one of ['train', 'test'], got 'all'"),
    ],
)
def test_search_invalid_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as error:
        make(SEARCH, **kwargs)
    assert str(error.value) == message


def test_search_valid_settings_still_build() -> None:
    env = make(SEARCH, hops=[1, 2], kinds="bridge", split="test", world_size="small")
    try:
        _, info = env.reset(seed=0)
        assert env.unwrapped.task.kind == "bridge" and env.unwrapped.task.hops in (1, 2)
        assert env.unwrapped.task.split == "test"
        assert info["question"]
    finally:
        env.close()


# -- AgentFlow-Search-v0: settings the chosen task source would ignore -------------------------


@pytest.fixture
def qa_file(tmp_path: Path) -> Path:
    qa = tmp_path / "qa_test.jsonl"
    qa.write_text(
        json.dumps({"id": "q1", "question": "Who wrote Zorblat?", "golden_answers": ["Mira"]})
        + "\n",
        encoding="utf-8",
    )
    return qa


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    wiki = tmp_path / "wiki.jsonl"
    wiki.write_text(
        json.dumps({"id": "d1", "contents": "Zorblat\nZorblat is a novel written by Mira."}) + "\n",
        encoding="utf-8",
    )
    return wiki


def test_dataset_without_corpus_is_refused(qa_file: Path, monkeypatch) -> None:
    monkeypatch.delenv("AGENTFLOW_RETRIEVER_URL", raising=False)
    with pytest.raises(ValueError) as error:
        make(SEARCH, dataset=str(qa_file))
    assert str(error.value) == (
        "dataset= without corpus= leaves the search tools nothing to search: pass corpus= "
        "(a corpus JSONL), or retriever_url= (a retriever server, see `agentflow-env "
        "serve-retriever`), or tools= without a local search tool"
    )
    with pytest.raises(ValueError, match="nothing to search"):  # AgentFlow's retrieval tool
        make(SEARCH, dataset=str(qa_file), tools=["Wikipedia_Search_Tool"])


def test_dataset_without_corpus_is_fine_when_nothing_searches_locally(
    qa_file: Path, monkeypatch
) -> None:
    monkeypatch.delenv("AGENTFLOW_RETRIEVER_URL", raising=False)
    closed_book = make(SEARCH, dataset=str(qa_file), tools=["Calculator"])
    remote = make(SEARCH, dataset=str(qa_file), retriever_url="http://127.0.0.1:9/retrieve")
    monkeypatch.setenv("AGENTFLOW_RETRIEVER_URL", "http://127.0.0.1:9/retrieve")
    from_variable = make(SEARCH, dataset=str(qa_file))
    try:
        for env in (closed_book, remote, from_variable):
            env.reset(seed=0)
            assert env.unwrapped.task.question == "Who wrote Zorblat?"
        assert closed_book.unwrapped.tools.names == ("Calculator",)
    finally:
        for env in (closed_book, remote, from_variable):
            env.close()


def test_dataset_with_corpus_builds(qa_file: Path, corpus_file: Path, tmp_path: Path) -> None:
    env = make(
        SEARCH,
        dataset=str(qa_file),
        corpus=str(corpus_file),
        dataset_limit=1,
        index_cache_dir=str(tmp_path / "indexes"),
    )
    try:
        env.reset(seed=0)
        assert env.unwrapped.task.corpus is not None and len(env.unwrapped.task.corpus) == 1
    finally:
        env.close()


def test_synthetic_settings_with_a_dataset_are_refused(qa_file: Path, corpus_file: Path) -> None:
    with pytest.raises(ValueError) as error:
        make(SEARCH, dataset=str(qa_file), corpus=str(corpus_file), hops=2, split="test")
    assert str(error.value) == (
        "hops=, split= only apply to the synthetic world, but the tasks come from dataset= "
        "(dataset_split= and dataset_limit= filter a dataset)"
    )


def test_synthetic_settings_with_tasks_are_refused() -> None:
    source = SyntheticTaskSource(hops=1)
    task = source.sample(np.random.default_rng(0))
    with pytest.raises(ValueError) as error:
        make(SEARCH, tasks=[task], world_seed=3, fresh_world=True)
    assert str(error.value) == (
        "world_seed=, fresh_world= only apply to the synthetic world, but the tasks come from "
        "tasks="
    )
    with pytest.raises(ValueError, match="^kinds= only apply .* come from task_source=$"):
        make(SEARCH, task_source=source, kinds="bridge")
    env = make(SEARCH, tasks=[task], split="train", world_seed=0)  # the defaults: nothing ignored
    env.close()


def test_dataset_settings_without_a_dataset_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as error:
        make(SEARCH, dataset_limit=5, index_cache_dir=str(tmp_path))
    assert str(error.value) == "dataset_limit=, index_cache_dir= only apply with dataset="
