"""``agentflow-env eval`` and ``ablate``: real episodes, the printed table, the files they write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAIServer, Reply, generic_responder

from agentflow_env.cli import main
from agentflow_env.workflow.turn_log import read_turn_log


def run_eval(capsys: pytest.CaptureFixture[str], out: Path, *args: str) -> tuple[int, str, dict]:
    code = main(["eval", "--out", str(out), "--quiet", *args])
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text()) if code == 0 else {}
    return code, printed, summary


def value(summary: dict, key: str) -> float | None:
    return summary[key]["value"]


def outcomes(summary: dict) -> dict:
    """A summary without the measured latencies (which differ from run to run)."""
    return {k: v for k, v in summary.items() if k not in ("modules", "tools")}


def test_expert_and_random_planners_over_300_seeded_episodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, printed, expert = run_eval(capsys, tmp_path / "expert", "--episodes", "300")
    assert code == 0
    assert "success rate" in printed and "100.0% [98.7, 100.0] (n=300)" in printed
    assert value(expert, "success_rate") == 1.0 and value(expert, "tool_selection_accuracy") == 1.0
    assert value(expert, "invalid_call_rate") == 0.0 and value(expert, "premature_stop_rate") == 0.0
    assert expert["success_by_budget"][-1]["value"] == 1.0
    assert expert["success_by_budget"][0]["value"] < 1.0  # multi-hop tasks need more turns

    code, printed, random = run_eval(
        capsys, tmp_path / "random", "--episodes", "300", "--planner", "random"
    )
    assert code == 0
    assert value(random, "success_rate") < 0.05
    assert value(random, "tool_selection_accuracy") < 0.5
    assert value(random, "invalid_call_rate") > 0.2
    assert random["end_reasons"] == {"max_turns": 300}

    rows = [json.loads(line) for line in (tmp_path / "random" / "episodes.jsonl").open()]
    assert sorted(row["seed"] for row in rows) == list(range(300))  # written as each ends
    log = read_turn_log(tmp_path / "random" / "turns.jsonl")
    assert log.bad_lines == 0 and len(log.complete) == 300
    assert sum(len(e.turns) for e in log.episodes) == 3000


def test_eval_is_reproducible_and_concurrency_does_not_change_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ("--episodes", "20", "--planner", "random", "--hops", "2")
    _, _, one = run_eval(capsys, tmp_path / "a", *common, "--concurrency", "1")
    _, _, many = run_eval(capsys, tmp_path / "b", *common, "--concurrency", "16")
    assert outcomes(one) == outcomes(many)


def test_the_code_env_knows_the_right_tool_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, summary = run_eval(
        capsys, tmp_path / "code", "--env", "AgentFlow-Code-v0", "--episodes", "20"
    )
    assert code == 0 and value(summary, "success_rate") == 1.0
    assert value(summary, "tool_selection_accuracy") == 1.0
    assert summary["tool_selection_accuracy"]["n"] >= 20


def test_eval_refuses_to_overwrite_an_earlier_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_eval(capsys, tmp_path, "--episodes", "2")[0] == 0
    before = (tmp_path / "turns.jsonl").read_bytes()
    assert main(["eval", "--out", str(tmp_path), "--episodes", "2", "--quiet"]) == 2
    error = capsys.readouterr().err
    assert "already holds" in error and "--resume" in error
    assert (tmp_path / "turns.jsonl").read_bytes() == before


def test_llm_modules_stop_prematurely_where_rule_modules_do_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verifier that says STOP after two steps, whatever they found, against the real client."""
    with FakeOpenAIServer(generic_responder(stop_after=2), delay_s=0.01) as server:
        monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("AGENTFLOW_LLM_MODEL", "fake")
        common = ("--episodes", "12", "--hops", "3", "--concurrency", "6")
        code, printed, llm = run_eval(capsys, tmp_path / "llm", *common, "--modules", "llm")
        assert code == 0
        assert server.max_in_flight > 1  # episodes ran concurrently through one client
        code, _, served = run_eval(
            capsys,
            tmp_path / "served",
            *common,
            "--planner",
            "openai",
            "--no-budget-curve",
            "--base-url",
            server.base_url,
            "--model",
            "fake",
        )
        assert code == 0
    assert value(llm, "premature_stop_rate") == 1.0 and llm["premature_stop_rate"]["n"] == 12
    assert llm["modules"]["verifier"]["completion_tokens_per_episode"] > 0
    assert llm["modules"]["executor"]["calls_per_episode"] == 2.0
    assert "success_by_budget" not in served
    assert value(served, "invalid_call_rate") == 0.0  # the scripted planner names Search
    assert served["tools"]["Search"]["calls_per_episode"] == 10.0


def test_ablate_writes_one_table_json_and_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    variants = tmp_path / "variants.json"
    variants.write_text(json.dumps({"no_calculator": {"tools": ["Search"]}}))
    code = main(
        [
            "ablate",
            *("--out", str(tmp_path / "out"), "--episodes", "40", "--quiet", "--hops", "2"),
            *("--variant", "base", "--variant", 'flat={"observation_mode": "flat"}'),
            *("--variant", 'budget1={"max_turns": 1}', "--variants", str(variants)),
            *("--variant", 'renamed={"tools": [{"name": "Search", "rename": "Lookup"}]}'),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    out = tmp_path / "out"
    results = json.loads((out / "results.json").read_text())
    summaries = results["summaries"]
    assert list(summaries) == ["no_calculator", "base", "flat", "budget1", "renamed"]
    assert results["variants"]["flat"] == {"observation_mode": "flat"}
    assert outcomes(summaries["flat"]) == outcomes(
        summaries["base"]
    )  # the same episodes, rendered differently
    assert value(summaries["base"], "success_rate") == 1.0
    assert value(summaries["budget1"], "success_rate") < 0.5
    assert value(summaries["renamed"], "success_rate") == 0.0  # the expert names the old tool
    assert value(summaries["renamed"], "invalid_call_rate") > 0.5
    table = (out / "results.md").read_text()
    assert table.count("\n| ") >= 11 and "| metric | no_calculator | base | flat |" in table
    assert (out / "ablation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "budget1" in printed
    runs = {e.run for e in read_turn_log(out / "turns.jsonl").episodes}
    assert runs == {"no_calculator", "base", "flat", "budget1", "renamed"}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ([], "give at least one --variant"),
        (["--variant", "x={not json"], "not JSON"),
        (["--variant", "x=[1]"], "JSON object"),
        (["--variant", 'x={"max_turns": 0}'], "max_turns"),
    ],
)
def test_ablate_rejects_bad_variants_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    code = main(["ablate", "--out", str(tmp_path / "o"), "--episodes", "1", *arguments])
    error = capsys.readouterr().err
    assert code == 2 and message in error and error.count("\n") == 1


def test_a_local_model_planner_runs_off_the_event_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_llama_dir: Path
) -> None:
    code, _, summary = run_eval(
        capsys,
        tmp_path / "hf",
        *("--planner", f"hf:{tiny_llama_dir}", "--episodes", "3", "--max-turns", "2"),
        *("--concurrency", "3", "--max-action-tokens", "16"),
    )
    assert code == 0 and summary["episodes"] == 3
    log = read_turn_log(tmp_path / "hf" / "turns.jsonl")
    turns = [t for e in log.episodes for t in e.turns]
    assert len(turns) == 6 and all(t["action"]["given_as_ids"] for t in turns)
    assert value(summary, "success_rate") == 0.0  # an untrained model


def test_a_dataset_is_evaluated_record_by_record_without_a_gold_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qa = [
        {
            "id": "q0",
            "question": "Who built the Eiffel Tower?",
            "golden_answers": ["Gustave Eiffel"],
        },
        {"id": "q1", "question": "What is the capital of France?", "golden_answers": ["Paris"]},
        {"id": "q2", "question": "Largest city in Switzerland?", "golden_answers": ["Zurich"]},
    ]
    corpus = [
        {
            "id": "1",
            "contents": "Eiffel Tower\nWrought-iron tower in Paris, built by Gustave Eiffel.",
        },
        {"id": "2", "contents": "Paris\nParis is the capital of France."},
        {"id": "3", "contents": "Zurich\nZurich is the largest city in Switzerland."},
    ]
    (tmp_path / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in qa))
    (tmp_path / "wiki.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    code, _, summary = run_eval(
        capsys,
        tmp_path / "out",
        *("--dataset", str(tmp_path / "qa.jsonl"), "--corpus", str(tmp_path / "wiki.jsonl")),
        *("--planner", "random", "--repeat", "2", "--max-turns", "2"),
    )
    assert code == 0 and summary["episodes"] == 6
    rows = [json.loads(line) for line in (tmp_path / "out" / "episodes.jsonl").open()]
    by_index = {row["index"]: row["task_id"] for row in rows}
    assert [by_index[i] for i in range(6)] == ["q0", "q1", "q2", "q0", "q1", "q2"]
    assert summary["tool_selection_accuracy"]["value"] is None  # no gold plan to judge by
    assert summary["tool_selection_accuracy"]["n"] == 0


def test_a_prompt_over_the_planners_context_ends_only_its_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The planner's server refuses the first episode's prompt as longer than its model's
    context (HTTP 400): that episode ends before its first turn (``prompt_budget``, the reason
    in its row), and the evaluation goes on (the real server's case: tests/llm/test_vllm_serving.py)."""
    message = "This model's maximum context length is 2048 tokens. However, your prompt ..."
    with FakeOpenAIServer(generic_responder()) as server:
        server.push(Reply(status=400, body=json.dumps({"error": {"message": message}})))
        served = ("--planner", "openai", "--base-url", server.base_url, "--model", "fake")
        code, _, summary = run_eval(
            capsys, tmp_path / "o", "--episodes", "3", "--concurrency", "1", *served
        )
    assert code == 0
    rows = sorted(
        (json.loads(line) for line in (tmp_path / "o" / "episodes.jsonl").open()),
        key=lambda row: row["index"],
    )
    assert rows[0]["diagnostics"]["end_reason"] == "prompt_budget"
    assert "HTTP 400" in rows[0]["planner_error"] and "maximum context" in rows[0]["planner_error"]
    assert rows[0]["diagnostics"]["turns"] == 0
    assert [row["planner_error"] for row in rows[1:]] == [None, None]
    assert summary["end_reasons"]["prompt_budget"] == 1 and summary["episodes"] == 3
