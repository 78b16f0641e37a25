"""The pure helpers of ``scripts/compare_with_agentflow.py`` (the script itself needs a real
AgentFlow checkout and is not run here)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "compare_with_agentflow.py"


@pytest.fixture(scope="module")
def compare() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compare_with_agentflow", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare_with_agentflow"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("left", "right", "where"),
    [
        ("a\nb\nc", "a\nb\nc", None),
        ("a\nbxc", "a\nbyc", (2, 2)),
        ("a\nb", "a\nb\nc", (3, None)),
        ("abc", "ab", (1, 3)),
    ],
)
def test_first_difference_finds_the_line_and_column(
    compare: ModuleType, left: str, right: str, where: tuple[int, int | None] | None
) -> None:
    diff = compare.first_difference(left, right)
    if where is None:
        assert diff is None
        return
    assert (diff["line"], diff["column"]) == where


def test_first_difference_without_text_keeps_only_locations(compare: ModuleType) -> None:
    diff = compare.first_difference("same\nmade-up words", "same\nother words", text=False)
    assert diff == {
        "differing_lines": 1,
        "line": 2,
        "column": 1,
        "agentflow_lines": 2,
        "package_lines": 2,
    }


def test_tally_counts_and_keeps_the_first_mismatches(compare: ModuleType) -> None:
    tally = compare.Tally(keep=1)
    assert tally.add("one", "x", "x", text=False)
    assert not tally.add("two", "x", "y", text=False)
    assert not tally.add("three", None, "y", text=False)
    result = tally.as_dict()
    assert (result["identical"], result["total"]) == (1, 3)
    assert [m["at"] for m in result["mismatches"]] == ["two"]


@pytest.mark.parametrize(
    ("text", "role"),
    [
        ("\n   Task: Sort the socks.\nmore", "analysis"),
        ("Task: Judge the socks.", "verifier"),
        ("Task: Something else.", "other"),
        ("", "other"),
    ],
)
def test_classify_by_first_line(compare: ModuleType, text: str, role: str) -> None:
    lines = {"analysis": "Task: Sort the socks.", "verifier": "Task: Judge the socks."}
    assert compare.classify(text, lines) == role


@pytest.mark.parametrize(
    ("model", "backend"),
    [
        ("gpt-4o-mini", "openai"),
        ("dashscope", "dashscope"),
        ("dashscope-qwen2.5-coder-7b-instruct", "dashscope"),
        ("vllm-Qwen/Qwen2.5-7B-Instruct", "vllm"),
        ("claude-3", "other"),
    ],
)
def test_backend_of_follows_the_factory_order(
    compare: ModuleType, model: str, backend: str
) -> None:
    assert compare.backend_of(model) == backend


def test_a_missing_module_gets_a_stand_in(compare: ModuleType) -> None:
    name = "compare_stand_in_pkg.sub"
    try:
        compare.install_stub(name)
        module = importlib.import_module(name)
        stand_in = module.Anything(1, key=2)
        assert stand_in.whatever().more is not None
        assert list(stand_in) == []

        child = type("Child", (module.Base,), {})  # subclassable, as AgentFlow's modules need
        assert child() is not None
    finally:
        for key in ("compare_stand_in_pkg.sub", "compare_stand_in_pkg"):
            sys.modules.pop(key, None)


def test_found_titles_reads_every_page_list_of_the_first_step(compare: ModuleType) -> None:
    steps = [
        {
            "result": [
                {
                    "query": "q",
                    "picked": [{"title": "Alpha", "url": "u"}],
                    "others": [{"title": "Beta"}, {"title": None}],
                }
            ]
        },
        {"result": [{"others": [{"title": "Gamma"}]}]},
    ]
    assert compare.found_titles(steps) == ["Alpha", "Beta"]
    assert compare.found_titles([{"result": "Error: no search"}]) == []
    assert compare.found_titles([]) == []
