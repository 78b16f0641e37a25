"""A served planner and served modules against a real vLLM server (CPU build), whatever it writes.

The server (the ``vllm_server`` fixture, ``tests/vllm_server.py``) serves the tiny random Llama
of ``scripts/build_tiny_llama.py``: on the env's prompts its greedy replies stop at
``<|im_end|>``, stop at once (empty), are whitespace only or run to ``max_tokens``, and the
prompts (about 1,600 tokens with the bundled tokenizer) outgrow its 2,048-token context within a
few turns. Each of these is a recorded turn, module failure or episode end, never an aborted run.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
import vllm_server as server_module  # noqa: E402
from fake_openai_server import bounded  # noqa: E402
from vllm_server import VLLMServer  # noqa: E402

from agentflow_env.cli import main  # noqa: E402
from agentflow_env.envs.env import AgentFlowEnv  # noqa: E402
from agentflow_env.evaluation.runner import episode_task  # noqa: E402
from agentflow_env.llm import ChatClient, ContextLengthError, LLMEndpoint  # noqa: E402
from agentflow_env.modules import build_modules  # noqa: E402
from agentflow_env.modules.llm import NO_VERDICT_NOTE  # noqa: E402
from agentflow_env.rollout.agents.episodes import play_episode  # noqa: E402
from agentflow_env.rollout.agents.llm_planners import session_messages  # noqa: E402
from agentflow_env.rollout.agents.planners import ExpertPlanner  # noqa: E402
from agentflow_env.rollout.checks.fail_fast import FailFast, SystemicFailure  # noqa: E402
from agentflow_env.rollout.checks.failures import trajectory_failure  # noqa: E402
from agentflow_env.workflow.session import Session  # noqa: E402

pytestmark = pytest.mark.vllm
SEEDS = range(8)
EMPTY_ACTION = "The planner output is empty"


def endpoint(server: VLLMServer, **options: Any) -> LLMEndpoint:
    return LLMEndpoint(server.base_url, server.model, **{"timeout_s": 120.0, **options})


def served_planner(server: VLLMServer) -> list[str]:
    return ["--planner", "openai", "--base-url", server.base_url, "--model", server.model]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def first_prompts(env: gym.Env) -> list[list[dict[str, str]]]:
    """The chat messages of the first planner prompt of the episodes of ``SEEDS``."""
    prompts = []
    for seed in SEEDS:
        env.reset(seed=seed)
        prompts.append(session_messages(env.unwrapped.session))
    return prompts


def test_without_its_venv_the_server_fails_naming_the_install_script(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The fixture fails (it does not skip) where .venv-vllm is missing, saying what to run."""
    monkeypatch.setattr(server_module, "VLLM_VENV", tmp_path / "missing")
    with pytest.raises(server_module.VLLMServerError, match="bash scripts/install_vllm_env.sh"):
        server_module.start_vllm_server(tmp_path)
    assert not any(tmp_path.iterdir())  # it failed before building or starting anything


# -- the planner ---------------------------------------------------------------------------------
def test_a_blank_reply_is_the_models_answer_asked_once(vllm_server: VLLMServer) -> None:
    """A greedy request is never sent again for an empty or whitespace-only reply: it is the
    answer (the same request would get it again)."""
    env = gym.make("AgentFlow-Search-v0", split="test")
    prompts = first_prompts(env)
    env.close()
    client = ChatClient(endpoint(vllm_server, max_retries=3))

    async def ask_all() -> list[Any]:
        return await asyncio.gather(*(client.chat(p, max_tokens=24) for p in prompts))

    replies = bounded(ask_all(), timeout_s=300)
    blank = [reply for reply in replies if reply.blank]
    assert blank and len(blank) < len(replies)  # the model writes text on the other prompts
    assert any(reply.text == "" for reply in blank)  # stopped at <|im_end|> at once
    assert all(reply.attempts == 1 for reply in replies)
    assert {reply.finish_reason for reply in replies} <= {"stop", "length"}


def test_eval_records_every_reply_of_a_served_planner_and_goes_on(
    vllm_server: VLLMServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 37: an empty or whitespace-only reply aborted the evaluation ("the planner's
    endpoint failed: ... 4 attempt(s) failed: empty content"). Now each kind of reply is a
    recorded turn, and a prompt over the model's context ends only its episode."""
    out = tmp_path / "eval"
    code = main(
        [
            "eval",
            *served_planner(vllm_server),
            *("--episodes", str(len(SEEDS)), "--max-tokens", "24", "--max-action-tokens", "12"),
            *("--no-budget-curve", "--quiet", "--out", str(out)),
        ]
    )
    assert code == 0, capsys.readouterr().err
    rows = read_jsonl(out / "episodes.jsonl")
    assert sorted(row["index"] for row in rows) == list(SEEDS)
    turns = [line for line in read_jsonl(out / "turns.jsonl") if line["event"] == "turn"]
    blank = [turn for turn in turns if not turn["action"]["text"].strip()]
    assert any(turn["action"]["text"] == "" for turn in blank)
    assert any(turn["action"]["text"] for turn in blank)  # whitespace only
    assert all(any(EMPTY_ACTION in error for error in turn["errors"]) for turn in blank)
    assert not all(turn in blank for turn in turns)
    assert any(turn["action"]["cut"] for turn in turns)  # a reply longer than 12 tokens
    over = [row for row in rows if row["planner_error"]]
    assert over, "no prompt outgrew the context: the test no longer covers that case"
    for row in over:
        assert row["diagnostics"]["end_reason"] == "prompt_budget"
        assert "maximum context length is 2048 tokens" in row["planner_error"]
    ends = [line for line in read_jsonl(out / "turns.jsonl") if line["event"] == "episode_end"]
    assert sum(bool(end.get("planner_error")) for end in ends) == len(over)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == len(SEEDS)
    assert summary["end_reasons"]["prompt_budget"] >= len(over)


def test_run_goes_on_past_an_episode_over_the_context(
    vllm_server: VLLMServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "episodes.jsonl"
    code = main(
        ["run", *served_planner(vllm_server), "--episodes", "3", "--quiet", "--out", str(out)]
    )
    assert code == 0, capsys.readouterr().err
    records = read_jsonl(out)
    assert len(records) == 3
    over = [r for r in records if r["end_reason"] == "prompt_budget"]
    assert over, "no prompt outgrew the context: the test no longer covers that case"
    assert all(r["actions"] for r in over)  # it ended after some turns, not before the first


def test_a_wrong_planner_model_name_still_stops_the_evaluation(
    vllm_server: VLLMServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A setup error is not an episode's: a 404 for the model name ends the run at once."""
    code = main(
        [
            "eval",
            *("--planner", "openai", "--base-url", vllm_server.base_url, "--model", "no-such"),
            *("--episodes", "2", "--quiet", "--no-budget-curve", "--out", str(tmp_path / "o")),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "the planner's endpoint failed" in err and "HTTP 404" in err and "no-such" in err


# -- the modules -----------------------------------------------------------------------------------
def play_expert(env: AgentFlowEnv, seed: int) -> Session:
    async def play() -> Session:
        session = env.new_session(episode_task(env, 0, seed), seed=seed)
        await session.start()
        await play_episode(session, ExpertPlanner())
        return session

    return env.run_async(play())


def events(session: Session, kind: str) -> list[dict[str, Any]]:
    return [dict(event.payload) for event in session.memory.events if event.kind == kind]


def test_served_modules_record_every_kind_of_reply(vllm_server: VLLMServer) -> None:
    """Empty replies and prompts over the context are the module's recorded failure; replies
    cut at max_tokens or that do not parse are used as the docs say, and noted."""
    modules = build_modules("llm", endpoint=endpoint(vllm_server, max_tokens=48, max_retries=1))
    env = gym.make("AgentFlow-Search-v0", split="test", modules=modules).unwrapped
    try:
        sessions = [play_expert(env, seed) for seed in SEEDS]
    finally:
        env.close()
    assert all(session.done for session in sessions)
    errors = [e["error"] for s in sessions for e in events(s, "module_error")]
    assert any("ContextLengthError" in e and "maximum context length" in e for e in errors)
    assert any("empty or whitespace only" in e for e in errors)
    assert all("attempt(s)" not in e or "1 attempt(s)" in e for e in errors)  # asked once
    outputs = [e for s in sessions for e in events(s, "module_output")]
    assert any(e["truncated"] and e["finish_reason"] == "length" for e in outputs)
    executor = [e for e in outputs if e["module"] == "executor"]
    assert executor and all(e["note"].startswith("unusable executor output") for e in executor)
    verdicts = [e for s in sessions for e in events(s, "verification")]
    assert any(NO_VERDICT_NOTE in str(e) and e["stop"] is False for e in verdicts)
    failed = [s for s in sessions if s.outcome and s.outcome.end_reason == "module_error"]
    assert failed and all(s.outcome and s.outcome.module_errors for s in failed)


def test_served_modules_via_the_environment_in_eval(
    vllm_server: VLLMServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTFLOW_LLM_BASE_URL", vllm_server.base_url)
    monkeypatch.setenv("AGENTFLOW_LLM_MODEL", vllm_server.model)
    monkeypatch.setenv("AGENTFLOW_LLM_MAX_TOKENS", "48")
    out = tmp_path / "eval"
    code = main(
        [
            "eval",
            *("--planner", "expert", "--modules", "llm", "--episodes", "4"),
            *("--no-budget-curve", "--quiet", "--out", str(out)),
        ]
    )
    captured = capsys.readouterr()
    rows = read_jsonl(out / "episodes.jsonl")
    assert len(rows) == 4  # every episode ran to its recorded end
    failed = [row for row in rows if row["module_errors"]]
    assert code == (1 if len(failed) == len(rows) else 0)
    if code:
        assert f"all {len(rows)} episodes ended on a module error" in captured.err


def test_a_wrong_module_model_name_is_named_by_fail_fast(vllm_server: VLLMServer) -> None:
    """The trainers' guard still tells a setup error (404 for the model name) from an episode's
    failure: three trajectories failing the same way stop the run, naming the endpoint."""
    wrong = LLMEndpoint(vllm_server.base_url, "no-such-model", timeout_s=120.0)
    modules = build_modules("llm", endpoint=wrong)
    env = gym.make("AgentFlow-Search-v0", split="test", modules=modules).unwrapped
    guard = FailFast(limit=3)
    try:
        with pytest.raises(SystemicFailure) as caught:
            for seed in SEEDS:
                guard.record(trajectory_failure(play_expert(env, seed)))
    finally:
        env.close()
    message = str(caught.value)
    assert "first 3 trajectories" in message and "HTTP 404" in message
    assert "no-such-model" in message and "module endpoint" in message


def test_a_prompt_over_the_context_is_a_context_length_error(vllm_server: VLLMServer) -> None:
    client = ChatClient(endpoint(vllm_server, max_retries=2))
    long = [{"role": "user", "content": "word " * 3000}]
    with pytest.raises(ContextLengthError, match="HTTP 400.*maximum context length"):
        bounded(client.chat(long, max_tokens=8), timeout_s=120)
