"""User mistakes on the ``agentflow-env run`` command line: one clear line on stderr, a non-zero
exit status, no traceback; a run whose modules all failed says so; ``--help`` shows defaults."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agentflow_env.cli import main

PREFIX = "agentflow-env run: error: "
AGENTFLOW_ENV = (
    "AgentFlow-Code-v0, AgentFlow-Probe-Copying-v0, AgentFlow-Probe-DelayedCredit-v0, "
    "AgentFlow-Probe-Stop-v0, AgentFlow-Probe-ToolChoice-v0, AgentFlow-Search-v0"
)
HOPS_ALLOWED = (
    "hops (documents a question needs) must be among [1, 2, 3, 4] "
    "(bridge: [1, 2, 3, 4], comparison: [2, 3, 4], arithmetic: [2, 3, 4])"
)


def _clean_environ() -> dict[str, str]:
    """This process's environment without endpoint settings that would change the outcome."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AGENTFLOW_") or key == "AGENTFLOW_ENV_CACHE"
    }


@pytest.fixture(autouse=True)
def _no_endpoint_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("AGENTFLOW_") and key != "AGENTFLOW_ENV_CACHE":
            monkeypatch.delenv(key)


def entry_point() -> list[str]:
    """The installed ``agentflow-env`` script (next to this Python), else the module."""
    script = Path(sys.executable).with_name("agentflow-env")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "agentflow_env.cli"]


def run_entry_point(*args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """``agentflow-env run ARGS`` in a fresh process; ``prelude`` runs first (via a wrapper)."""
    if prelude:
        code = f"{prelude}\nimport sys\nfrom agentflow_env.cli import main\nsys.exit(main())"
        command = [sys.executable, "-c", code, "run", *args]
    else:
        command = [*entry_point(), "run", *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=_clean_environ(), timeout=300
    )


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``main(["run", *args])``: its exit status (argparse's SystemExit too), stdout, stderr."""
    try:
        code = main(["run", *args])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def free_port() -> int:
    """A loopback port nothing listens on (bound once by the OS, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def assert_one_line_error(code: int, err: str, expected: str) -> None:
    assert code != 0
    assert "Traceback" not in err
    assert err == PREFIX + expected + "\n"


# -- through the real entry point --------------------------------------------------------------


def test_hops_zero_through_the_entry_point() -> None:
    done = run_entry_point("--hops", "0", "--episodes", "1")
    assert_one_line_error(
        done.returncode,
        done.stderr,
        f"invalid settings for AgentFlow-Search-v0: {HOPS_ALLOWED}, got [0]",
    )
    assert done.stdout == ""


def test_out_in_a_missing_directory_through_the_entry_point(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "runs.jsonl"
    done = run_entry_point("--out", str(target), "--episodes", "1")
    assert_one_line_error(
        done.returncode,
        done.stderr,
        f"--out {target}: the directory {target.parent} does not exist; create it first or "
        "write somewhere else",
    )
    assert not target.parent.exists()


def test_hf_planner_without_torch_through_the_entry_point(tmp_path: Path) -> None:
    done = run_entry_point(
        "--planner",
        f"hf:{tmp_path}",
        "--episodes",
        "1",
        prelude='import sys\nsys.modules["torch"] = None',
    )
    assert_one_line_error(
        done.returncode,
        done.stderr,
        f"--planner hf:{tmp_path}: HFPlanner needs torch and transformers, which cannot be "
        "imported here (import of torch halted; None in sys.modules): "
        'pip install torch "agentflow-env[hf]"',
    )


# -- through main() ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--kinds", "bridge,foo"],
            "invalid settings for AgentFlow-Search-v0: unknown kinds ['foo']; expected some of "
            "['bridge', 'comparison', 'arithmetic']",
        ),
        (
            ["--hops", "5"],
            f"invalid settings for AgentFlow-Search-v0: {HOPS_ALLOWED}, got [5]",
        ),
        (
            ["--env", "AgentFlow-Nope-v0"],
            f"unknown --env 'AgentFlow-Nope-v0': choose one of {AGENTFLOW_ENV}",
        ),
        (
            ["--env", "AgentFlow-Code-v0", "--hops", "2"],
            "AgentFlow-Code-v0 does not use hops=: it generates its own tasks (settings: kinds=, "
            "split=, fresh_world=, world_seed=, world_size=)",
        ),
        (
            ["--env", "AgentFlow-Code-v0", "--kinds", "bridge"],
            "invalid settings for AgentFlow-Code-v0: unknown kinds ['bridge']; expected some of "
            "['make24', 'fact_math', 'compute']",
        ),
        (
            ["--planner", "openai"],
            "--planner openai needs --model and --base-url "
            "(or set AGENTFLOW_LLM_MODEL and AGENTFLOW_LLM_BASE_URL)",
        ),
        (
            ["--planner", "openai", "--base-url", "http://127.0.0.1:8000/v1"],
            "--planner openai needs --model (or set AGENTFLOW_LLM_MODEL)",
        ),
        (
            ["--planner", "openai", "--model", "m", "--base-url", "127.0.0.1:8000"],
            "--base-url '127.0.0.1:8000' is not an http(s) URL: give one like "
            "http://127.0.0.1:8000/v1",
        ),
        (
            ["--planner", "bogus"],
            "unknown --planner 'bogus': choose expert, random, openai or hf:PATH "
            "(a local model directory)",
        ),
        (
            ["--planner", "hf:"],
            "--planner hf:PATH needs a model directory (or cached hub id) after hf:",
        ),
        (
            ["--modules", "llm"],
            "invalid settings for AgentFlow-Search-v0: no LLM endpoint configured for the "
            "initializer: missing ['base_url', 'model']; pass an LLMEndpoint or set "
            "AGENTFLOW_LLM_* or AGENTFLOW_INITIALIZER_* "
            "(e.g. AGENTFLOW_LLM_BASE_URL, AGENTFLOW_LLM_MODEL)",
        ),
    ],
)
def test_user_mistakes_print_one_line(capsys, args, expected) -> None:
    code, out, err = run_main(capsys, *args, "--episodes", "1", "--quiet")
    assert_one_line_error(code, err, expected)
    assert "Summary" not in out


def test_out_that_is_a_directory(capsys, tmp_path: Path) -> None:
    code, _, err = run_main(capsys, "--out", str(tmp_path), "--episodes", "1")
    assert_one_line_error(
        code,
        err,
        f"--out {tmp_path} is a directory: give a file path, e.g. {tmp_path / 'runs.jsonl'}",
    )


@pytest.mark.parametrize("given_as", ["flag", "variable"])
def test_unreachable_planner_endpoint(capsys, monkeypatch, given_as) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    args = ["--planner", "openai", "--model", "m", "--episodes", "1"]
    if given_as == "flag":
        args += ["--base-url", url]
        where = "--base-url"
    else:
        monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", url)
        where = "AGENTFLOW_PLANNER_BASE_URL / AGENTFLOW_LLM_BASE_URL"
    code, _, err = run_main(capsys, *args)
    assert_one_line_error(
        code,
        err,
        f"cannot reach the planner endpoint {url} (Connection refused): start the server "
        f"there or fix {where}",
    )


def test_planner_endpoint_that_rejects_the_model(capsys) -> None:
    from fake_openai_server import FakeOpenAIServer, Reply

    with FakeOpenAIServer(lambda role, request: Reply.error(404)) as server:
        code, out, err = run_main(
            capsys,
            *("--planner", "openai", "--model", "no-such-model", "--base-url", server.base_url),
            *("--episodes", "2", "--quiet"),
        )
        chat_url = server.base_url + "/chat/completions"
    assert_one_line_error(
        code,
        err,
        f"the planner's endpoint failed: no-such-model at {chat_url}: HTTP 404: "
        '{"error": {"message": "scripted 404"}}',
    )
    assert "Summary" not in out


def test_missing_local_model(capsys, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    missing = tmp_path / "no-model-here"
    code, _, err = run_main(capsys, "--planner", f"hf:{missing}", "--episodes", "1")
    assert code != 0 and "Traceback" not in err and err.count("\n") == 1
    assert err.startswith(
        f"{PREFIX}--planner hf:{missing}: no causal LM at '{missing}': give a local model "
        "directory (config.json and weights) or a Hugging Face model id already in the local "
        "cache ("
    )


def test_split_all_is_neither_offered_nor_accepted(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, _, err = run_main(capsys, "--split", "all")
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1
    assert err.startswith(f"{PREFIX}argument --split: invalid choice: 'all'")
    assert err.endswith("(see agentflow-env run --help)\n")
    code, out, _ = run_main(capsys, "--help")
    assert code == 0
    assert "--split {train,test}" in out and "all" not in out.split("--split")[1].split("\n")[0]


def test_bad_numbers_are_argument_errors(capsys) -> None:
    for flag in ("--episodes", "--max-turns"):
        code, _, err = run_main(capsys, flag, "0")
        assert code == 2 and "Traceback" not in err
        assert err == (
            f"{PREFIX}argument {flag}: must be a positive integer, got '0' "
            "(see agentflow-env run --help)\n"
        )


# -- the help ----------------------------------------------------------------------------------


def test_help_shows_the_defaults(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run_main(capsys, "--help")
    assert code == 0
    text = " ".join(out.split())
    for shown in (
        "--env ENV registered environment id (default: AgentFlow-Search-v0)",
        "--planner PLANNER expert | random | openai | hf:PATH (default: expert)",
        "--episodes EPISODES episodes to run (default: 3)",
        "--seed SEED episode i is reset with seed + i (default: 0)",
        "--split {train,test} task split (default: test)",
        # a default that differs between variants is given per variant
        "--max-turns MAX_TURNS planner turns per episode (default: 10 on AgentFlow-Search-v0, "
        "AgentFlow-Code-v0; 1 on AgentFlow-Probe-ToolChoice-v0,",
        "--modules {rule,llm} frozen modules (default: rule)",
        "--reward {exact_match,f1,llm_judge} episode reward (default: exact_match)",
    ):
        assert shown in text
    assert "(default: None)" not in text and "(default: False)" not in text


def test_retrieval_commands_show_defaults(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exit_:
        main(["serve-retriever", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--port PORT 0 picks a free port (default: 8000)" in text
    assert "--host HOST address to listen on (default: 127.0.0.1)" in text


# -- every episode ended on a module error -----------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "detail"),
    [
        ("error", 'HTTP 500: {"error": {"message": "scripted 500"}}'),
        ("malformed", "malformed JSON reply: Unterminated string"),
    ],
)
def test_all_episodes_on_a_module_error_say_so(capsys, monkeypatch, fault, detail) -> None:
    from fake_openai_server import FakeOpenAIServer, Reply

    reply = Reply.error(500) if fault == "error" else Reply.malformed()
    with FakeOpenAIServer(lambda role, request: reply) as server:
        monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("AGENTFLOW_LLM_MODEL", "fake")
        monkeypatch.setenv("AGENTFLOW_LLM_MAX_RETRIES", "0")
        code, out, err = run_main(
            capsys, "--modules", "llm", "--episodes", "2", "--hops", "1", "--quiet"
        )
        chat_url = server.base_url + "/chat/completions"
    assert code == 1
    assert "Traceback" not in err
    lines = out.splitlines()
    assert lines[0].startswith("Summary (expert planner, 2 episodes): success rate 0.0%")
    assert lines[1].startswith(
        "all 2 episodes ended on a module error: executor failed: LLMError: "
        f"fake at {chat_url}: 1 attempt(s) failed: attempt 1: {detail}"
    )
    assert len(lines) == 2


def test_some_episodes_on_a_module_error_are_counted(capsys, monkeypatch) -> None:
    from fake_openai_server import FakeOpenAIServer, Reply, generic_responder

    with FakeOpenAIServer(generic_responder(stop_after=1)) as server:
        server.push(Reply.error(500), role="executor")  # only the first episode's executor fails
        monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", server.base_url)
        monkeypatch.setenv("AGENTFLOW_LLM_MODEL", "fake")
        monkeypatch.setenv("AGENTFLOW_LLM_MAX_RETRIES", "0")
        code, out, err = run_main(
            capsys, "--modules", "llm", "--episodes", "2", "--hops", "1", "--quiet"
        )
    assert code == 0 and "Traceback" not in err
    lines = out.splitlines()
    assert lines[0].startswith("Summary (expert planner, 2 episodes): ")
    assert lines[1].startswith(
        "1 of 2 episodes ended on a module error; first: executor failed: LLMError: fake at "
    )
    assert "HTTP 500" in lines[1]


def test_summary_counts_module_errors() -> None:
    from agentflow_env.rollout.agents.episodes import EpisodeRecord, summarize

    def record(end_reason: str, errors: list[str]) -> EpisodeRecord:
        return EpisodeRecord(
            task_id="t",
            question="q",
            gold_answers=("a",),
            answer=None,
            success=False,
            reward=0.0,
            seed=0,
            end_reason=end_reason,
            module_errors=errors,
        )

    records = [
        record("verifier_stop", []),
        record("max_turns", ["generalist failed: boom"]),  # no answer could be written
        record("module_error", ["verifier failed: down", "generalist failed: down"]),
    ]
    summary = summarize(records)
    assert summary["module_error_episodes"] == 2
    assert summary["first_module_error"] == "generalist failed: boom"
    assert records[1].as_dict()["module_errors"] == ["generalist failed: boom"]
    clean = summarize(records[:1])
    assert clean["module_error_episodes"] == 0 and clean["first_module_error"] is None
