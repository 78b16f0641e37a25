"""The pre-flight check: sound configurations pass, broken ones fail naming the item."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from preflight_envs import (
    NEVER_STOPS_ID,
    SEARCH_DOWN,
    DroppingTokenizer,
    EchoTool,
    FirstLineTokenizer,
    NeverStopVerifier,
    RaisingInitializer,
    RaisingSearchTool,
    RaisingVerifier,
)

from agentflow_env.base.hf_tokens import HFChatTokenizer
from agentflow_env.cli import main
from agentflow_env.evaluation.preflight import ITEMS, PreflightReport, run_preflight

MEMORY, ACTION, TOOL, TOOL_ERRORS, TURN_LIMIT, VERIFIER, ENDS, ANSWER, TOKENS = ITEMS


def failed(report: PreflightReport) -> list[str]:
    return [item.name for item in report.failed]


def test_the_default_env_passes_every_item_with_evidence() -> None:
    report = run_preflight(seed=0)
    assert report.ok and failed(report) == []
    assert [item.name for item in report.items] == list(ITEMS)
    evidence = {item.name: item.evidence for item in report.items}
    assert "tools Search, Calculator" in evidence[MEMORY]
    assert "verification CONTINUE, no errors" in evidence[ACTION]
    assert "Search called with {'query':" in evidence[TOOL] and "tool_ok True" in evidence[TOOL]
    assert "INVALID" in evidence[TOOL_ERRORS] and "is empty" in evidence[TOOL_ERRORS]
    assert "ended at turn 10 (max_turns 10)" in evidence[TURN_LIMIT]
    assert "end_reason 'verifier_stop'" in evidence[VERIFIER]
    assert "turn limit: max_turns at turn 10" in evidence[ENDS]
    assert "success True" in evidence[ANSWER]
    assert "exactly the actions' ids" in evidence[TOKENS]
    env = gym.make("AgentFlow-Search-v0")
    observation, _ = env.reset(seed=0)
    env.close()
    facts = report.facts
    assert facts["first prompt tokens"] == len(observation["token_ids"])
    assert facts["tokenizer"] == "agentflow-bpe (BundledTokenizer)"
    assert facts["vocab size"] == 512
    assert set(facts["special/added tokens"]) == {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}
    assert facts["template closes assistant turns"].startswith("yes")
    assert facts["max_turns"] == 10 and facts["observation mode"] == "structured"
    assert facts["tools"] == ["Search", "Calculator"]
    assert facts["modules"]["verifier"] == "RuleVerifier"


def test_the_code_env_passes() -> None:
    report = run_preflight("AgentFlow-Code-v0", seed=1)
    assert report.ok, report.render()
    assert report.facts["tools"] == ["Python", "Calculator", "Search"]


def test_another_tokenizer_passes_and_its_facts_show(llama_style_hf_tokenizer) -> None:
    tokenizer = HFChatTokenizer(llama_style_hf_tokenizer, name="llama-style-test")
    report = run_preflight(tokenizer=tokenizer, hops=2)
    assert report.ok, report.render()
    assert report.facts["tokenizer"] == "llama-style-test (HFChatTokenizer)"
    assert "<|eot_id|>" in report.facts["special/added tokens"]
    assert "'<|eot_id|>'" in report.facts["template closes assistant turns"]


def test_a_tool_that_always_raises_fails_the_tool_item_with_its_error() -> None:
    report = run_preflight(tools=[RaisingSearchTool(), "Calculator"])
    assert not report.ok and TOOL in failed(report)
    assert SEARCH_DOWN in report.item(TOOL).evidence
    assert report.item(ACTION).passed and report.item(MEMORY).passed


def test_a_verifier_that_never_stops_fails_the_verifier_item() -> None:
    report = run_preflight(modules={"verifier": NeverStopVerifier()}, max_turns=4)
    assert failed(report) == [VERIFIER]
    assert "end_reason 'max_turns'" in report.item(VERIFIER).evidence
    assert report.item(TURN_LIMIT).passed and report.item(ENDS).passed


def test_a_template_that_rerenders_earlier_turns_fails_the_token_item_at_the_first_difference():
    report = run_preflight(tokenizer=FirstLineTokenizer())
    assert failed(report) == [TOKENS]
    evidence = report.item(TOKENS).evidence
    # The first action is cut to its first line when re-rendered: they part inside it.
    assert "the prompt after turn 1" in evidence and "in turn 1's action" in evidence
    assert "first at token" in evidence and "first differing character" in evidence


def test_a_template_that_drops_earlier_assistant_turns_fails_the_token_item_saying_so():
    report = run_preflight(tokenizer=DroppingTokenizer(), hops=1)
    assert failed(report) == [TOKENS]
    assert "drops the text of an earlier assistant turn" in report.item(TOKENS).evidence


def test_a_module_that_raises_fails_its_item_without_crashing_the_check() -> None:
    report = run_preflight(modules={"initializer": RaisingInitializer()}, hops=1)
    assert failed(report) == [MEMORY]
    assert "the initializer is broken" in report.item(MEMORY).evidence


def test_a_module_error_end_fails_the_ends_item() -> None:
    report = run_preflight(modules={"verifier": RaisingVerifier()}, hops=1)
    assert VERIFIER in failed(report) and ENDS in failed(report)
    evidence = report.item(ENDS).evidence
    assert "neither STOP nor a limit" in evidence and "the verifier is broken" in evidence


def test_when_every_tool_accepts_empty_arguments_a_raising_probe_is_recorded() -> None:
    report = run_preflight(tools=[EchoTool()], max_turns=3)
    item = report.item(TOOL_ERRORS)
    assert item.passed, item.evidence
    assert "every tool accepted empty arguments" in item.evidence
    assert "pre-flight probe: this tool always fails" in item.evidence
    assert ACTION in failed(report)  # the gold plan names Search, which this env lacks


def test_a_built_env_is_checked_and_left_needing_a_reset() -> None:
    env = gym.make("AgentFlow-Search-v0", hops=1, max_turns=3)
    report = run_preflight(env=env, seed=2)
    assert report.ok and report.env_id == "AgentFlow-Search-v0" and report.seed == 2
    assert report.facts["max_turns"] == 3
    with pytest.raises(gym.error.ResetNeeded):
        env.step("Tool Name: Search\nContext: x")
    env.reset(seed=0)  # still usable: not closed
    env.close()
    with pytest.raises(ValueError, match="not both"):
        run_preflight(env=env, hops=1)


def test_render_and_json_forms() -> None:
    report = run_preflight(modules={"verifier": NeverStopVerifier()}, max_turns=2)
    text = report.render()
    lines = text.splitlines()
    assert lines[0] == "Pre-flight check of AgentFlow-Search-v0 (seed 0)"
    assert any(line.startswith("FAIL  verifier stops") for line in lines)
    assert any(line.startswith("PASS  memory initialized") for line in lines)
    assert "Facts:" in lines and lines[-1].endswith(
        "checks failed: verifier stops, answer and reward emitted"
    )
    data = json.loads(json.dumps(report.as_dict()))
    assert data["ok"] is False
    assert [i["name"] for i in data["items"] if not i["passed"]] == failed(report)
    assert data["facts"]["tools"] == ["Search", "Calculator"]


def test_check_command_passes_on_the_default_env(capsys) -> None:
    assert main(["check", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "Pre-flight check of AgentFlow-Search-v0 (seed 3)" in out
    assert out.count("PASS  ") == len(ITEMS) and "All 9 checks passed." in out


def test_check_command_fails_naming_the_item_for_a_broken_registered_env(capsys) -> None:
    env_spec = f"preflight_envs:{NEVER_STOPS_ID}"
    assert main(["check", "--env", env_spec, "--max-turns", "3"]) == 1
    out = capsys.readouterr().out
    assert f"Pre-flight check of {NEVER_STOPS_ID}" in out
    assert "FAIL  verifier stops" in out and "checks failed: verifier stops" in out
    assert main(["check", "--env", env_spec, "--max-turns", "3", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert VERIFIER in [item["name"] for item in data["items"] if not item["passed"]]


def test_check_command_refuses_an_env_that_is_not_agentflow(capsys) -> None:
    assert main(["check", "--env", "CartPole-v1"]) == 2
    assert "agentflow-env check: error: --env CartPole-v1" in capsys.readouterr().err
